#include "framework/text/byte_level.h"

#include <array>

#include "framework/text/utf8.h"

namespace mg::text {

namespace {

struct Tables {
  std::array<std::string, 256> byte_to_char;
  std::array<int, 512> char_to_byte;  // code points below 512; -1 outside the alphabet
  Tables() {
    char_to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp =
          printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_utf8(byte_to_char[b], cp);
      char_to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_level_char(uint8_t b) {
  return tables().byte_to_char[b];
}

std::optional<uint8_t> byte_level_byte(char32_t cp) {
  if (cp >= 512) return std::nullopt;
  const int b = tables().char_to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string byte_level_encode(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += byte_level_char(static_cast<uint8_t>(c));
  return out;
}

}  // namespace mg::text
