// Range checks for numeric flags. A value outside a flag's documented range is refused while the
// flags are parsed, before anything is read or allocated, in one line that names the flag and the
// range: "--tp: 0 is out of range [1, 64]" (README.md lists every range).
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace mg::cli {

// An integer in [min, max]. Also refuses what does not parse as an integer (CLI11 would say
// "Could not convert" without the range).
CLI::Validator int_range(int64_t min, int64_t max);

// A non-negative integer up to 2^64 - 1, for unsigned flags (seeds): CLI11 would read "-1" as
// 2^64 - 1.
CLI::Validator non_negative_u64();

}  // namespace mg::cli
