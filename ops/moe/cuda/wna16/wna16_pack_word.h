// One 32-bit word, one parameter pair and one FP4 scale byte of the WNA16 kernels' packed layout
// (wna16_experts_cuda.h, section 1), computed from the codes and scales where they lie: the
// device repacking (wna16_pack_on_device) runs these once per word, pair and byte, so that codes
// made or loaded on the GPU are repacked there, with no host round trip. The host repacking
// (wna16_pack, wna16_pack_e2m1) writes the same words and bytes; the CPU tests check these against
// the layout's inverse. Compiles on the host and in .cu files.
#pragma once

#include <math.h>

#include <cstdint>

#include "framework/core/fp4_scale_bytes.h"
#include "framework/device/host_device.h"
#include "ops/moe/cuda/wna16/wna16_codes.h"

namespace mg::cuda {

// The codes of one [E, N, K] matrix and its layout (the fields of wna16_layout /
// wna16_layout_e2m1's result).
struct Wna16PackSource {
  // [E, N, row_bytes]: 4-bit codes two per byte, the even column in the low nibble (the canonical
  // INT4 layout of framework/core/int_quant.h, and FP4's); 8-bit codes one per byte.
  const uint8_t* codes = nullptr;
  int64_t row_bytes = 0;
  // XORed into every code: 8 (INT4) or 0x80 (INT8) turns a signed two's-complement code q into the
  // kernels' unsigned q + 2^(bits-1) (the implicit zero point is then the midpoint); 0 otherwise.
  uint32_t flip = 0;
  int bits = 4;
  int64_t experts = 0, rows = 0, cols = 0;  // E, N (both parts), K
  int64_t parts = 1, part_rows = 0, k_steps = 0;
};

// The kernels' code of column k of row n of expert e.
MG_HOST_DEVICE inline uint32_t wna16_source_code(const Wna16PackSource& s, int64_t e, int64_t n,
                                                 int64_t k) {
  const uint8_t* row = s.codes + (e * s.rows + n) * s.row_bytes;
  const uint32_t code =
      s.bits == 4 ? ((k & 1) ? static_cast<uint32_t>(row[k >> 1] >> 4) : row[k >> 1] & 0xFu)
                  : static_cast<uint32_t>(row[k]);
  return code ^ s.flip;
}

// Word `index` of the packed words [E, row_blocks, k_steps, W / 4, 32 lanes, 4] (W = 4 words a
// lane for 4 bits, 8 for 8 bits); padded rows and columns past K hold code 0.
MG_HOST_DEVICE inline uint32_t wna16_packed_word(const Wna16PackSource& s, int64_t index) {
  const int64_t W = s.bits == 4 ? 4 : 8;
  const int64_t step_words = 32 * W;
  const int64_t in_step = index % step_words;
  int64_t rest = index / step_words;
  const int64_t step = rest % s.k_steps;
  rest /= s.k_steps;
  const int64_t row_blocks = s.parts * s.part_rows / 8;
  const int64_t block = rest % row_blocks;
  const int64_t e = rest / row_blocks;
  // in_step = (w / 4) * 128 + lane * 4 + w % 4; lane = 4 g + t holds row g of the block.
  const int64_t w = (in_step / 128) * 4 + in_step % 4;
  const int64_t lane = (in_step % 128) / 4;
  const int64_t g = lane / 4, t = lane % 4;
  const int64_t pr = block * 8 + g;
  const int64_t rows_per_part = s.rows / s.parts;
  const int64_t part = pr / s.part_rows, in_part = pr % s.part_rows;
  if (in_part >= rows_per_part) return 0u;
  const int64_t n = part * rows_per_part + in_part;
  const int values = s.bits == 4 ? 8 : 4;
  uint32_t word = 0;
  for (int j = 0; j < values; ++j) {
    // 4 bits: word w is unit w, values 0-3 half 0 and 4-7 half 1; 8 bits: unit w / 2, half w % 2.
    const int64_t unit = s.bits == 4 ? w : w / 2;
    const int64_t half = s.bits == 4 ? j / 4 : w % 2;
    const int jj = j % 4;
    const int64_t frag = (jj & 1) + (jj >> 1) * 8;  // the B fragment's k offsets {0, 1, 8, 9}
    const int64_t k = step * 128 + 32 * unit + 16 * half + 2 * t + frag;
    const uint32_t code = k < s.cols ? wna16_source_code(s, e, n, k) : 0u;
    word |= code << (j * s.bits);
  }
  return word;
}

// The scales (and zero points) of the same matrix, integer codes.
struct Wna16ParamSource {
  const float* scales = nullptr;  // [E, N, scale_groups] F32
  const float* zeros = nullptr;   // F32 like scales in code units, or null
  float default_zero = 8.0f;      // the zero without `zeros`: 8 (4 bits) or 128 (8 bits)
  int64_t scale_groups = 1;       // columns of `scales`
  int64_t experts = 0, rows = 0;  // E, N
  int64_t parts = 1, part_rows = 0;
  int64_t groups = 1;  // pairs per row of the layout (scale_groups)
};

// Pair `index` of params [E, parts * part_rows, groups, 2]: {s, -z s}; {0, 0} on padded rows.
MG_HOST_DEVICE inline void wna16_param_pair(const Wna16ParamSource& s, int64_t index, float* out) {
  const int64_t rows_padded = s.parts * s.part_rows;
  const int64_t u = index % s.groups;
  const int64_t pr = (index / s.groups) % rows_padded;
  const int64_t e = index / s.groups / rows_padded;
  const int64_t rows_per_part = s.rows / s.parts;
  const int64_t part = pr / s.part_rows, in_part = pr % s.part_rows;
  if (in_part >= rows_per_part) {
    out[0] = 0.0f;
    out[1] = 0.0f;
    return;
  }
  const int64_t n = part * rows_per_part + in_part;
  const float* srow = s.scales + (e * s.rows + n) * s.scale_groups;
  const float z =
      s.zeros != nullptr ? s.zeros[(e * s.rows + n) * s.scale_groups + u] : s.default_zero;
  out[0] = srow[u];
  out[1] = -z * srow[u];
}

// The effective F32 scales of an FP4 matrix (E8M0 decoded; NVFP4: E4M3 times its global) and its
// layout, for the scale bytes of kMxfp4 / kNvfp4 (wna16_experts_cuda.h, section 1).
struct Wna16ScaleByteSource {
  const float* scales = nullptr;   // [E, N, scale_groups] F32
  const float* globals = nullptr;  // kNvfp4: [E, parts] F32, or null: 1
  Wna16Codes codes = Wna16Codes::kMxfp4;
  int64_t scale_groups = 1;
  int64_t group_size = 32;  // columns per scale (kMxfp4: a multiple of 32; kNvfp4: of 16)
  int64_t experts = 0, rows = 0, cols = 0;  // E, N (both parts), K
  int64_t parts = 1, part_rows = 0, k_steps = 0;
};

// Byte `index` of scale_bytes [E, row_blocks, k_steps, 8, U]: the E8M0 code of the scale of a
// 32-wide unit (kMxfp4, U = 4) or the E4M3 code of the scale of a k16 half over the part's global
// (kNvfp4, U = 8); 0 on padded rows and past K. `exact` is cleared when the scale has no such code
// (kMxfp4: not a power of two 2^-127 .. 2^127; kNvfp4: further than F32 rounding from code x
// global: 2^-21 relative).
MG_HOST_DEVICE inline uint32_t wna16_scale_byte(const Wna16ScaleByteSource& s, int64_t index,
                                                bool* exact) {
  *exact = true;
  const bool mx = s.codes == Wna16Codes::kMxfp4;
  const int64_t U = mx ? 4 : 8;
  const int64_t j = index % U;
  int64_t rest = index / U;
  const int64_t g = rest % 8;
  rest /= 8;
  const int64_t step = rest % s.k_steps;
  rest /= s.k_steps;
  const int64_t row_blocks = s.parts * s.part_rows / 8;
  const int64_t block = rest % row_blocks;
  const int64_t e = rest / row_blocks;
  const int64_t pr = block * 8 + g;
  const int64_t rows_per_part = s.rows / s.parts;
  const int64_t part = pr / s.part_rows, in_part = pr % s.part_rows;
  const int64_t col = step * 128 + (mx ? 32 * j : 32 * (j / 2) + 16 * (j % 2));
  if (in_part >= rows_per_part || col >= s.cols) return 0u;
  const int64_t n = part * rows_per_part + in_part;
  const float v = s.scales[(e * s.rows + n) * s.scale_groups + col / s.group_size];
  const float global = !mx && s.globals != nullptr ? s.globals[e * s.parts + part] : 1.0f;
  uint32_t code = 0;
  *exact = fp4_scale_byte(v, mx, global, &code);
  return code;
}

}  // namespace mg::cuda
