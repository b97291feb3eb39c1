#include "framework/text/unicode_normalization.h"

#include <cstdlib>

#include <utf8proc.h>

#include "framework/core/error.h"

namespace mg::text {

std::string unicode_normalize(std::string_view text, NormalizationForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalizationForm::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalizationForm::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalizationForm::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  MG_CHECK(n >= 0, "unicode normalization failed: {}", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace mg::text
