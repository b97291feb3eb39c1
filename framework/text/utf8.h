// UTF-8 helpers of the tokenizer: lossy decoding exactly as Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do it (each maximal subpart
// of an ill-formed sequence becomes one U+FFFD, Unicode 3.9 "substitution of maximal subparts"),
// code point iteration over text known to be valid, and Unicode's White_Space property.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mg::text {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// `bytes` as valid UTF-8; ill-formed parts replaced by U+FFFD as described above.
std::string utf8_lossy(std::string_view bytes);

// True when `bytes` is well-formed UTF-8.
bool is_valid_utf8(std::string_view bytes);

// Byte length of the well-formed UTF-8 character starting at text[pos] (1 to 4). `text` must be
// valid UTF-8 and pos < size.
size_t utf8_char_length(std::string_view text, size_t pos);

// The code point starting at text[pos] of valid UTF-8 `text`.
char32_t utf8_decode_at(std::string_view text, size_t pos);

// Appends `cp` (a Unicode scalar value) as UTF-8.
void append_utf8(std::string& out, char32_t cp);

// Unicode's White_Space property (Rust's char::is_whitespace).
bool is_unicode_white_space(char32_t cp);

// Number of code points of valid UTF-8 `text`.
size_t utf8_length(std::string_view text);

// The byte offset of each code point of `text` (a truncated last sequence counts as one).
std::vector<size_t> utf8_char_starts(std::string_view text);

}  // namespace mg::text
