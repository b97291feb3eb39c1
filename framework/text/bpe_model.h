// tokenizer.json "model" of type BPE: the vocabulary, the ranked merges, and the word-level
// algorithm of tokenizers' BPE (characters, byte fallback "<0xAB>" or the unk token for
// characters outside the vocabulary, then merges lowest rank first, leftmost first among equal
// ranks; ignore_merges takes a whole piece found in the vocabulary as one token).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::text {

class BpeModel {
 public:
  // `value` is the "model" object; `where` names the file for errors ("tokenizer.json: model").
  BpeModel(const nlohmann::json& value, const std::string& where);

  // Appends the ids of one pre-tokenized piece.
  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for an id the vocabulary does not hold.
  const std::string* id_to_token(int32_t id) const;
  // Entries of the vocabulary (tokenizers' get_vocab_size; less than id_bound() when ids skip).
  int64_t vocab_entries() const { return static_cast<int64_t>(vocab_.size()); }
  // Largest id + 1.
  int64_t id_bound() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view piece, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<const std::string*> id_to_token_;  // into vocab_'s keys; null for holes
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // "<0xAB>" ids for byte fallback; -1 where missing
};

}  // namespace mg::text
