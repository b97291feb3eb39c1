// The experts half of a FusedMoEKernel: the part that runs the expert MLPs.
//
//   modular     DispatchedTokens (top-k ids and weights already chosen) -> expert_output:
//               permute rows by expert -> GEMM1 (w13) -> activation -> GEMM2 (w2) ->
//               weighted un-permute and sum over k (standard format; batched experts leave
//               the weighting to finalize)
//   monolithic  DispatchedLogits (router logits) -> expert_output: routing and the experts in
//               one call (the decode fast path on GPUs)
//
// Each experts class comes with an ExpertsBackend, its one descriptor: the name, form and
// activation format, the support checks the oracle runs before building it, and the factory that
// converts the canonical weights into the class's own layout. The experts it builds read their
// name and form from it (Experts::backend()), so they are written down once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "framework/device/device.h"
#include "ops/moe/config.h"
#include "ops/moe/kernel/expert_weights.h"
#include "ops/moe/kernel/moe_types.h"
#include "ops/moe/kernel/workspace.h"

namespace mg {

class ExpertsBackend;

class Experts {
 public:
  virtual ~Experts() = default;
  // The backend that built these experts: name, form, activation format.
  const ExpertsBackend& backend() const { return backend_; }
  std::string_view name() const;
  bool is_monolithic() const;
  ActivationFormat activation_format() const;
  // Scratch for an apply() with at most `max_rows` input rows (standard: tokens; batched:
  // max_tokens_per_expert).
  virtual size_t workspace_bytes(int64_t max_rows) const = 0;
  // False for experts that read device results back to the host during apply().
  virtual bool graph_capturable() const { return true; }

 protected:
  explicit Experts(const ExpertsBackend& backend) : backend_(backend) {}

 private:
  const ExpertsBackend& backend_;
};

class ExpertsModular : public Experts {
 public:
  // Writes tokens.expert_output (see DispatchedTokens); scratch from `ws`.
  virtual void apply(const DispatchedTokens& tokens, Workspace& ws, const MoEExecContext& ctx) = 0;

 protected:
  explicit ExpertsModular(const ExpertsBackend& backend);
};

class ExpertsMonolithic : public Experts {
 public:
  // expert_output [M, H] = sum_j w_j Expert_{id_j}(x) with ids/weights routed from the logits
  // (local experts only).
  virtual void apply(const DispatchedLogits& tokens, Workspace& ws, const MoEExecContext& ctx) = 0;
  // Whether apply() uses tokens.topk_ids / topk_weights when they are set (routed by the runner
  // with the same RoutingConfig: the same ids and weights) instead of routing again.
  virtual bool takes_routing() const { return false; }

