#include "framework/text/bpe_model.h"

#include <queue>

#include "framework/core/error.h"
#include "framework/io/json.h"
#include "framework/text/tokenizer_json.h"
#include "framework/text/utf8.h"

namespace mg::text {

BpeModel::BpeModel(const nlohmann::json& value, const std::string& where) {
  const std::string type = json_string_field(value, "type", where);
  if (type != "BPE") {
    json_fail(json_path(where, "type"),
              fmt::format("model type '{}' is not supported (supported: BPE)", type));
  }
  // Options that change what BPE produces and that none of the imported families uses.
  if (const nlohmann::json* d = json_field_opt(value, "dropout", where)) {
    if (!d->is_number() || d->get<double>() != 0.0) {
      json_fail(json_path(where, "dropout"),
                fmt::format("BPE dropout {} makes encoding random; only null or 0 is supported",
                            json_brief(*d)));
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const nlohmann::json* v = json_field_opt(value, key, where)) {
      if (!(v->is_string() && v->get_ref<const std::string&>().empty())) {
        json_fail(
            json_path(where, key),
            fmt::format("{} (found {}) is not supported; only null or \"\"", key, json_brief(*v)));
      }
    }
  }
  fuse_unk_ = json_bool_field(value, "fuse_unk", where, false);
  byte_fallback_ = json_bool_field(value, "byte_fallback", where, false);
  ignore_merges_ = json_bool_field(value, "ignore_merges", where, false);

  const std::string vocab_path = json_path(where, "vocab");
  const nlohmann::json& vocab = json_field(value, "vocab", where);
  if (!vocab.is_object()) {
    json_fail(vocab_path, fmt::format("expected an object of token: id, found {} {}",
                                      json_type_phrase(vocab), json_brief(vocab)));
  }
  if (vocab.empty()) json_fail(vocab_path, "the vocabulary is empty");
  if (vocab.size() > static_cast<size_t>(kMaxVocabEntries)) {
    json_fail(vocab_path,
              fmt::format("{} entries (at most {} are taken)", vocab.size(), kMaxVocabEntries));
  }
  vocab_.reserve(vocab.size());
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxVocabEntries) {
      json_fail(vocab_path, fmt::format("token '{}': expected an id in [0, {}), found {}",
                                        json_brief(token), kMaxVocabEntries, json_brief(id)));
    }
    if (token.size() > static_cast<size_t>(kMaxTokenBytes) || !is_valid_utf8(token)) {
      json_fail(vocab_path, fmt::format("token {}: longer than {} bytes or not valid UTF-8",
                                        json_brief(token), kMaxTokenBytes));
    }
    vocab_.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
    max_id = std::max(max_id, id.get<int64_t>());
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : vocab_) {
    if (id_to_token_[id] != nullptr) {
      json_fail(vocab_path,
                fmt::format("id {} is given to both '{}' and '{}'", id, *id_to_token_[id], token));
    }
    id_to_token_[id] = &token;
  }

  if (const nlohmann::json* unk = json_field_opt(value, "unk_token", where)) {
    const std::string token = json_string_field(value, "unk_token", where);
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      json_fail(json_path(where, "unk_token"), fmt::format("'{}' is not in the vocabulary", token));
    }
    (void)unk;
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs; the result a+b must be a token.
  const std::string merges_path = json_path(where, "merges");
  // Required, as tokenizers requires it ("Missing vocab/merges"); [] for none.
  const nlohmann::json* merges = json_field_opt(value, "merges", where);
  if (merges == nullptr) json_fail(merges_path, "missing (expected a list of merges, [] for none)");
  if (!merges->is_array()) {
    json_fail(merges_path, fmt::format("expected an array, found {} {}", json_type_phrase(*merges),
                                       json_brief(*merges)));
  }
  if (merges->size() > static_cast<size_t>(kMaxMerges)) {
    json_fail(merges_path,
              fmt::format("{} entries (at most {} are taken)", merges->size(), kMaxMerges));
  }
  merges_.reserve(merges->size());
  uint32_t rank = 0;  // "#version" lines of old merges files take no rank
  for (size_t index = 0; index < merges->size(); ++index) {
    const nlohmann::json& m = (*merges)[index];
    if (m.is_string() && m.get_ref<const std::string&>().starts_with("#version")) continue;
    std::string a;
    std::string b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        json_fail(json_path(merges_path, index),
                  fmt::format("expected \"a b\" (two tokens, one space), found {}", json_brief(m)));
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      json_fail(json_path(merges_path, index),
                fmt::format("expected \"a b\" or [\"a\", \"b\"], found {}", json_brief(m)));
    }
    const auto ia = vocab_.find(a);
    const auto ib = vocab_.find(b);
    const auto iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
      const std::string& missing = ia == vocab_.end() ? a : (ib == vocab_.end() ? b : a + b);
      json_fail(json_path(merges_path, index),
                fmt::format("merge {} names the token '{}', which is not in the vocabulary",
                            json_brief(m), missing));
    }
    // A later duplicate overrides an earlier one, as in tokenizers' map.
    merges_[pair_key(ia->second, ib->second)] = {rank++, iab->second};
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(id_to_token_.size())) return nullptr;
  return id_to_token_[id];
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(piece)) {
      ids.push_back(*id);
      return;
    }
  }
  merge_word(piece, ids);
}

void BpeModel::merge_word(std::string_view piece, std::vector<int32_t>& ids) const {
  // Symbols as a doubly linked list over an array (tokenizers' Word).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  const auto add = [&symbols](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  };
  int32_t pending_unk = -1;  // an unk token not added yet (fuse_unk extends it)
  for (size_t pos = 0; pos < piece.size();) {
    const size_t n = utf8_char_length(piece, pos);
    const std::string_view ch = piece.substr(pos, n);
    pos += n;
    if (const auto id = token_to_id(ch)) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      // A run of unknown characters is one unk token with fuse_unk, one each without.
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& o) const {  // the queue pops the lowest rank, then pos
      if (rank != o.rank) return rank > o.rank;
      return pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  const auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // A stale entry: the pair at this position changed since it was queued.
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) ids.push_back(s.id);
  }
}

}  // namespace mg::text
