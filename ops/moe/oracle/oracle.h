// The oracle: picks the expert backend of one MoE node at compile time, converts the node's
// weights for it once, and builds the node's FusedMoEKernel.
//
// The selection algorithm is shared by every quant scheme (one module per scheme supplies the
// priority list and the weight conversion: unquantized.h, fp8.h):
//   1. the prepare/finalize follows from the ParallelConfig, and with it the activation format
//      the experts must take;
//   2. every backend of the device's priority list runs its support checks in a fixed order
//      (device, quant, activation, routing for monolithic classes, parallel config, shape,
//      weights where the scheme's module gives their facts, activation format); the first
//      failing check is its reason;
//   3. a requested backend (the node's `backend` param, or CompileOptions::moe_backend, which
//      wins) is used if it passes, and is an error naming the failed check if not - never a
//      silent fallback; an unknown name is an error listing the known ones. `backend:kernel`
//      also forces one of the backend's kernels (ExpertsBackend::check_kernel; e.g.
//      `cuda_moe:grouped_tma`);
//   4. otherwise the first backend that passes wins; when none does, the error lists every
//      backend with its reason.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "framework/device/device.h"
#include "ops/moe/kernel/experts.h"
#include "ops/moe/kernel/fused_moe_kernel.h"

namespace mg {

// What the oracle decides for: one node on one rank.
struct OracleQuery {
  Device device;
  const MoEConfig& config;
  const MoEQuantConfig& quant;
  const ParallelConfig& parallel;
  const ExpertsShape& shape;
  // Requested backend name; "" or "auto" lets the oracle choose.
  std::string_view requested;
  // The quantized weights' layout facts for ExpertsBackend::check_weights, or null (then that
  // check is not run): schemes whose backends refuse some layouts of one quant key (wna16).
  const ExpertWeightFacts* weights = nullptr;
};

// A request "backend" or "backend:kernel".
struct BackendRequest {
  std::string_view backend;
  std::string_view kernel;  // "" when none is forced
};
BackendRequest split_backend_request(std::string_view requested);

struct BackendVerdict {
  std::string name;
  // "" when the backend fits, else "<check>: <why>" ("device: runs on the CPU only, not cuda:0").
  std::string reason;
};

struct OracleChoice {
  const ExpertsBackend* backend = nullptr;
  bool requested = false;  // chosen because it was asked for
  std::string kernel;      // the forced kernel of a `backend:kernel` request, else ""
  std::string prepare_finalize;
  // Every backend of the priority list, in order.
  std::vector<BackendVerdict> verdicts;

  // For `moegraph inspect --plan`: the choice, then one line per other backend.
  std::string describe() const;
};

// The first failing check of `backend` for `query`, as "<check>: <why>", or "".
std::string check_backend(const ExpertsBackend& backend, const OracleQuery& query);

// Steps 1-4 above over `priority`. Throws mg::Error for a refused or unknown request and when
// nothing fits.
OracleChoice select_backend(std::span<const ExpertsBackend* const> priority,
                            const OracleQuery& query);

// The node's expert weights as the graph gives them (kRaw: host, any float dtype, the layout of
// MoEConfig::layout(); quantized schemes: the codes with their scales); biases undefined when
// absent.
struct RawExpertWeights {
  Tensor w13;
  Tensor w13_bias;
  Tensor w2;
  Tensor w2_bias;
  WeightQuantization w13_quant = {};
  WeightQuantization w2_quant = {};
};

// Whether this rank holds the whole layer: every expert (then in order) and the full width.
inline bool is_whole_layer(const MoEConfig& config, const ExpertsShape& shape) {
  return shape.num_local_experts() == config.num_experts() &&
         shape.intermediate_size == config.intermediate_size();
}

// The codes and scales of `raw` taken as they are stored (a backend that repacks them itself).
inline QuantizedExpertWeights codes_as_stored(const RawExpertWeights& raw) {
  QuantizedExpertWeights out;
  out.w13 = raw.w13;
  out.w13_quant = raw.w13_quant;
  out.w2 = raw.w2;
  out.w2_quant = raw.w2_quant;
  return out;
}

struct MoEKernelBuild {
  std::unique_ptr<FusedMoEKernel> kernel;
  OracleChoice choice;
};

// Throws mg::Error "... is not supported yet" for a quant scheme without an oracle module.
void check_quant_scheme_supported(QuantScheme scheme);

// Runs the oracle module of config.quant_scheme() for `device` and `parallel`, converts the
// weights for the chosen backend (the result owns them) and builds the kernel.
// `requested` as in OracleQuery. `score_correction_bias` [E] F32 when the routing has one.
// `activation_dtype`: the activations' element type on `device` (activation_dtype_of).
// `quantize_activations`: CompileOptions::quantize_activations.
MoEKernelBuild build_moe_kernel(const MoEConfig& config, const ParallelConfig& parallel,
                                Device device, DType activation_dtype, std::string_view requested,
                                const RawExpertWeights& raw, const Tensor& score_correction_bias,
                                bool quantize_activations = true);

}  // namespace mg
