#include "framework/text/utf8.h"

#include "framework/core/error.h"

namespace mg::text {

namespace {

// Length of the longest prefix of text[pos..] that is a well-formed sequence or the start of one
// (Unicode Table 3-7), and whether it is complete. A maximal subpart is such a prefix that is
// incomplete, or one byte that starts nothing.
struct Scan {
  size_t length;
  bool complete;
};

Scan scan(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const size_t left = text.size() - pos;
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return {1, true};
  size_t need = 0;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false};
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= left) return {i, false};
    const uint8_t b = byte(i);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {i, false};
  }
  return {need + 1, true};
}

}  // namespace

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Scan s = scan(bytes, pos);
    if (s.complete) {
      out.append(bytes.substr(pos, s.length));
    } else {
      out.append(kReplacementChar);
    }
    pos += s.length;
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Scan s = scan(bytes, pos);
    if (!s.complete) return false;
    pos += s.length;
  }
  return true;
}

size_t utf8_char_length(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return 1;
  if (b0 < 0xE0) return 2;
  if (b0 < 0xF0) return 3;
  return 4;
}

char32_t utf8_decode_at(std::string_view text, size_t pos) {
  const size_t n = utf8_char_length(text, pos);
  MG_ASSERT(pos + n <= text.size(), "utf8_decode_at past the end of valid UTF-8");
  const auto b = [&](size_t i) {
    return static_cast<char32_t>(static_cast<uint8_t>(text[pos + i]));
  };
  switch (n) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_unicode_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (size_t pos = 0; pos < text.size(); pos += utf8_char_length(text, pos)) ++n;
  return n;
}

std::vector<size_t> utf8_char_starts(std::string_view text) {
  std::vector<size_t> starts;
  for (size_t pos = 0; pos < text.size(); pos += utf8_char_length(text, pos)) starts.push_back(pos);
  return starts;
}

}  // namespace mg::text
