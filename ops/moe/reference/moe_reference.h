// Independent reference implementations of the MoE layer, for tests only: plain loops, double
// accumulation, one token and one expert at a time, full sorts instead of top-k heaps, weights
// read in the node's own layout (canonical or transposed, interleaved or not) by index
// arithmetic rather than converted. Written apart from the fast paths so that a shared mistake
// is unlikely; slow on purpose, never registered as a backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

// The whole layer from the node's inputs (indexed as moe_input::*, undefined = absent):
// gate -> route -> experts -> + shared experts.
std::vector<float> moe_forward(const MoEConfig& config, const std::vector<Tensor>& inputs);

// Activations in fp64 (independent of ops/nn/activation.h).
double activation(const ActivationConfig& act, double gate, double up);

}  // namespace mg::reference
