// The regular expressions of tokenizer.json (Split pre-tokenizers, Replace normalizers and
// decoders), run by PCRE2 with Unicode properties (\p{L}, \s as Unicode White_Space) in the
// Ruby-syntax semantics the Rust `tokenizers` crate gets from Oniguruma: ^ and $ match at line
// boundaries, leftmost-first alternation, lookahead.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mg::text {

// One piece of a split: bytes [start, end) of the input, and whether it is a match.
struct SplitPiece {
  size_t start;
  size_t end;
  bool is_match;
};

class SplitRegex {
 public:
  // `literal`: the pattern is a plain string (tokenizer.json's {"String": ...}), not a regex.
  // `where` names the file and field for errors: "tokenizer.json: pre_tokenizer.pretokenizers[0]".
  // Throws mg::Error naming `where` for a pattern PCRE2 cannot compile.
  SplitRegex(std::string_view pattern, bool literal, std::string_view where);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // `text` (valid UTF-8) cut into matches and the runs between them, in order, covering all of
  // it (tokenizers' Pattern::find_matches); [{0, 0, false}] for empty text.
  std::vector<SplitPiece> find_matches(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg::text
