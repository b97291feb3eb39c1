// `moegraph bench moe`: one MoE layer (routing from router logits + the routed experts) timed on
// a GPU for each backend of the CUDA oracle list, next to the floor of the layer.
//
//   floor(M) = max(bytes / copy bandwidth, flops / bf16 matmul rate)
//     bytes  = D * 3 H I * 2 (the expected D distinct experts touched under uniform routing,
//              E (1 - (1 - k/E)^M)) + M H * 2 * 2 (x in, out) + M E * 4 (logits)
//     flops  = 2 M k * 3 H I
// FP8 (--quant): the expert bytes are D * (3 H I codes + their F32 scales), the rate the FP8 one.
// FP4 (--quant mxfp4 | nvfp4): D * (3 H I / 2 packed codes + one byte per scale group), the
// checkpoint's bytes; the rate the BF16 one (weight-only).
// WNA16 (--quant int4-g128 | uint8-channel | ...): D * (3 H I bits / 8 packed codes + per scale
// group 2 bytes of scale, and bits / 8 of zero point for the unsigned, asymmetric elements), the
// bytes a GPTQ / AWQ / compressed-tensors checkpoint stores (16-bit scales, zero points packed
// like the codes); the rate the BF16 one (weight-only). The kernels stream F32 pairs {s, -z·s}
// per group (8 bytes), more than this floor counts.
// (the model of ../shared/peers/moe_common.py, so that our percentages and the peers' compare).
// Both ceilings are measured here on the same GPU: a 2 GiB device-to-device copy (bytes read +
// written) and a BF16 8192^3 cuBLASLt GEMM. Timing: CUDA events around each call, 3 warm-up
// calls, then enough calls to fill ~200 ms (5..400), the median; `sets` input sets (x, logits)
// rotate between calls so consecutive calls touch different experts. Built only with CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/dtype.h"
#include "framework/core/quant.h"
#include "framework/core/tensor.h"
#include "ops/moe/config.h"

namespace mg {

struct MoEBenchShape {
  std::string name;
  int64_t hidden = 0, inter = 0, experts = 0, top_k = 0;
};

// mixtral, qwen3-30b-a3b, deepseek-v3, gpt-oss-120b (the reference's four shapes).
const std::vector<MoEBenchShape>& moe_bench_shapes();

struct MoEBenchOptions {
  std::vector<MoEBenchShape> shapes;
  std::vector<int64_t> tokens;
  // Names from the CUDA oracle list, or `backend:kernel` to force one of its kernels
  // (`cuda_moe:grouped_tma`; ops/moe/heuristics/unquantized_kernel_choice.h names them).
  std::vector<std::string> backends;
  DType dtype = DType::kBF16;
  // FP8 schemes (bench moe --quant): expert codes made by quantizing random BF16 values on the GPU,
  // random scales of the scheme's groups (fp8_block: 128 x 128, activations per 128 channels;
  // fp8_per_channel: per row, fp8_per_tensor: per matrix, activations per token), the FP8 oracle
  // module's CUDA backends, and the floor on the quantized bytes and the measured FP8 rate.
  // FP4 schemes (kMxfp4, kNvfp4): random packed codes and F32 group scales made on the GPU, the FP4
  // oracle module's CUDA backends (cuda_fp4, cuda_dequant).
  // WNA16 schemes (kInt4WeightOnly, kInt8WeightOnly): random packed codes and F32 group pairs
  // made on the GPU in cuda_wna16's layout (make_random_wna16_weights), timed on cuda_wna16 (the
  // only backend that reads them); `int_element` (kInt4 / kUInt4 / kInt8 / kUInt8, matching the
  // scheme's width; unsigned: zero points) and `int_group` (columns per scale group, -1
  // channel-wise) are the quant key's and the floor's. A shape whose K is not a multiple of the
  // group is an error naming the weights check.
  QuantScheme quant = QuantScheme::kUnquantized;
  QuantElement int_element = QuantElement::kFromDtype;
  int64_t int_group = 128;
  int sets = 4;
  double target_ms = 200.0;
  // Compare every point's output on set 0 with the independent fp64 reference
  // (ops/moe/reference/moe_reference.h) on a few sampled rows: see MoEBenchPoint::check_error.
  bool check = true;
  // Test hook: called on the device output of the checked call before it is compared, so that a
  // test can perturb it and see the check fail. Empty in the command.
  std::function<void(const std::string& backend, const Tensor& out)> perturb_checked_output;
};

// The most rows of a point the check recomputes on the host (each costs top_k experts' weights
// copied back and an fp64 expert MLP: ~1 s on the mixtral shape).
inline constexpr int64_t kMoEBenchCheckRows = 3;

// The normalised error above which a point's check fails: the activation dtype's rounding
// through two GEMMs and the activation (BF16 8 bits of mantissa, F16 11), FP8 schemes the
// quantization of the activations on top (the reference quantizes them the same way, but a
// value on a rounding boundary may land on the other code). WNA16 schemes take the dtype's:
// their weights are dequantized exactly and rounded once to the dtype, as the BF16 path's are.
double moe_bench_check_tolerance(DType dtype, QuantScheme quant);

struct MoEBenchCeilings {
  double copy_bytes_per_s = 0;
  double bf16_flops_per_s = 0;
  // An FP8 e4m3 8192^3 cuBLASLt GEMM (BF16 out, fp32 compute): the FP8 tensor-core rate.
  double fp8_flops_per_s = 0;
};

struct MoEBenchPoint {
  std::string shape;
  std::string backend;
  int64_t tokens = 0;
  double median_us = 0, p10_us = 0, p90_us = 0;
  int reps = 0;
  double distinct_experts = 0;  // expected, as in the floor
  double bytes = 0, flops = 0;
  double floor_us = 0;
  // The output on set 0 against the fp64 reference layer (same inputs and weights, routed from
  // the same logits in fp64) on up to kMoEBenchCheckRows sampled rows, normalised error; -1 when
  // not checked. check_failed: above moe_bench_check_tolerance.
  double check_error = -1;
  bool check_failed = false;

  double tb_per_s() const { return bytes / (median_us * 1e-6) / 1e12; }
  double tflop_per_s() const { return flops / (median_us * 1e-6) / 1e12; }
  double pct_of_floor() const { return 100.0 * floor_us / median_us; }
};

// The checkpoint bytes of one expert (w13 [2I, H] and w2 [H, I]) of integer `element` codes
// with scale groups of `group` columns (-1 channel-wise): the WNA16 floor's expert bytes above.
double wna16_checkpoint_expert_bytes(int64_t hidden, int64_t inter, QuantElement element,
                                     int64_t group);

MoEBenchCeilings measure_moe_bench_ceilings();

// Runs every (shape, tokens, backend); `progress` (may be empty) sees each point as it lands.
std::vector<MoEBenchPoint> run_moe_bench(const MoEBenchOptions& options,
                                         const MoEBenchCeilings& ceilings,
                                         const std::function<void(const MoEBenchPoint&)>& progress);

}  // namespace mg
