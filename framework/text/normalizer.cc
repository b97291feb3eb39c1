#include "framework/text/normalizer.h"

#include <vector>

#include "framework/core/error.h"
#include "framework/text/split_regex.h"
#include "framework/text/tokenizer_json.h"
#include "framework/text/unicode_normalization.h"

namespace mg::text {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode_normalize(text, form_); }

 private:
  NormalizationForm form_;
};

// Prepends `prefix` to text that is not empty.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

// Replaces every match of the pattern with `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const std::string& pattern, bool literal, std::string content,
                    const std::string& where)
      : regex_(pattern, literal, where), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (const SplitPiece& p : regex_.find_matches(text)) {
      if (p.is_match) {
        out += content_;
      } else {
        out.append(text, p.start, p.end - p.start);
      }
    }
    text = std::move(out);
  }

 private:
  SplitRegex regex_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> items)
      : items_(std::move(items)) {}
  void normalize(std::string& text) const override {
    for (const auto& n : items_) n->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& value, const std::string& where,
                                             int depth) {
  if (depth > kMaxNesting) json_fail(where, "Sequence nested too deeply");
  const std::string type = json_string_field(value, "type", where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNFKD);
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(json_string_field(value, "prepend", where));
  }
  if (type == "Replace") {
    auto [pattern, literal] = json_pattern(value, "pattern", where);
    return std::make_unique<ReplaceNormalizer>(
        pattern, literal, json_string_field(value, "content", where), json_path(where, "pattern"));
  }
  if (type == "Sequence") {
    const std::string path = json_path(where, "normalizers");
    const nlohmann::json& items = json_array_field(value, "normalizers", where, kMaxSequenceItems);
    std::vector<std::unique_ptr<Normalizer>> parsed;
    for (size_t i = 0; i < items.size(); ++i) {
      parsed.push_back(parse_normalizer(items[i], json_path(path, i), depth + 1));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parsed));
  }
  json_fail(json_path(where, "type"),
            fmt::format("normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, "
                        "Prepend, Replace, Sequence)",
                        type));
}

}  // namespace mg::text
