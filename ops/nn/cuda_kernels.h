// The CUDA kernels of the dense nn ops, built by each op's create_kernel when the compile device
// is a GPU (only in builds with MG_WITH_CUDA). Each factory lives in
// ops/nn/<op>/<op>_cuda_kernel.cc, the thin adapter over that op's launcher (<op>_cuda.h); the
// op has already checked its parameters and input types.
//
// Every kernel computes in the activation dtype of the compile options (activation_dtype_of:
// BF16 by default, F16 or F32), reads its compute-placed weights in that dtype, accumulates in
// fp32, queues its work on the session's stream and never synchronises with the host.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "framework/op/op_registry.h"
#include "ops/nn/attention/attention_cpu.h"

namespace mg {

std::unique_ptr<OpKernel> make_embedding_cuda_kernel(const KernelContext& ctx, float scale);
// group_size 0: the whole row.
std::unique_ptr<OpKernel> make_rms_norm_cuda_kernel(const KernelContext& ctx, int64_t group_size,
                                                    float eps);
// `owned_weight` (device, compute dtype): a weight the kernel keeps and uses instead of its
// weight input (FP8 weights dequantized at build time); undefined: the input is used.
std::unique_ptr<OpKernel> make_linear_cuda_kernel(const KernelContext& ctx, bool has_bias,
                                                  float scale, Tensor owned_weight = Tensor());
// FP8 weight codes (ctx.weights[1], F8_E4M3 [out, in]) with `quant`, W8A8: the activations are
// quantized per call (dynamic per token / per 128 channels, or the static scale) and the GEMM runs
// on cuBLASLt's FP8 tensor cores (linear_fp8_cuda_kernel.cc). linear_fp8_cuda_refusal says first
// why it cannot ("" when it can: BF16/F16 activations, K a multiple of 128, N of 16, Hopper).
std::string linear_fp8_cuda_refusal(const KernelContext& ctx, const WeightQuantization& quant);
std::unique_ptr<OpKernel> make_linear_fp8_cuda_kernel(const KernelContext& ctx, bool has_bias,
                                                      float scale, const WeightQuantization& quant);
// A warning, once per process per (op, reason), that FP8 weights run W8A16 on CUDA.
void log_fp8_w8a16_fallback_once(std::string_view op, const std::string& reason);
// Weight-only integer codes (ctx.weights[1], canonical INT4 / INT8 layout of
// framework/core/int_quant.h) with `quant`, kept packed on the GPU: a GEMV that dequantizes in
// registers up to kIntGemvMaxRows rows, dequantize-into-workspace + cuBLASLt above
// (linear_int_cuda_kernel.cc). linear_int_cuda_refusal says first why it cannot ("" when it can:
// BF16/F16 activations, groups that are runs of columns (no act-order g_idx), integer zeros).
std::string linear_int_cuda_refusal(const KernelContext& ctx, const WeightQuantization& quant);
std::unique_ptr<OpKernel> make_linear_int_cuda_kernel(const KernelContext& ctx, bool has_bias,
                                                      float scale, const WeightQuantization& quant);
// A warning, once per process per reason, that a linear's integer codes are dequantized at build.
void log_int_dequantize_fallback_once(const std::string& reason);
// The integer linear's device layout built on the host (ops/nn/linear/int_linear_cuda.h): codes U8
// [out, row_bytes] shifted to unsigned, params F32 [out, groups, 2] = {s, 2^23 + z}. Host `codes`
// in the canonical layout; the tests decode it against dequantize_int_cpu.
struct IntLinearCudaLayout {
  Tensor codes;
  Tensor params;
};
IntLinearCudaLayout int_linear_cuda_layout(const Tensor& codes, const WeightQuantization& quant);
std::unique_ptr<OpKernel> make_rope_cuda_kernel(const KernelContext& ctx,
                                                const proto::RopeParams& params);
std::unique_ptr<OpKernel> make_attention_cuda_kernel(const KernelContext& ctx,
                                                     const AttentionDims& dims);
// `activation` already checked by check_gated_mlp_activation.
std::unique_ptr<OpKernel> make_gated_mlp_cuda_kernel(const KernelContext& ctx,
                                                     proto::Activation activation,
                                                     int64_t intermediate);
std::unique_ptr<OpKernel> make_add_cuda_kernel(const KernelContext& ctx, float scale);
// b_heads: 1 (one b head shared by every head) or num_heads, from the width of b.
std::unique_ptr<OpKernel> make_concat_heads_cuda_kernel(const KernelContext& ctx,
                                                        const proto::ConcatHeadsParams& params,
                                                        int64_t b_heads);
// An unset bound is passed as an infinity of its sign.
std::unique_ptr<OpKernel> make_clamp_cuda_kernel(const KernelContext& ctx, float min, float max);
std::unique_ptr<OpKernel> make_attn_temperature_cuda_kernel(const KernelContext& ctx,
                                                            float attn_scale, float floor_scale);

}  // namespace mg
