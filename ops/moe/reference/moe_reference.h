// Independent reference implementations of the MoE layer, for tests only: plain loops, double
// accumulation, one token and one expert at a time, full sorts instead of top-k heaps, weights
// read in the node's own layout (canonical or transposed, interleaved or not) by index
// arithmetic rather than converted. Written apart from the fast paths so that a shared mistake
// is unlikely; slow on purpose, never registered as a backend.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "framework/core/quant.h"
#include "framework/core/tensor.h"
#include "ops/moe/config.h"

namespace mg::reference {

struct Routing {
  std::vector<int32_t> ids;    // [M, k]
  std::vector<float> weights;  // [M, k]
  // Per row: the smallest gap between a selected and a rejected key (expert keys and, for
  // grouped routing, group scores). Near-ties (tiny margins) may legitimately pick differently
  // in fp32 and fp64, so tests compare ids only where the margin is clear.
  std::vector<double> margin;  // [M]
};

// The documented routing rules (ops/moe/router/routing.h), in fp64.
Routing route(const RoutingConfig& config, std::span<const float> logits, int64_t rows,
              std::span<const float> score_correction_bias);

// out [M, H] = sum_j w[t, j] * Expert_{ids[t, j]}(x[t]) for the experts of `config`, weights in
// the node's layout (w13/w2 with their biases as given to the op, any float dtype, host). Ids
// not in [0, E) are skipped. With config.routing().weight_on_input() the weight scales the
// expert input instead (Llama-4).
std::vector<float> experts(const MoEConfig& config, std::span<const float> x, int64_t rows,
                           std::span<const int32_t> ids, std::span<const float> weights,
                           const Tensor& w13, const Tensor& w13_bias, const Tensor& w2,
                           const Tensor& w2_bias);

// experts() for FP8 expert weights in the canonical layout: element (e, r, c) of w13 / w2 is
// fp8_e4m3_to_float(code) * scale[e, r / rows, c / cols] (moe_reference_fp8.cc). With
// `activation_group` set (W8A8), each expert's input row and its activation output are replaced
// by codes x scales of quantize_fp8_e4m3_group over groups of that many channels (-1: the row),
// computed from their fp32 values; otherwise they are used as they are (W8A16).
std::vector<float> experts_fp8(const MoEConfig& config, std::span<const float> x, int64_t rows,
                               std::span<const int32_t> ids, std::span<const float> weights,
                               const Tensor& w13, const WeightQuantization& w13_quant,
                               const Tensor& w2, const WeightQuantization& w2_quant,
                               const Tensor& w13_bias, const Tensor& w2_bias,
                               std::optional<int64_t> activation_group);

// experts() for weight-only integer expert weights (canonical codes, framework/core/int_quant.h):
// the codes are dequantized to fp32 exactly as the definition says (real = (q - zero) * scale,
// the group from g_idx or c / g) and experts() runs on them (moe_reference_wna16.cc).
std::vector<float> experts_wna16(const MoEConfig& config, std::span<const float> x, int64_t rows,
                                 std::span<const int32_t> ids, std::span<const float> weights,
                                 const Tensor& w13, const WeightQuantization& w13_quant,
                                 const Tensor& w2, const WeightQuantization& w2_quant,
                                 const Tensor& w13_bias, const Tensor& w2_bias);

// The whole layer from the node's inputs (indexed as moe_input::*, undefined = absent):
// gate -> route -> experts -> + shared experts.
std::vector<float> moe_forward(const MoEConfig& config, const std::vector<Tensor>& inputs);

// Activations in fp64 (independent of ops/nn/activation.h).
double activation(const ActivationConfig& act, double gate, double up);

}  // namespace mg::reference
