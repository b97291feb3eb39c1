#include "framework/text/token_trie.h"

#include "framework/core/error.h"

namespace mg::text {

void TokenTrie::insert(std::string_view key, int32_t value) {
  MG_ASSERT(!key.empty() && value >= 0, "TokenTrie::insert of an empty key or negative value");
  int32_t node = 0;
  for (char c : key) {
    const auto [it, added] = edges_.try_emplace(edge_key(node, static_cast<uint8_t>(c)),
                                                static_cast<int32_t>(values_.size()));
    if (added) values_.push_back(-1);
    node = it->second;
  }
  if (values_[node] < 0) values_[node] = value;
}

TokenTrie::Match TokenTrie::longest_at(std::string_view text, size_t pos) const {
  Match best;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = edges_.find(edge_key(node, static_cast<uint8_t>(text[i])));
    if (it == edges_.end()) break;
    node = it->second;
    if (values_[node] >= 0) best = {values_[node], i + 1 - pos};
  }
  return best;
}

}  // namespace mg::text
