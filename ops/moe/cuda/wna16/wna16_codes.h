// What the WNA16 kernels' packed codes mean (their per-value dequantization policy) and how many
// scale bytes each kind keeps per row and K step. Plain C++ (the host-only kernel header and the
// host/device packing functions of wna16_pack_word.h share it; CPU tests include it).
#pragma once

#include <cstdint>

namespace mg::cuda {

enum class Wna16Codes : int32_t {
  kInteger,  // unsigned integer q of 4 or 8 bits: w = fma(q, s, -z·s), pairs {s, -z·s} per group
  kMxfp4,    // FP4 E2M1 (4 bits), an E8M0 scale byte per 32 columns
  kNvfp4,    // FP4 E2M1 (4 bits), an E4M3 scale byte per 16 columns, an F32 global per part
};

// Scale bytes per row and 128-wide K step (4 units of 32 columns): 4 for kMxfp4 (one per unit),
// 8 for kNvfp4 (one per k16 half), 0 for integers (F32 pairs instead).
constexpr int64_t wna16_scale_bytes_per_step(Wna16Codes codes) {
  switch (codes) {
    case Wna16Codes::kInteger:
      return 0;
    case Wna16Codes::kMxfp4:
      return 4;
    case Wna16Codes::kNvfp4:
      return 8;
  }
  return 0;
}

}  // namespace mg::cuda
