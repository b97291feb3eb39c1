// Unicode normalization forms (NFC, NFD, NFKC, NFKD) of tokenizer.json normalizers, by utf8proc
// (Debian's libutf8proc: small, C, the Unicode tables of its release).
#pragma once

#include <string>
#include <string_view>

namespace mg::text {

enum class NormalizationForm { kNFC, kNFD, kNFKC, kNFKD };

// `text` (valid UTF-8) in the given form.
std::string unicode_normalize(std::string_view text, NormalizationForm form);

}  // namespace mg::text
