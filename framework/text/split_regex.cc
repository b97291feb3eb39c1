#include "framework/text/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "framework/core/error.h"
#include "framework/text/utf8.h"

namespace mg::text {

namespace {

// A longer pattern comes from a broken or hostile file: the families' longest is ~1 KiB.
constexpr size_t kMaxPatternBytes = 64 * 1024;
// PCRE2's backtracking budget per match; a pathological pattern fails with an error instead of
// running for minutes.
constexpr uint32_t kMatchLimit = 10'000'000;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct SplitRegex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  std::string where;
  ~Impl() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

SplitRegex::SplitRegex(std::string_view pattern, bool literal, std::string_view where)
    : impl_(std::make_unique<Impl>()) {
  impl_->where = std::string(where);
  MG_CHECK(pattern.size() <= kMaxPatternBytes, "{}: pattern of {} bytes (at most {} are taken)",
           where, pattern.size(), kMaxPatternBytes);
  MG_CHECK(is_valid_utf8(pattern), "{}: pattern is not valid UTF-8", where);
  // (PCRE2 takes no pattern-syntax options beside PCRE2_LITERAL.)
  const uint32_t options =
      literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &error, &offset, nullptr);
  MG_CHECK(impl_->code != nullptr, "{}: regex does not compile at byte {}: {}", where, offset,
           pcre2_message(error));
  // JIT is an optimisation: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
  impl_->context = pcre2_match_context_create(nullptr);
  MG_CHECK(impl_->context != nullptr, "{}: out of memory for a regex match context", where);
  pcre2_set_match_limit(impl_->context, kMatchLimit);
}

SplitRegex::~SplitRegex() = default;

std::vector<SplitPiece> SplitRegex::find_matches(std::string_view text) const {
  if (text.empty()) return {{0, 0, false}};
  std::vector<SplitPiece> pieces;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  MG_CHECK(data != nullptr, "{}: out of memory for regex match data", impl_->where);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t prev = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data,
                               impl_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      MG_FAIL("{}: regex match failed: {}", impl_->where, pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
    const size_t start = ov[0];
    const size_t end = ov[1];
    if (end == start) {
      // An empty match splits nothing; step over one character (as Oniguruma's iterator does).
      if (start >= text.size()) break;
      pos = start + utf8_char_length(text, start);
      continue;
    }
    if (prev != start) pieces.push_back({prev, start, false});
    pieces.push_back({start, end, true});
    prev = end;
    pos = end;
  }
  pcre2_match_data_free(data);
  if (prev != text.size()) pieces.push_back({prev, text.size(), false});
  return pieces;
}

}  // namespace mg::text
