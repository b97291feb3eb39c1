// Range checks for numeric flags. A value outside a flag's documented range is refused while the
// flags are parsed, before anything is read or allocated, in one line that names the flag and the
// range: "--tp: 0 is out of range [1, 64]" (README.md lists every range).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/core/quant.h"

namespace mg::cli {

// An integer in [min, max]. Also refuses what does not parse as an integer (CLI11 would say
// "Could not convert" without the range).
CLI::Validator int_range(int64_t min, int64_t max);

// A non-negative integer up to 2^64 - 1, for unsigned flags (seeds): CLI11 would read "-1" as
// 2^64 - 1.
CLI::Validator non_negative_u64();

// The weight-only integer names of `--quant` (make-model, bench moe): "int4-g128", "uint4-g32",
// "int8-channel", ... -> the codes' element and the scale group (-1 channel-wise); nullopt for
// any other text.
std::optional<std::pair<QuantElement, int64_t>> parse_int_quant(const std::string& text);

// Every name parse_int_quant takes: {int4, uint4, int8, uint8} x {g32, g64, g128, channel}.
std::vector<std::string> int_quant_names();

}  // namespace mg::cli
