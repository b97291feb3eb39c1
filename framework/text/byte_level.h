// GPT-2's byte-level alphabet: every byte maps to one printable code point (the printable
// Latin-1 bytes to themselves, the others to U+0100..U+0143), so BPE runs on text with no control
// or partial characters. Used by the ByteLevel pre-tokenizer (bytes -> characters) and decoder
// (characters -> bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mg::text {

// The UTF-8 of the character byte `b` maps to.
const std::string& byte_level_char(uint8_t b);

// The byte a code point stands for; nullopt for a code point outside the alphabet.
std::optional<uint8_t> byte_level_byte(char32_t cp);

// Every byte of `text` replaced by its character.
std::string byte_level_encode(std::string_view text);

}  // namespace mg::text
