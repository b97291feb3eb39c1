#include "framework/text/decoder.h"

#include "framework/core/error.h"
#include "framework/text/byte_level.h"
#include "framework/text/pre_tokenizer.h"
#include "framework/text/split_regex.h"
#include "framework/text/tokenizer_json.h"
#include "framework/text/utf8.h"

namespace mg::text {

namespace {

// Characters back to bytes; a token holding any character outside the byte alphabet (an added
// token such as "<|im_end|>" written in plain text) is taken as its own UTF-8. The bytes of all
// tokens together are decoded lossily (a character cut between tokens at the end becomes U+FFFD).
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all = true;
      for (size_t pos = 0; pos < t.size(); pos += utf8_char_length(t, pos)) {
        const std::optional<uint8_t> b = byte_level_byte(utf8_decode_at(t, pos));
        if (!b) {
          all = false;
          break;
        }
        mapped += static_cast<char>(*b);
      }
      bytes += all ? mapped : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

// "▁" back to " "; the first token loses every "▁" unless the scheme is never (as tokenizers).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (i != 0 || scheme_ == PrependScheme::kNever) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const std::string& pattern, bool literal, std::string content,
                 const std::string& where)
      : regex_(pattern, literal, where), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      for (const SplitPiece& p : regex_.find_matches(t)) {
        if (p.is_match) {
          out += content_;
        } else {
          out.append(t, p.start, p.end - p.start);
        }
      }
      t = std::move(out);
    }
  }

 private:
  SplitRegex regex_;
  std::string content_;
};

// Runs of "<0xAB>" tokens become their bytes when those are valid UTF-8, else one U+FFFD per
// byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    int run_bytes = 0;
    const auto flush = [&] {
      if (run_bytes == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (int i = 0; i < run_bytes; ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_bytes = 0;
    };
    for (std::string& t : tokens) {
      const std::optional<uint8_t> b = byte_token(t);
      if (b) {
        run += static_cast<char>(*b);
        ++run_bytes;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static std::optional<uint8_t> byte_token(const std::string& t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return std::nullopt;
    const int hi = hex(t[3]);
    const int lo = hex(t[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<uint8_t>(hi * 16 + lo);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters of each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<size_t> offsets;  // byte offset of each character, then the end
      for (size_t pos = 0; pos < t.size(); pos += utf8_char_length(t, pos)) offsets.push_back(pos);
      const size_t chars = offsets.size();
      offsets.push_back(t.size());
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars); ++i) {
        if (utf8_decode_at(t, offsets[i]) != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars;
      for (size_t i = 0; i < std::min(stop_, chars); ++i) {
        const size_t index = chars - i - 1;
        if (utf8_decode_at(t, offsets[index]) != content_) break;
        stop_cut = index;
      }
      t = stop_cut > start_cut
              ? t.substr(offsets[start_cut], offsets[stop_cut] - offsets[start_cut])
              : std::string();
    }
  }

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> items)
      : items_(std::move(items)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& value, const std::string& where,
                                       int depth) {
  if (depth > kMaxNesting) json_fail(where, "Sequence nested too deeply");
  const std::string type = json_string_field(value, "type", where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(parse_metaspace_replacement(value, where),
                                              parse_metaspace_prepend_scheme(value, where));
  }
  if (type == "Replace") {
    auto [pattern, literal] = json_pattern(value, "pattern", where);
    return std::make_unique<ReplaceDecoder>(
        pattern, literal, json_string_field(value, "content", where), json_path(where, "pattern"));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::string content = json_string_field(value, "content", where);
    if (content.empty() || utf8_char_length(content, 0) != content.size()) {
      json_fail(json_path(where, "content"), "expected exactly one character");
    }
    return std::make_unique<StripDecoder>(utf8_decode_at(content, 0),
                                          json_int_field(value, "start", where, 0, 1 << 20),
                                          json_int_field(value, "stop", where, 0, 1 << 20));
  }
  if (type == "Sequence") {
    const std::string path = json_path(where, "decoders");
    const nlohmann::json& items = json_array_field(value, "decoders", where, kMaxSequenceItems);
    std::vector<std::unique_ptr<Decoder>> parsed;
    for (size_t i = 0; i < items.size(); ++i) {
      parsed.push_back(parse_decoder(items[i], json_path(path, i), depth + 1));
    }
    return std::make_unique<SequenceDecoder>(std::move(parsed));
  }
  json_fail(json_path(where, "type"),
            fmt::format("decoder type '{}' is not supported (supported: ByteLevel, Metaspace, "
                        "Replace, ByteFallback, Fuse, Strip, Sequence)",
                        type));
}

}  // namespace mg::text
