#include "framework/text/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "framework/core/error.h"
#include "framework/text/byte_level.h"
#include "framework/text/split_regex.h"
#include "framework/text/tokenizer_json.h"
#include "framework/text/utf8.h"

namespace mg::text {

namespace {

// What happens to the delimiters a pattern finds (tokenizers' SplitDelimiterBehavior).
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Range {
  size_t start;
  size_t end;
};

// tokenizers' NormalizedString::split: the pieces a behavior makes of `matches`.
std::vector<Range> apply_behavior(const std::vector<SplitPiece>& matches, Behavior behavior) {
  std::vector<Range> out;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const SplitPiece& m : matches) out.push_back({m.start, m.end});
      break;
    case Behavior::kRemoved:
      for (const SplitPiece& m : matches) {
        if (!m.is_match) out.push_back({m.start, m.end});
      }
      break;
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const SplitPiece& m : matches) {
        if (m.is_match == previous_match && !out.empty()) {
          out.back().end = m.end;
        } else {
          out.push_back({m.start, m.end});
        }
        previous_match = m.is_match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const SplitPiece& m : matches) {
        if (m.is_match && !previous_match && !out.empty()) {
          out.back().end = m.end;
        } else {
          out.push_back({m.start, m.end});
        }
        previous_match = m.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t i = matches.size(); i-- > 0;) {
        const SplitPiece& m = matches[i];
        if (m.is_match && !previous_match && !out.empty()) {
          out.back().start = m.start;
        } else {
          out.push_back({m.start, m.end});
        }
        previous_match = m.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

// Cuts every piece with `split`, keeping the non-empty sub-pieces in order. A sub-piece is at the
// start of the input when its piece is and it begins at the piece's offset 0.
void split_pieces(std::vector<PreToken>& pieces,
                  const std::function<std::vector<SplitPiece>(const std::string&)>& find,
                  Behavior behavior) {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  for (PreToken& piece : pieces) {
    for (const Range& r : apply_behavior(find(piece.text), behavior)) {
      if (r.end == r.start) continue;
      out.push_back({piece.text.substr(r.start, r.end - r.start), piece.at_start && r.start == 0});
    }
  }
  pieces = std::move(out);
}

// Matches of single characters that satisfy `pred` (tokenizers' Pattern for Fn(char) -> bool).
std::vector<SplitPiece> find_chars(const std::string& text,
                                   const std::function<bool(char32_t)>& pred) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<SplitPiece> out;
  size_t last = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = utf8_char_length(text, pos);
    if (pred(utf8_decode_at(text, pos))) {
      if (last < pos) out.push_back({last, pos, false});
      out.push_back({pos, pos + n, true});
      last = pos + n;
    }
    pos += n;
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
  return out;
}

Behavior parse_behavior(const nlohmann::json& value, const std::string& where) {
  const std::string b = json_string_field(value, "behavior", where);
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  json_fail(json_path(where, "behavior"),
            fmt::format("unknown value '{}' (expected Removed, Isolated, MergedWithPrevious, "
                        "MergedWithNext or Contiguous)",
                        b));
}

// GPT-2's split regex, built into the ByteLevel pre-tokenizer (use_regex).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<SplitRegex>(kGpt2Pattern, false, "ByteLevel regex");
  }
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& p : pieces) {
        if (!p.text.starts_with(' ')) p.text = " " + p.text;
      }
    }
    if (regex_) {
      split_pieces(
          pieces, [this](const std::string& t) { return regex_->find_matches(t); },
          Behavior::kIsolated);
    }
    for (PreToken& p : pieces) p.text = byte_level_encode(p.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitRegex> regex_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const std::string& pattern, bool literal, Behavior behavior, bool invert,
                    const std::string& where)
      : behavior_(behavior), invert_(invert) {
    // tokenizers matches nothing with an empty string pattern (the whole text is one piece).
    if (!(literal && pattern.empty())) {
      regex_ = std::make_unique<SplitRegex>(pattern, literal, where);
    }
  }
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_pieces(
        pieces,
        [this](const std::string& t) {
          std::vector<SplitPiece> m =
              regex_ ? regex_->find_matches(t) : std::vector<SplitPiece>{{0, t.size(), false}};
          if (invert_) {
            for (SplitPiece& p : m) p.is_match = !p.is_match;
          }
          return m;
        },
        behavior_);
  }

 private:
  std::unique_ptr<SplitRegex> regex_;
  Behavior behavior_;
  bool invert_;
};

