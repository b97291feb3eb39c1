#include "framework/text/tokenizer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/io/json.h"
#include "framework/io/mmap_file.h"
#include "framework/text/bpe_model.h"
#include "framework/text/decoder.h"
#include "framework/text/normalizer.h"
#include "framework/text/pre_tokenizer.h"
#include "framework/text/tokenizer_json.h"
#include "framework/text/utf8.h"

namespace mg::text {

namespace {

// Byte length of the run of Unicode white space at the end / start of `text`.
size_t trailing_space(std::string_view text) {
  size_t end_of_word = 0;  // end of the last character that is not white space
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = utf8_char_length(text, pos);
    if (!is_unicode_white_space(utf8_decode_at(text, pos))) end_of_word = pos + n;
    pos += n;
  }
  return text.size() - end_of_word;
}

size_t leading_space(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size() && is_unicode_white_space(utf8_decode_at(text, pos))) {
    pos += utf8_char_length(text, pos);
  }
  return pos;
}

// tokenizers' post_processor, reduced to the ids one sequence gets before and after it.
void parse_post_processor(const nlohmann::json& value, const std::string& where, int depth,
                          std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>& out) {
  if (depth > kMaxNesting) json_fail(where, "Sequence nested too deeply");
  const std::string type = json_string_field(value, "type", where);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const std::string path = json_path(where, "processors");
    const nlohmann::json& items = json_array_field(value, "processors", where, kMaxSequenceItems);
    for (size_t i = 0; i < items.size(); ++i) {
      parse_post_processor(items[i], json_path(path, i), depth + 1, out);
    }
    return;
  }
  if (type == "TemplateProcessing") {
    const std::string specials_path = json_path(where, "special_tokens");
    const nlohmann::json& specials = json_field(value, "special_tokens", where);
    if (!specials.is_object()) json_fail(specials_path, "expected an object");
    const std::string single_path = json_path(where, "single");
    const nlohmann::json& single = json_array_field(value, "single", where, kMaxSequenceItems);
    std::vector<int32_t> before;
    std::vector<int32_t> after;
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string item_path = json_path(single_path, i);
      const nlohmann::json& item = single[i];
      if (item.is_object() && item.contains("Sequence")) {
        const std::string id = json_string_field(item["Sequence"], "id", item_path + ".Sequence");
        if (id != "A" || seen_sequence) {
          json_fail(item_path, "a single-sequence template holds sequence A exactly once");
        }
        seen_sequence = true;
        continue;
      }
      if (!(item.is_object() && item.contains("SpecialToken"))) {
        json_fail(item_path, fmt::format("expected {{\"SpecialToken\": ...}} or "
                                         "{{\"Sequence\": ...}}, found {}",
                                         json_brief(item)));
      }
      const std::string name =
          json_string_field(item["SpecialToken"], "id", item_path + ".SpecialToken");
      const nlohmann::json* special = json_field_opt(specials, name, specials_path);
      if (special == nullptr) {
        json_fail(item_path, fmt::format("special token '{}' is not in special_tokens", name));
      }
      const std::string special_path = json_path(specials_path, name);
      const nlohmann::json& ids = json_array_field(*special, "ids", special_path, 64);
      for (size_t k = 0; k < ids.size(); ++k) {
        if (!ids[k].is_number_integer() || ids[k].get<int64_t>() < 0 ||
            ids[k].get<int64_t>() >= kMaxVocabEntries + kMaxAddedTokens) {
          json_fail(json_path(special_path, "ids"),
                    fmt::format("expected token ids, found {}", json_brief(ids)));
        }
        (seen_sequence ? after : before).push_back(static_cast<int32_t>(ids[k].get<int64_t>()));
      }
    }
    if (!seen_sequence) json_fail(single_path, "the template has no sequence $A");
    out.emplace_back(std::move(before), std::move(after));
    return;
  }
  json_fail(json_path(where, "type"),
            fmt::format("post-processor type '{}' is not supported (supported: "
                        "TemplateProcessing, ByteLevel, Sequence)",
                        type));
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> file = MappedFile::open(path);
  MG_CHECK(file->size() <= static_cast<size_t>(kMaxTokenizerFileBytes),
           "{}: {} bytes; a tokenizer.json of more than {} MiB is refused", path.string(),
           file->size(), kMaxTokenizerFileBytes >> 20);
  return parse(file->text(), path.string());
}

