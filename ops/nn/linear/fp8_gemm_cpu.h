// FP8 E4M3 weights on the CPU: the GEMM that reads codes and dequantizes one tile of 128 weight
// rows at a time into F32 (never the whole matrix), and the dynamic activation quantization
// applied as codes x scales. Used by the FP8 linear and the cpu_fp8 MoE experts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "framework/core/quant.h"

namespace mg {

class ThreadPool;

// y [n, R] = x [n, C] . W^T with W[r, c] = e4m3(codes[r * C + c]) * scale[(r / gr) * sc + c / gc]
// for `group` (gr, gc; -1 = whole dimension) and sc = ceil(C / gc) scale columns. Host fp32 x and
// y (y must not alias x). Parallel over weight tiles on `pool` (null: the calling thread; never
// from inside a parallel_for of `pool`). Scratch is per thread.
void cpu_fp8_gemm_xwt(const float* x, int64_t n, const uint8_t* codes, const float* scale,
                      int64_t R, int64_t C, GroupShape group, float* y, ThreadPool* pool);

// out [n, width] = rows quantized per token per `group` channels (-1: the whole row) by
// quantize_fp8_e4m3_group (framework/core/fp8.h), as codes x scales in fp32. out may be rows.
void cpu_fake_quantize_fp8_rows(const float* rows, int64_t n, int64_t width, int64_t group,
                                float* out);

// How a consumer of FP8 weights quantizes its activations (WeightQuantization's instruction).
struct Fp8ActivationQuant {
  int64_t group = -1;         // dynamic: channels per scale, -1 the whole row
  float static_scale = 0.0f;  // > 0: static, every row with this scale (group unused)
  // "activations quantized per token per 128 channels", "... with the static scale 0.0123".
  std::string str() const;
};
// The instruction of a weight whose activation is kDynamic or kStatic (asserts).
Fp8ActivationQuant fp8_activation_quant(const WeightQuantization& q);

// The two activation quantizations of an FP8 MLP (dense gated MLP, MoE shared experts): the
// input of gate/up, and the input of down (the same group; a static checkpoint has a scale each).
struct Fp8MlpActivationQuant {
  Fp8ActivationQuant input;
  Fp8ActivationQuant hidden;
};
// From up's and down's WeightQuantization: nullopt when `enabled` is false or up does not
// quantize its activations (W8A16, or unquantized weights).
std::optional<Fp8MlpActivationQuant> fp8_mlp_activation_quant(const WeightQuantization& up,
                                                              const WeightQuantization& down,
                                                              bool enabled);

// out [n, width] = rows quantized as `a` says (quantize_fp8_e4m3_group per group, or
// quantize_fp8_e4m3_static), as codes x scales in fp32. out may be rows.
void cpu_fake_quantize_fp8_activations(const float* rows, int64_t n, int64_t width,
                                       const Fp8ActivationQuant& a, float* out);

}  // namespace mg
