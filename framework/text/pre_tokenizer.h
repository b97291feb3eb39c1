// tokenizer.json "pre_tokenizer": cuts normalized text into the pieces BPE runs on. Supported:
// ByteLevel (GPT-2's regex when use_regex, the byte alphabet), Split (a family's regex or string,
// every delimiter behavior, invert), Digits, Metaspace (SentencePiece's ▁, prepend schemes) and
// Sequence of them. Any other type is refused when the file is loaded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::text {

struct PreToken {
  std::string text;
  // The piece begins at offset 0 of the original input (Metaspace's prepend_scheme "first").
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their sub-pieces; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// Metaspace's fields, shared by the pre-tokenizer and the decoder: the replacement (one
// character) and when a piece gets it prepended.
enum class PrependScheme { kAlways, kNever, kFirst };
std::string parse_metaspace_replacement(const nlohmann::json& value, const std::string& where);
PrependScheme parse_metaspace_prepend_scheme(const nlohmann::json& value, const std::string& where);

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& value,
                                                  const std::string& where, int depth = 0);

}  // namespace mg::text
