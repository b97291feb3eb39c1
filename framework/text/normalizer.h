// tokenizer.json "normalizer": NFC/NFD/NFKC/NFKD, Prepend, Replace and Sequence of them (what the
// imported families use; Mixtral's SentencePiece convention is Sequence[Prepend "▁", Replace " "
// -> "▁"]). Any other type is refused when the file is loaded.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace mg::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place.
  virtual void normalize(std::string& text) const = 0;
};

// The normalizer described by `value` (never null here; a JSON null means none and is handled by
// the caller). `where` names the file and field for errors.
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& value, const std::string& where,
                                             int depth = 0);

}  // namespace mg::text
