// A byte trie of the added tokens' strings, for tokenizers' leftmost-longest search of added
// tokens in the text: at each position one walk down the trie finds the longest token starting
// there, in at most (the longest token's length) steps, whatever the number of tokens.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mg::text {

class TokenTrie {
 public:
  TokenTrie() : values_(1, -1) {}

  // Adds `key` (not empty) with `value` >= 0; the first value added for a key stays.
  void insert(std::string_view key, int32_t value);

  struct Match {
    int32_t value = -1;  // -1: no key starts at the position
    size_t length = 0;
  };
  // The longest key that `text` starts with at `pos`.
  Match longest_at(std::string_view text, size_t pos) const;

  bool empty() const { return values_.size() == 1; }

 private:
  static uint64_t edge_key(int32_t node, uint8_t byte) {
    return (static_cast<uint64_t>(node) << 8) | byte;
  }
  std::unordered_map<uint64_t, int32_t> edges_;  // (node, byte) -> child
  std::vector<int32_t> values_;                  // per node: the key ending there, or -1
};

}  // namespace mg::text
