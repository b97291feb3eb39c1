// Options that steer compilation of a graph into an ExecutionPlan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/device/device.h"
#include "framework/parallel/parallel_config.h"

namespace mg {

struct CompileOptions {
  Device device = Device::cpu();
  // Largest token count of one forward call; sizes the activation arena and workspaces.
  int64_t max_tokens = 512;
  // Longest sequence the KV cache holds; 0 means the model's ModelInfo.max_seq_len.
  int64_t max_seq_len = 0;
  // Expert backend forced for every MoE node ("" lets the oracle choose). A forced backend that
  // does not fit a node is an error naming the failed check.
  std::string moe_backend;
  // Where this rank sits among the tensor/data/expert-parallel ranks (single rank by default);
  // MoE nodes shard their experts and pick their token dispatch from it.
  ParallelConfig parallel;
  // Element type of every float activation and of every compute-placed weight; unset picks the
  // device's default. See activation_dtype_of().
  std::optional<DType> activation_dtype;
  // Benchmarks of models too large to write to disk: set, the graph's weight files are not read
  // and every weight is filled with deterministic random values from this seed instead
  // (framework/device/random_fill.h): matrices uniform in ±1/sqrt(last dim), vectors (norm
  // scales, biases) in 1 ± 0.05. Weights of at least kDeviceRandomWeightElements elements are
  // made on the compile device, in their declared dtype; smaller ones on the host. Quantized
  // weights get codes and scales of like values (framework/compile/random_quantized_weights.h),
  // a MoE node's integer and FP4 expert codes on a GPU made there (cuda_wna16 / cuda_fp4 repack
  // them in place), the rest on the host's threads; the same values either way.
  std::optional<uint64_t> random_weights;
  // Quantized weights whose checkpoint quantizes the activations too (ACT_QUANT_DYNAMIC: W8A8)
  // do so when true; false keeps every activation in the compute dtype (W8A16: the weights are
  // still read quantized). moegraph --activation-quant none.
  bool quantize_activations = true;
  // With quantize_activations: the dense ops with FP8 weights (linear, gated_mlp, the MoE shared
  // experts) quantize their inputs too, which is what the checkpoint means (every quantized
  // Linear's input: DeepSeek's FP8Linear); false quantizes the routed experts' only
  // (--activation-quant experts). On CUDA the dense ops run W8A16 for now either way.
  bool quantize_dense_activations = true;
  // Runs the fuse-ops pass (framework/compile/fuse_ops.h): op sequences become fused ops
  // (add + rms_norm -> add_rms_norm, q/k rms_norm + rope or the q/k ropes -> qk_norm_rope) with
  // the same outputs.
  // false runs the graph as written (moegraph --no-fuse; tests compare the two).
  bool fuse_ops = true;
};

// Random weights this large are generated where they are used (a 30B-parameter model would take
// minutes to generate on the host); smaller ones stay on the host, where some consumers (the MoE
// router's biases) read them at compile time.
inline constexpr int64_t kDeviceRandomWeightElements = int64_t{1} << 20;

// The activation (compute) dtype the options select: F32 on the CPU (the only one its kernels
// run), BF16 on CUDA unless F16 or F32 is asked for. Throws mg::Error for a dtype the device
// cannot run.
inline DType activation_dtype_of(const CompileOptions& options) {
  switch (options.device.type) {
    case DeviceType::kCPU: {
      const DType dtype = options.activation_dtype.value_or(DType::kF32);
      MG_CHECK(dtype == DType::kF32,
               "activation dtype {} is not supported on cpu: the CPU kernels compute in F32 "
               "(BF16 and F16 run on --device cuda)",
               dtype_name(dtype));
      return dtype;
    }
    case DeviceType::kCUDA: {
      const DType dtype = options.activation_dtype.value_or(DType::kBF16);
      MG_CHECK(dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32,
               "activation dtype {} is not supported on {}: expected BF16, F16 or F32",
               dtype_name(dtype), options.device.str());
      return dtype;
    }
  }
  MG_ASSERT(false, "unknown device type {}", static_cast<int>(options.device.type));
}

}  // namespace mg
