// Quantised weights as the framework carries them from the graph file to an op's kernel.
//
// A quantised weight is two tensors: its codes (e.g. F8_E4M3 [..., R, C]) and its scales, one
// per group of `group.rows` x `group.cols` elements of the last two dimensions (-1 spans the whole
// dimension), with leading dimensions (experts) each holding their own scales:
//
//   real[..., r, c] = code_to_float(codes[..., r, c]) * scale[..., r / rows, c / cols]
//
// and the instruction for the activations that multiply it (dynamic per-token-group quantisation
// for W8A8 checkpoints, none for weight-only ones). proto/model.proto (TensorQuantization) is the
// file format; the place-weights pass hands ops that take quantised weights a WeightQuantization
// beside the codes, and dequantises for every other consumer.
#pragma once

#include <cstdint>
#include <string>

#include "framework/core/tensor.h"

namespace mg {

// Granularity of one scale: a block of rows x cols elements of the last two dimensions; -1 spans
// the whole dimension. For a weight stored [out, in] (y = x W^T): [128, 128] is DeepSeek-V3's
// block, [1, -1] one scale per output channel, [-1, -1] one per matrix. For activations [T, K]:
// [1, 128] per token per 128 channels, [1, -1] per token.
struct GroupShape {
  int64_t rows = -1;
  int64_t cols = -1;
  static GroupShape per_tensor() { return {-1, -1}; }
  static GroupShape per_token() { return {1, -1}; }
  static GroupShape per_channel() { return {1, -1}; }
  static GroupShape block(int64_t rows, int64_t cols) { return {rows, cols}; }
  // The group extent along a dimension of `size` elements (-1 -> size).
  int64_t rows_in(int64_t size) const { return rows < 0 ? size : rows; }
  int64_t cols_in(int64_t size) const { return cols < 0 ? size : cols; }
  // "[128, 128]", "per tensor", "per channel".
  std::string str() const;
  bool operator==(const GroupShape&) const = default;
};

// How the activations a quantised weight multiplies are quantised by its consumer.
enum class ActivationQuant : uint8_t {
  kNone,     // kept in the compute dtype (weight-only, W8A16)
  kDynamic,  // per token per `group` channels, scale = amax / 448, computed per call (W8A8)
  // One fixed scale from the checkpoint (compressed-tensors' static `input_scale`) for every token:
  // q = e4m3(clamp(x / scale, -448, 448)) (W8A8; vLLM's static_scaled_fp8_quant).
  kStatic,
};

// Element type of a quantised weight's codes (proto QuantElement). kFromDtype: the codes are
// elements of the tensor's dtype (F8_E4M3). The integer elements are weight-only codes
// (framework/core/int_quant.h: layout, packing, dequantisation).
enum class QuantElement : uint8_t {
  kFromDtype,
  kInt4,   // signed [-8, 7], two per U8 byte along the last dimension (low nibble first)
  kUInt4,  // unsigned [0, 15] with a zero point, packed as kInt4
  kInt8,   // signed [-128, 127], I8
  kUInt8,  // unsigned [0, 255] with a zero point, U8
  // FP4 E2M1 (MXFP4 / NVFP4), two per U8 byte along the last dimension, even column in the low
  // nibble; weight-only, with F32 group scales (framework/core/fp4.h: codes, scale decoding).
  kFp4E2M1,
};
// "F8_E4M3 codes" style name: "int4", "uint4", "int8", "uint8", "fp4_e2m1", "dtype".
std::string_view quant_element_name(QuantElement element);

// The scales of one quantised weight, as an op's kernel receives them (KernelContext).
struct WeightQuantization {
  // F32 on the host, [leading..., ceil(R / rows), ceil(C / cols)].
  Tensor scale;
  GroupShape group;
  ActivationQuant activation = ActivationQuant::kNone;
  // kDynamic: channels per activation scale (128, or -1 for the whole row).
  int64_t activation_group = -1;
  // kStatic: the activation scales, F32 [n] on the host (n parts of a stacked or fused weight,
  // each with its checkpoint scale; the consumer uses the largest).
  Tensor activation_scale;

  // ---- Integer weight-only codes (element != kFromDtype; framework/core/int_quant.h) ----
  QuantElement element = QuantElement::kFromDtype;
  // The logical shape [leading..., R, C] of the real values (the codes tensor is packed for
  // 4-bit elements); empty for kFromDtype (the codes' own shape).
  Shape logical_shape;
  // kUInt4 / kUInt8: F32 on the host, the scale's shape, zero points in code units
  // (real = (q - zero) * scale); undefined: the midpoint 2^(bits-1).
  Tensor zero_point;
  // GPTQ act-order: I32 on the host, [leading..., C]: the scale group (column of `scale`) of every
  // input column; undefined: column c is in group c / group.cols.
  Tensor g_idx;

  // ---- FP4 (element kFp4E2M1) ----
  // NVFP4: F32 on the host, [leading..., S]: the global scale already folded into `scale`
  // (scale = e4m3 x global; row r of a matrix of R rows has global[.., r / (R / S)]), kept so that
  // a backend can store the E4M3 bytes (scale / global) and apply it once (cuda_fp4);
  // compressed-tensors' dividing global is kept as its reciprocal. Undefined: none (MXFP4).
  Tensor global_scale;

  bool defined() const { return scale.defined(); }
  bool is_integer() const {
    return element != QuantElement::kFromDtype && element != QuantElement::kFp4E2M1;
  }
};

// The bytes of an F8_E4M3 tensor (its codes); asserts the dtype.
uint8_t* fp8_codes(const Tensor& t);

// The scale-tensor shape a quantised tensor of `codes_shape` (rank >= 2) needs with `group`.
Shape scale_shape_for(const Shape& codes_shape, GroupShape group);

// real values as F32 on the host: codes (host F8_E4M3, or integer codes as int_quant.h lays them
// out) times their scales (host F32), of the logical shape.
Tensor dequantize_cpu(const Tensor& codes, const WeightQuantization& q);

}  // namespace mg
