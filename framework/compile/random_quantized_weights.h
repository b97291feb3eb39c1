// The random codes and scales of quantized weights (CompileOptions::random_weights): each tensor's
// values come from a counter-based stream seeded by the seed and its name (random_uniform.h), so
// element i is the same whatever order, thread or device makes it. They are made on the host,
// split over its cores (a Qwen3-30B-A3B's 15 G INT4 codes take minutes on one thread), or, for
// FP4 and integer codes, on a GPU (`where`: the MoE backends cuda_wna16 and cuda_fp4 repack them
// there), and come out like the unquantized random weights: real values of magnitude about
// 1/sqrt(C) for a weight of C columns.
#pragma once

#include <cstdint>
#include <utility>

#include "framework/core/fp4_scale_bytes.h"
#include "framework/core/quant.h"
#include "framework/device/device.h"
#include "proto/model.pb.h"

namespace mg {

// FP8 E4M3 codes [shape of `info`] uniform over the E4M3 range (element i: float_to_fp8_e4m3 of
// uniform_at(mix64(seed ^ fnv1a(name)), i, 0, 448)), F32 scales per `group` of
// 1 / (448 sqrt(C)) times uniform_at(mix64(seed ^ fnv1a(scale name)), i, 1, 0.5).
std::pair<Tensor, WeightQuantization> random_fp8_weight(const proto::TensorInfo& info,
                                                        const GroupShape& group, uint64_t seed);

// FP4 E2M1 packed codes U8 [stored shape of `info`], every byte floor(uniform_at(.., i, 128, 128))
// (so every code is uniform over +-{0 .. 6}), F32 scales per `group` of the logical shape:
// 1 / (6 sqrt(C)) times a factor in [0.5, 1.5) as random_fp8_weight's, rounded to `grid` so that
// they have the checkpoint's scale bytes: kE8M0 (MXFP4) down to a power of two; kE4M3 (NVFP4) to
// an E4M3 value times a global scale g = 2^floor(log2(1 / (6 sqrt(C)))), which comes back in
// global_scale ([leading..., 1], host).
std::pair<Tensor, WeightQuantization> random_fp4_weight(const proto::TensorInfo& info,
                                                        const GroupShape& group, uint64_t seed,
                                                        Device where = Device::cpu(),
                                                        Fp4ScaleGrid grid = Fp4ScaleGrid::kF32);

// Integer codes of `element` in the canonical layout (framework/core/int_quant.h) of the values
// uniform_at(mix64(seed ^ fnv1a(name)), i, 0, 1/sqrt(C)) of the `logical` [.., R, C] weight,
// quantized per row and group of `group_cols` columns exactly as quantize_int_cpu does (the same
// codes, scales and zero points), a slice of rows at a time so the F32 values are never whole.
std::pair<Tensor, WeightQuantization> random_int_weight(const proto::TensorInfo& info,
                                                        const Shape& logical, QuantElement element,
                                                        int64_t group_cols, uint64_t seed,
                                                        Device where = Device::cpu());

}  // namespace mg
