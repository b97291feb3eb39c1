// Integer weight-only codes (W4A16 / W8A16: GPTQ, AWQ, compressed-tensors) on the host: the
// canonical layout every kernel receives, the conversion of each checkpoint packing into it (done
// once, when the weight is loaded), dequantisation, and a group quantiser for tests and make-model.
//
// Canonical layout of a weight with logical shape [lead..., R, C] (y = x W^T: R outputs, C inputs):
//   codes   kInt4 / kUInt4: U8 [lead..., R, ceil(C / 2)], element c of a row in byte c / 2, the low
//           nibble for even c, the high nibble for odd c (an odd C leaves the last high nibble 0);
//           kInt8: I8 [lead..., R, C]; kUInt8: U8 [lead..., R, C].
//   scale   F32 [lead..., R, ceil(C / g)] (group {1, g}; g = -1: one column, channel-wise).
//   zero    (unsigned elements) F32 like scale, in code units, or undefined for the midpoint.
//   g_idx   (act-order) I32 [lead..., P, C]: group of input column c for the rows of piece
//           r / (R / P) (P checkpoint matrices per logical matrix, e.g. gate and up), or undefined.
//   real[.., r, c] = (q[.., r, c] - zero[.., r, grp]) * scale[.., r, grp],
//   grp = g_idx ? g_idx[.., r / (R / P), c] : c / g.
#pragma once

#include <cstdint>
#include <string>

#include "framework/core/quant.h"

namespace mg {

// How a checkpoint stored the codes (proto QuantPacking; the layouts are documented there).
enum class IntPacking : uint8_t {
  kNone,               // canonical (above)
  kGptq,               // GPTQ qweight [in / p, out], qzeros [groups, out / p], scales [groups, out]
  kAwq,                // AWQ GEMM qweight [in, out / 8] interleaved, qzeros, scales [groups, out]
  kCompressedTensors,  // weight_packed [out, in / p], weight_zero_point [out / p, groups]
};
std::string_view int_packing_name(IntPacking packing);

// 4 or 8; asserts an integer element.
int quant_element_bits(QuantElement element);
// kInt4 / kInt8.
bool quant_element_signed(QuantElement element);
// Canonical codes dtype and shape for `logical` [lead..., R, C].
DType int_codes_dtype(QuantElement element);
Shape int_codes_shape(QuantElement element, const Shape& logical);

// Canonical code q (signed value for kInt*, unsigned for kUInt*) of column c of one row.
inline int32_t int_code_at(const uint8_t* row, QuantElement element, int64_t c) {
  switch (element) {
    case QuantElement::kInt4: {
      const int32_t nib = (row[c >> 1] >> ((c & 1) * 4)) & 0xF;
      return nib >= 8 ? nib - 16 : nib;
    }
    case QuantElement::kUInt4:
      return (row[c >> 1] >> ((c & 1) * 4)) & 0xF;
    case QuantElement::kInt8:
      return static_cast<int8_t>(row[c]);
    case QuantElement::kUInt8:
      return row[c];
    case QuantElement::kFromDtype:
    case QuantElement::kFp4E2M1:
      break;
  }
  return 0;
}

// Bytes of one canonical codes row of C columns.
int64_t int_codes_row_bytes(QuantElement element, int64_t C);

// Rows [r0, r1) of matrix m (index over the leading dimensions) of canonical `codes` with `q`,
// dequantised into out [(r1 - r0), C] fp32.
void dequantize_int_rows(const Tensor& codes, const WeightQuantization& q, int64_t m, int64_t r0,
                         int64_t r1, float* out);

// The whole weight as F32 [lead..., R, C] (q.logical_shape).
Tensor dequantize_int_cpu(const Tensor& codes, const WeightQuantization& q);

// Packs signed or unsigned codes values[R * C] (one int per element, row-major) of `element`
// into a canonical codes row buffer for rows x C.
void pack_int_codes(const int32_t* values, int64_t rows, int64_t C, QuantElement element,
                    uint8_t* out);

// A checkpoint's stored tensors, as loaded (codes and packed zeros I32 for the checkpoint
// packings; scale any float dtype; zero for kNone U8 or F32; g_idx I32), to be converted.
struct StoredIntWeight {
  QuantElement element = QuantElement::kUInt4;
  IntPacking packing = IntPacking::kNone;
  Shape logical_shape;  // [lead..., R, C]
  int64_t group_cols = -1;
  Tensor codes;
  Tensor scale;
  Tensor zero_point;  // may be undefined
  Tensor g_idx;       // may be undefined
  int64_t zero_point_offset = 0;
  // Checkpoint matrices per logical matrix (transposed packings): from the stored rank.
  std::string what;  // the tensor's name, for errors
};

// The stored shapes a packing implies for `logical`, `group_cols` and `pieces` (P), used by the
// verifier and the conversion. Each shape is the full stored tensor's. A g_idx may also come with
// its own piece count Pg (R % Pg == 0): [lead..., Pg, C], or [lead..., C] for Pg = 1.
struct IntStoredShapes {
  Shape codes;
  Shape scale;
  Shape zero_point;
  Shape g_idx;
};
IntStoredShapes int_stored_shapes(QuantElement element, IntPacking packing, const Shape& logical,
                                  int64_t group_cols, int64_t pieces);
// P of a stored codes shape (stored rank - logical rank + 1 for the transposed packings, else 1).
int64_t int_stored_pieces(IntPacking packing, const Shape& logical, const Shape& stored_codes);

// Converts `w` into the canonical codes and WeightQuantization (group {1, group_cols}; scales,
// zeros F32; g_idx kept only when it is not the trivial c / g, in which case it is I32
// [lead..., P, C]). Checks every value a shape check cannot (zero points and codes in range,
// g_idx in [0, groups)); throws mg::Error naming w.what.
std::pair<Tensor, WeightQuantization> convert_int_weight(const StoredIntWeight& w);

// Group quantiser (tests, make-model): w F32 [lead..., R, C] to codes of `element` with one scale
// per row per `group_cols` columns (-1: per row). Signed elements: symmetric, scale = amax / qmax
// (qmax = 7 or 127), q = clamp(round(w / scale)). Unsigned: asymmetric, scale = (max - min) /
// (2^b - 1), zero = clamp(round(-min / scale)), q = clamp(round(w / scale) + zero). An all-zero
// group gets scale 1 (codes 0 / zero).
std::pair<Tensor, WeightQuantization> quantize_int_cpu(const Tensor& w, QuantElement element,
                                                       int64_t group_cols);

// quantize_int_cpu on `rows` rows of C columns: w [rows, C] into codes (canonical rows),
// scale [rows, G] and, for unsigned elements, zero [rows, G]. Rows are independent, so callers
// may quantize a large weight in parallel slices (the random weights of place-weights do).
void quantize_int_rows(const float* w, int64_t rows, int64_t C, QuantElement element,
                       int64_t group_cols, uint8_t* codes, float* scale, float* zero);

}  // namespace mg