std::unique_ptr<Tokenizer> Tokenizer::parse(std::string_view text, const std::string& name) {
  MG_CHECK(text.size() <= static_cast<size_t>(kMaxTokenizerFileBytes),
           "{}: {} bytes; a tokenizer.json of more than {} MiB is refused", name, text.size(),
           kMaxTokenizerFileBytes >> 20);
  const nlohmann::json root = parse_json(text, name);
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->name_ = name;
  if (!root.is_object()) json_fail(name, "expected a JSON object (a Hugging Face tokenizer.json)");
  for (const char* key : {"truncation", "padding"}) {
    if (json_field_opt(root, key, name) != nullptr) {
      json_fail(json_path(name, key),
                fmt::format("{} is not supported (expected null): moegraph neither truncates nor "
                            "pads prompts",
                            key));
    }
  }
  t->model_ = std::make_unique<BpeModel>(json_field(root, "model", name), json_path(name, "model"));
  if (const nlohmann::json* n = json_field_opt(root, "normalizer", name)) {
    t->normalizer_ = parse_normalizer(*n, json_path(name, "normalizer"));
  }
  if (const nlohmann::json* p = json_field_opt(root, "pre_tokenizer", name)) {
    t->pre_tokenizer_ = parse_pre_tokenizer(*p, json_path(name, "pre_tokenizer"));
  }
  if (const nlohmann::json* d = json_field_opt(root, "decoder", name)) {
    t->decoder_ = parse_decoder(*d, json_path(name, "decoder"));
  }
  if (const nlohmann::json* p = json_field_opt(root, "post_processor", name)) {
    std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> steps;
    parse_post_processor(*p, json_path(name, "post_processor"), 0, steps);
    for (auto& [before, after] : steps) t->post_.push_back({std::move(before), std::move(after)});
  }
  t->load_added_tokens(&root);
  return t;
}

// As tokenizers deserializes added_tokens (AddedVocabulary::add_tokens): the file's "id" is not
// used; a token gets the id its content already has (an earlier added token, the vocabulary),
// else the next free one counting from the vocabulary's size; a later entry with the same
// content replaces the earlier one's options; an empty content is ignored.
void Tokenizer::load_added_tokens(const void* json) {
  const auto& root = *static_cast<const nlohmann::json*>(json);
  const nlohmann::json* list = json_field_opt(root, "added_tokens", name_);
  const std::string path = json_path(name_, "added_tokens");
  std::unordered_map<std::string, int32_t> id_of_content;
  std::map<int32_t, AddedToken> by_id;
  int64_t next_id = model_->vocab_entries();
  if (list != nullptr) {
    json_array_field(root, "added_tokens", name_, kMaxAddedTokens);
    int64_t total_bytes = 0;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string where = json_path(path, i);
      const nlohmann::json& a = (*list)[i];
      AddedToken token;
      json_int_field(a, "id", where, 0, std::numeric_limits<uint32_t>::max());
      token.content = json_string_field(a, "content", where);
      token.special = json_bool_field(a, "special", where, false);
      token.normalized = json_bool_field(a, "normalized", where, !token.special);
      token.lstrip = json_bool_field(a, "lstrip", where, false);
      token.rstrip = json_bool_field(a, "rstrip", where, false);
      if (json_bool_field(a, "single_word", where, false)) {
        json_fail(json_path(where, "single_word"), "single_word added tokens are not supported");
      }
      if (token.content.empty()) continue;
      token.match = token.content;
      if (token.normalized && normalizer_) normalizer_->normalize(token.match);
      if (token.match.empty()) json_fail(where, "the added token normalizes to nothing");
      if (token.match.size() > static_cast<size_t>(kMaxAddedTokenBytes)) {
        json_fail(json_path(where, "content"),
                  fmt::format("an added token of {} bytes (at most {} are taken)",
                              token.match.size(), kMaxAddedTokenBytes));
      }
      total_bytes += static_cast<int64_t>(token.match.size());
      if (total_bytes > kMaxAddedTokensTotalBytes) {
        json_fail(path, fmt::format("the added tokens hold more than {} MiB of text",
                                    kMaxAddedTokensTotalBytes >> 20));
      }
      int32_t id = -1;
      if (const auto it = id_of_content.find(token.content); it != id_of_content.end()) {
        id = it->second;
      } else if (const auto in_vocab = model_->token_to_id(token.content)) {
        id = *in_vocab;
      } else {
        id = static_cast<int32_t>(next_id++);
      }
      token.id = id;
      id_of_content[token.content] = id;
      if (token.special) special_contents_.push_back(token.content);
      by_id.insert_or_assign(id, std::move(token));
    }
  }
  int64_t bound = model_->id_bound();
  if (!by_id.empty()) bound = std::max<int64_t>(bound, by_id.rbegin()->first + 1);
  added_by_id_.assign(static_cast<size_t>(bound), -1);
  for (auto& [id, token] : by_id) {
    added_by_id_[id] = static_cast<int32_t>(added_.size());
    (token.normalized ? normalized_trie_ : raw_trie_)
        .insert(token.match, static_cast<int32_t>(added_.size()));
    added_.push_back(std::move(token));
  }
  std::sort(special_contents_.begin(), special_contents_.end());
  special_contents_.erase(std::unique(special_contents_.begin(), special_contents_.end()),
                          special_contents_.end());
  for (const Template& t : post_) {
    for (const auto* ids : {&t.before, &t.after}) {
      for (int32_t id : *ids) {
        MG_CHECK(decode_token(id) != nullptr,
                 "{}: post_processor: special token id {} is neither in the vocabulary nor an "
                 "added token",
                 name_, id);
      }
    }
  }
}

// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches of the added tokens of one
// kind (normalized or not) in every text segment; lstrip/rstrip take the white space beside a
// match into it.
void Tokenizer::split_added(std::vector<Segment>& segments, bool normalized) const {
  const TokenTrie& trie = normalized ? normalized_trie_ : raw_trie_;
  std::vector<Segment> out;
  for (Segment& seg : segments) {
    if (seg.added_id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::string& s = seg.text;
    size_t start_offset = 0;
    const auto emit_text = [&](size_t a, size_t b) {
      if (b > a) out.push_back({s.substr(a, b - a), -1, seg.at_start && a == 0});
    };
    for (size_t pos = 0; pos < s.size() && !trie.empty();) {
      const TokenTrie::Match m = trie.longest_at(s, pos);
      if (m.value < 0) {
        ++pos;
        continue;
      }
      const AddedToken* best = &added_[m.value];
      size_t start = pos;
      size_t stop = pos + best->match.size();
      if (best->lstrip) {
        start =
            std::max(start - trailing_space(std::string_view(s).substr(0, start)), start_offset);
      }
      if (best->rstrip) stop += leading_space(std::string_view(s).substr(stop));
      emit_text(start_offset, start);
      out.push_back({s.substr(start, stop - start), best->id, false});
      start_offset = stop;
      pos += best->match.size();
    }
    emit_text(start_offset, s.size());
  }
  segments = std::move(out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  MG_CHECK(input.size() <= kMaxEncodeBytes,
           "{}: text of {} bytes to encode; at most {} MiB per call", name_, input.size(),
           kMaxEncodeBytes >> 20);
  std::vector<Segment> segments;
  segments.push_back({utf8_lossy(input), -1, true});
  split_added(segments, false);
  if (normalizer_) {
    for (Segment& seg : segments) {
      if (seg.added_id < 0) normalizer_->normalize(seg.text);
    }
  }
  split_added(segments, true);

  std::vector<int32_t> ids;
  for (const Segment& seg : segments) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
      continue;
    }
    if (seg.text.empty()) continue;
    std::vector<PreToken> pieces{{seg.text, seg.at_start}};
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
    for (const PreToken& p : pieces) model_->tokenize(p.text, ids);
  }
  if (add_special_tokens) {
    for (const Template& t : post_) {
      std::vector<int32_t> with;
      with.reserve(t.before.size() + ids.size() + t.after.size());
      with.insert(with.end(), t.before.begin(), t.before.end());
      with.insert(with.end(), ids.begin(), ids.end());
      with.insert(with.end(), t.after.begin(), t.after.end());
      ids = std::move(with);
    }
  }
  return ids;
}

const std::string* Tokenizer::decode_token(int32_t id) const {
  if (id >= 0 && id < static_cast<int64_t>(added_by_id_.size()) && added_by_id_[id] >= 0) {
    return &added_[added_by_id_[id]].match;
  }
  return model_->id_to_token(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = decode_token(id);
    if (token == nullptr) continue;
    if (skip_special_tokens &&
        std::binary_search(special_contents_.begin(), special_contents_.end(), *token)) {
      continue;
    }
    tokens.push_back(*token);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

int64_t Tokenizer::id_bound() const {
  return static_cast<int64_t>(added_by_id_.size());
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_) {
    if (a.content == token) return a.id;
  }
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id >= 0 && id < static_cast<int64_t>(added_by_id_.size()) && added_by_id_[id] >= 0) {
    return added_[added_by_id_[id]].content;
  }
  const std::string* t = model_->id_to_token(id);
  if (t == nullptr) return std::nullopt;
  return *t;
}

DecodeStream::Step DecodeStream::step(int32_t id) {
  const auto ends_incomplete = [](const std::string& s) { return s.ends_with(kReplacementChar); };
  if (prefix_.empty() && !ids_.empty()) {
    std::string new_prefix = tokenizer_.decode(ids_, skip_special_);
    if (!ends_incomplete(new_prefix)) {
      prefix_ = std::move(new_prefix);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  std::string text = tokenizer_.decode(ids_, skip_special_);
  if (text.size() > prefix_.size() && !ends_incomplete(text)) {
    if (!text.starts_with(prefix_)) return {std::nullopt, true};
    std::string new_text = text.substr(prefix_.size());
    const size_t new_prefix_index = ids_.size() - prefix_index_;
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_ = tokenizer_.decode(ids_, skip_special_);
    prefix_index_ = new_prefix_index;
    return {std::move(new_text), false};
  }
  return {};
}

}  // namespace mg::text
