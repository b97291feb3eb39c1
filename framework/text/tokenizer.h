// A Hugging Face tokenizer.json, loaded and run as the `tokenizers` library runs it (docs/
// tokenizer.md): added tokens split out first (on the raw text, then on the normalized text),
// then the normalizer, the pre-tokenizer, BPE, and the post-processor's special tokens; decoding
// maps ids to token strings (skipping special ones on request) and runs the decoder.
//
// Everything a file may hold that this class does not implement is refused at load with one
// mg::Error naming the file and the field; sizes are bounded (tokenizer_json.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "framework/text/token_trie.h"

namespace mg::text {

class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;

// Input of one encode call: larger text is refused (a prompt of 16 MiB is ~4M tokens, beyond
// any context we run).
inline constexpr size_t kMaxEncodeBytes = 16u << 20;

class Tokenizer {
 public:
  // Loads `path`. Throws mg::Error "<path>: <field>: <what>" for anything wrong or unsupported.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& path);
  // The same from text; `name` stands for the file in errors.
  static std::unique_ptr<Tokenizer> parse(std::string_view json, const std::string& name);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // `text` is bytes: ill-formed UTF-8 is replaced by U+FFFD first, as Python's
  // bytes.decode("utf-8", "replace") does. add_special_tokens: the post-processor's (BOS, EOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Ids without a token are skipped (as tokenizers does).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Largest id + 1 over the vocabulary and the added tokens.
  int64_t id_bound() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of `id` (an added token's content), nullopt for none.
  std::optional<std::string> id_to_token(int32_t id) const;

  const std::string& name() const { return name_; }

 private:
  struct AddedToken {
    int32_t id;
    std::string content;
    std::string match;  // what is searched for: the content, normalized when `normalized`
    bool special;
    bool normalized;
    bool lstrip;
    bool rstrip;
  };
  // One piece of the input during encoding: text still to run through the model, or an added
  // token already found.
  struct Segment {
    std::string text;
    int32_t added_id;  // -1: text
    bool at_start;
  };
  // A post-processor step: ids before and after the sequence (TemplateProcessing's single).
  struct Template {
    std::vector<int32_t> before;
    std::vector<int32_t> after;
  };

  Tokenizer() = default;
  void load_added_tokens(const void* json);
  void split_added(std::vector<Segment>& segments, bool normalized) const;
  // The token string decode uses for `id`, nullptr for none.
  const std::string* decode_token(int32_t id) const;

  std::string name_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<Template> post_;
  std::vector<AddedToken> added_;
  std::vector<int32_t> added_by_id_;           // id -> index into added_, -1 for none
  std::vector<std::string> special_contents_;  // sorted: contents of special added tokens
  // The `match` strings of the added tokens (values: indices into added_), for the raw and the
  // normalized search.
  TokenTrie raw_trie_;
  TokenTrie normalized_trie_;
};

// Streaming decode for generation: each step takes one id and returns the new text once it
// is whole (never half a UTF-8 character: a text ending in U+FFFD waits for more ids). The
// algorithm of tokenizers' DecodeStream, so the chunks equal its chunks.
class DecodeStream {
 public:
  DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

  struct Step {
    std::optional<std::string> text;  // new text, if any
    // The text decoded so far no longer starts with the prefix the stream keeps (a decoder
    // that strips the first token's space, a byte-fallback run that grew): tokenizers raises an
    // error here and keeps its state; so does this (no text). A caller that must not lose text
    // compares Tokenizer::decode of all ids with what it printed at the end.
    bool invalid_prefix = false;
  };
  Step step(int32_t id);

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  std::string prefix_;
  size_t prefix_index_ = 0;
};

}  // namespace mg::text