// Unicode numeric characters (Rust's char::is_numeric: general categories Nd, Nl, No), each on
// its own (individual_digits) or in runs.
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual)
      : individual_(individual), numeric_(R"(\p{N})", false, "Digits") {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_pieces(
        pieces, [this](const std::string& t) { return numeric_.find_matches(t); },
        individual_ ? Behavior::kIsolated : Behavior::kContiguous);
  }

 private:
  bool individual_;
  SplitRegex numeric_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (PreToken& p : pieces) {
      std::string replaced;
      replaced.reserve(p.text.size());
      for (char c : p.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced += c;
        }
      }
      p.text = std::move(replaced);
      bool prepend = false;
      switch (scheme_) {
        case PrependScheme::kAlways:
          prepend = !p.text.starts_with(replacement_);
          break;
        case PrependScheme::kFirst:
          prepend = !p.text.starts_with(replacement_) && p.at_start;
          break;
        case PrependScheme::kNever:
          break;
      }
      if (prepend) p.text = replacement_ + p.text;
    }
    if (split_) {
      split_pieces(
          pieces,
          [this](const std::string& t) {
            const char32_t rep = utf8_decode_at(replacement_, 0);
            return find_chars(t, [rep](char32_t cp) { return cp == rep; });
          },
          Behavior::kMergedWithNext);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> items)
      : items_(std::move(items)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : items_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

}  // namespace

std::string parse_metaspace_replacement(const nlohmann::json& value, const std::string& where) {
  std::string r = json_string_field(value, "replacement", where);
  if (r.empty() || utf8_char_length(r, 0) != r.size()) {
    json_fail(json_path(where, "replacement"), "expected exactly one character");
  }
  return r;
}

PrependScheme parse_metaspace_prepend_scheme(const nlohmann::json& value,
                                             const std::string& where) {
  // Files written before prepend_scheme existed say add_prefix_space; false there means never
  // whatever else the file says (as tokenizers reads it).
  if (!json_bool_field(value, "add_prefix_space", where, true)) return PrependScheme::kNever;
  if (json_field_opt(value, "prepend_scheme", where) == nullptr) return PrependScheme::kAlways;
  const std::string s = json_string_field(value, "prepend_scheme", where);
  if (s == "always") return PrependScheme::kAlways;
  if (s == "never") return PrependScheme::kNever;
  if (s == "first") return PrependScheme::kFirst;
  json_fail(json_path(where, "prepend_scheme"),
            fmt::format("unknown value '{}' (expected always, never or first)", s));
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& value,
                                                  const std::string& where, int depth) {
  if (depth > kMaxNesting) json_fail(where, "Sequence nested too deeply");
  const std::string type = json_string_field(value, "type", where);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(
        json_bool_field(value, "add_prefix_space", where, true),
        json_bool_field(value, "use_regex", where, true));
  }
  if (type == "Split") {
    auto [pattern, literal] = json_pattern(value, "pattern", where);
    return std::make_unique<SplitPreTokenizer>(pattern, literal, parse_behavior(value, where),
                                               json_bool_field(value, "invert", where, false),
                                               json_path(where, "pattern"));
  }
  if (type == "Digits") {
    return std::make_unique<DigitsPreTokenizer>(
        json_bool_field(value, "individual_digits", where, false));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(parse_metaspace_replacement(value, where),
                                                   parse_metaspace_prepend_scheme(value, where),
                                                   json_bool_field(value, "split", where, true));
  }
  if (type == "Sequence") {
    const std::string path = json_path(where, "pretokenizers");
    const nlohmann::json& items =
        json_array_field(value, "pretokenizers", where, kMaxSequenceItems);
    std::vector<std::unique_ptr<PreTokenizer>> parsed;
    for (size_t i = 0; i < items.size(); ++i) {
      parsed.push_back(parse_pre_tokenizer(items[i], json_path(path, i), depth + 1));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parsed));
  }
  json_fail(json_path(where, "type"),
            fmt::format("pre-tokenizer type '{}' is not supported (supported: ByteLevel, Split, "
                        "Digits, Metaspace, Sequence)",
                        type));
}

}  // namespace mg::text