 protected:
  explicit ExpertsMonolithic(const ExpertsBackend& backend);
};

// Everything a backend needs to build its experts for one node on one rank.
struct ExpertsBuild {
  const MoEConfig& config;
  const ExpertsShape& shape;
  // Where the experts run (CUDA backends upload their weights there).
  Device device;
  // This rank's canonical weights (unquantized schemes); the backend converts (or adopts) them.
  // They are the node's own copy, so the experts own what they keep.
  CanonicalExpertWeights weights;
  // [E] F32 when config.routing().has_score_correction_bias (monolithic routing needs it).
  Tensor score_correction_bias;
  // A forced kernel of backends that choose among kernels ("" or "auto": their own choice; the
  // names are the backend's, e.g. ops/moe/heuristics/unquantized_kernel_choice.h for cuda_moe).
  // Passed checked (ExpertsBackend::check_kernel).
  std::string_view kernel = {};
  // How weights and activations are stored (the oracle's query). Quantized schemes fill
  // `quantized` (this rank's, the node's own) instead of `weights`.
  MoEQuantConfig quant = MoEQuantConfig::unquantized();
  QuantizedExpertWeights quantized = {};
};

// What the support checks may see of a quantized node's expert weights beyond the quant key
// (which names w2's codes and group only): each matrix's code width, scale group and whether
// act-order groups (a GPTQ g_idx) remain after the scheme's weight conversion, and (FP4) whether
// every scale has a one-byte code and (MXFP4) the largest. The WNA16 and FP4 oracle modules fill it
// (wna16_weight_facts, fp4_weight_facts); schemes whose backends need none of it leave it out.
struct ExpertWeightFacts {
  struct Matrix {
    int bits = 0;             // code width (4, 8)
    int64_t group_cols = -1;  // columns per scale group; -1 channel-wise
    bool act_order = false;   // a g_idx that the conversion keeps (groups not contiguous)
    // FP4: every scale is an E8M0 value (MXFP4) or an E4M3 value times its global (NVFP4), so a
    // layout of scale bytes holds it (framework/core/fp4_scale_bytes.h).
    bool scales_have_bytes = true;
    // MXFP4: the largest E8M0 code of the scales (2^(code - 127)); cuda_fp4 takes up to 2^6.
    int largest_e8m0_code = 0;
  };
  Matrix w13, w2;
};

// What the oracle knows about one experts class. Every check returns "" when the class
// supports the case, else a short reason ("runs on the CPU only, not cuda:0").
class ExpertsBackend {
 public:
  virtual ~ExpertsBackend() = default;
  virtual std::string_view name() const = 0;
  virtual bool is_monolithic() const = 0;
  virtual ActivationFormat activation_format() const = 0;

  virtual std::string check_device(Device device) const = 0;
  virtual std::string check_quant(const MoEQuantConfig& quant) const = 0;
  virtual std::string check_activation(const ActivationConfig& activation) const = 0;
  // Monolithic classes route themselves and say which methods they implement.
  virtual std::string check_routing(const RoutingConfig& routing) const { return {}; }
  virtual std::string check_parallel(const ParallelConfig& parallel) const = 0;
  virtual std::string check_shape(const ExpertsShape& shape) const = 0;
  // The node's quantized weights as the scheme's conversion leaves them (ExpertWeightFacts; run
  // only where the oracle module supplies them). Backends that read the weights' quant key only
  // take every layout.
  virtual std::string check_weights(const ExpertWeightFacts& weights,
                                    const ExpertsShape& shape) const {
    return {};
  }
  // A forced kernel (ExpertsBuild::kernel, requested as `backend:kernel`): "" when `kernel` names
  // one of this backend's kernels and it can run `shape` on `device`, else why. Backends without
  // a kernel choice take none.
  virtual std::string check_kernel(std::string_view kernel, const ExpertsShape& shape,
                                   Device device) const {
    return kernel.empty() || kernel == "auto"
               ? std::string()
               : std::string(name()) + " runs one kernel and takes no kernel request";
  }

  // Whether create() takes quantized expert codes that already lie on the GPU (random weights
  // made there) for a whole layer and repacks them there; the oracle hands every other backend
  // host copies.
  virtual bool takes_device_codes() const { return false; }

  // Experts built here take `*this` as their backend().
  virtual std::unique_ptr<Experts> create(ExpertsBuild build) const = 0;
};

inline ExpertsModular::ExpertsModular(const ExpertsBackend& backend) : Experts(backend) {
  MG_ASSERT(!backend.is_monolithic(), "modular experts built by monolithic backend {}",
            backend.name());
}
inline ExpertsMonolithic::ExpertsMonolithic(const ExpertsBackend& backend) : Experts(backend) {
  MG_ASSERT(backend.is_monolithic() && backend.activation_format() == ActivationFormat::kStandard,
            "monolithic experts take standard tokens from a monolithic backend, not {}",
            backend.name());
}

inline std::string_view Experts::name() const {
  return backend_.name();
}
inline bool Experts::is_monolithic() const {
  return backend_.is_monolithic();
}
inline ActivationFormat Experts::activation_format() const {
  return backend_.activation_format();
}

}  // namespace mg
