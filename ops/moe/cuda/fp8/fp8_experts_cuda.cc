// Host side of the FP8 expert kernels (fp8_experts_cuda.h): the GEMM dispatch, the expert MLP's
// four launches and the scratch layouts. Plain C++ over the launchers the .cu files instantiate.
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "framework/core/error.h"
#include "ops/moe/cuda/fp8/fp8_gemm_launch.h"

namespace mg::cuda {
namespace {

constexpr size_t kScratchAlign = 256;

size_t align_up(size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// Carves consecutive 256-byte aligned pieces out of a scratch buffer.
class ScratchCarver {
 public:
  ScratchCarver(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  template <typename P>
  P* take(size_t bytes) {
    const size_t at = used_;
    used_ += align_up(bytes);
    MG_CHECK(used_ <= bytes_, "FP8 experts: scratch of {} bytes is smaller than the {} needed",
             bytes_, used_);
    return reinterpret_cast<P*>(base_ + at);
  }

 private:
  char* base_;
  size_t bytes_;
  size_t used_ = 0;
};

// The four pieces of an MLP over `rows` rows: input codes and scales, intermediate (T), its codes
// and scales.
struct MlpScratch {
  uint8_t* xq;
  float* xs;
  void* h;
  uint8_t* hq;
  float* hs;
};

size_t mlp_scratch_bytes(int64_t rows, int64_t hidden, int64_t inter, size_t element_bytes) {
  const auto r = static_cast<size_t>(rows);
  return align_up(r * hidden) + align_up(r * fp8_groups(hidden) * sizeof(float)) +
         align_up(r * inter * element_bytes) + align_up(r * inter) +
         align_up(r * fp8_groups(inter) * sizeof(float));
}

MlpScratch carve_mlp_scratch(void* scratch, size_t bytes, int64_t rows, int64_t hidden,
                             int64_t inter, size_t element_bytes) {
  MG_CHECK(scratch != nullptr || mlp_scratch_bytes(rows, hidden, inter, element_bytes) == 0,
           "FP8 experts: no scratch given");
  ScratchCarver carver(scratch, bytes);
  const auto r = static_cast<size_t>(rows);
  MlpScratch s;
  s.xq = carver.take<uint8_t>(r * hidden);
  s.xs = carver.take<float>(r * fp8_groups(hidden) * sizeof(float));
  s.h = carver.take<void>(r * inter * element_bytes);
  s.hq = carver.take<uint8_t>(r * inter);
  s.hs = carver.take<float>(r * fp8_groups(inter) * sizeof(float));
  return s;
}

// The kernel one GEMM of the MLP runs: a TMA kernel (fp8_tma, fp8_tma64) where its boxes fit the
// GEMM, else fp8_wgmma (the same tile fed by cp.async); every other kernel as asked.
Fp8GemmKernel mlp_gemm_kernel(Fp8GemmKernel kernel, const Fp8GemmArgs& g, bool gated) {
  if (!is_fp8_tma_kernel(kernel)) return kernel;
  return fp8_tma_shape_check(g.n, g.k, g.max_rows, g.num_experts, g.b_scales.block_n,
                             g.b_scales.block_k, gated)
                 .empty()
             ? kernel
             : Fp8GemmKernel::kWgmma;
}

}  // namespace

template <typename T>
void launch_fp8_grouped_gemm(const Fp8GemmArgs& args, Fp8GemmKernel kernel, cudaStream_t stream) {
  const std::string shape = fp8_gemm_check(args.n, args.k);
  MG_CHECK(shape.empty(), "FP8 grouped GEMM: {}", shape);
  const bool gated = args.epilogue == GroupedEpilogue::kActivation && is_gated(args.act.kind);
  const std::string scales = fp8_weight_scales_check(args.b_scales.block_n, args.b_scales.block_k,
                                                     gated ? 2 * args.n : args.n, args.k);
  MG_CHECK(scales.empty(), "FP8 grouped GEMM: {}", scales);
  if (args.num_experts <= 0 || args.max_rows <= 0) return;
  MG_CHECK(args.a != nullptr && args.a_scales != nullptr && args.b != nullptr &&
               args.b_scales.scales != nullptr && args.c != nullptr &&
               args.expert_offsets != nullptr,
           "FP8 grouped GEMM: a, a_scales, b, b_scales, c and expert_offsets must be set");
  if (gated) {
    fp8::launch_gemm<T, true>(args, kernel, stream);
  } else {
    fp8::launch_gemm<T, false>(args, kernel, stream);
  }
}

size_t fp8_expert_mlp_scratch_bytes(int64_t max_rows, int64_t hidden, int64_t inter,
                                    size_t element_bytes) {
  return mlp_scratch_bytes(max_rows, hidden, inter, element_bytes);
}

size_t fp8_expert_mlp_scratch_h_offset(int64_t max_rows, int64_t hidden) {
  const auto r = static_cast<size_t>(max_rows);
  return align_up(r * hidden) + align_up(r * fp8_groups(hidden) * sizeof(float));
}

std::string fp8_expert_mlp_check(int64_t hidden, int64_t inter, bool gated,
                                 const Fp8WeightScales& s13, const Fp8WeightScales& s2) {
  const int64_t n1 = gated ? 2 * inter : inter;
  for (const std::string& why : {fp8_gemm_check(inter, hidden), fp8_gemm_check(hidden, inter),
                                 fp8_weight_scales_check(s13.block_n, s13.block_k, n1, hidden),
                                 fp8_weight_scales_check(s2.block_n, s2.block_k, hidden, inter)}) {
    if (!why.empty()) return why;
  }
  return "";
}

template <typename T>
void launch_fp8_expert_mlp(const Fp8ExpertMlpArgs& args, Fp8GemmKernel kernel,
                           cudaStream_t stream) {
  const std::string why =
      fp8_expert_mlp_check(args.hidden, args.inter, is_gated(args.act.kind), args.s13, args.s2);
  MG_CHECK(why.empty(), "FP8 expert MLP: {}", why);
  if (args.num_experts <= 0 || args.max_rows <= 0) return;
  const MlpScratch s = carve_mlp_scratch(args.scratch, args.scratch_bytes, args.max_rows,
                                         args.hidden, args.inter, sizeof(T));
  const int32_t* num_rows = args.expert_offsets + args.num_experts;

  Fp8QuantArgs qx;
  qx.x = args.x;
  qx.row_to_pair = args.row_to_pair;
  qx.top_k = args.top_k;
  qx.num_rows = num_rows;
  qx.max_rows = args.max_rows;
  qx.k = args.hidden;
  qx.per_token = args.act_per_token;
  qx.static_scale = args.x_static_scale;
  qx.xq = s.xq;
  qx.xs = s.xs;
  launch_fp8_quantize<T>(qx, stream);

  Fp8GemmArgs g1;
  g1.a = s.xq;
  g1.a_scales = s.xs;
  g1.a_per_token = args.act_per_token;
  g1.b = args.w13;
  g1.b_scales = args.s13;
  g1.bias = args.b13;
  g1.c = s.h;
  g1.expert_offsets = args.expert_offsets;
  g1.num_experts = args.num_experts;
  g1.max_rows = args.max_rows;
  g1.n = args.inter;
  g1.k = args.hidden;
  g1.epilogue = GroupedEpilogue::kActivation;
  g1.act = args.act;
  launch_fp8_grouped_gemm<T>(g1, mlp_gemm_kernel(kernel, g1, is_gated(args.act.kind)), stream);

  Fp8QuantArgs qh;
  qh.x = s.h;
  qh.num_rows = num_rows;
  qh.max_rows = args.max_rows;
  qh.k = args.inter;
  qh.per_token = args.act_per_token;
  qh.static_scale = args.h_static_scale;
  qh.xq = s.hq;
  qh.xs = s.hs;
  launch_fp8_quantize<T>(qh, stream);

  Fp8GemmArgs g2;
  g2.a = s.hq;
  g2.a_scales = s.hs;
  g2.a_per_token = args.act_per_token;
  g2.b = args.w2;
  g2.b_scales = args.s2;
  g2.bias = args.b2;
  g2.c = args.out;
  g2.expert_offsets = args.expert_offsets;
  g2.num_experts = args.num_experts;
  g2.max_rows = args.max_rows;
  g2.n = args.hidden;
  g2.k = args.inter;
  g2.epilogue = GroupedEpilogue::kBias;
  launch_fp8_grouped_gemm<T>(g2, mlp_gemm_kernel(kernel, g2, false), stream);
}

template void launch_fp8_grouped_gemm<__nv_bfloat16>(const Fp8GemmArgs&, Fp8GemmKernel,
                                                     cudaStream_t);
template void launch_fp8_grouped_gemm<__half>(const Fp8GemmArgs&, Fp8GemmKernel, cudaStream_t);
template void launch_fp8_expert_mlp<__nv_bfloat16>(const Fp8ExpertMlpArgs&, Fp8GemmKernel,
                                                   cudaStream_t);
template void launch_fp8_expert_mlp<__half>(const Fp8ExpertMlpArgs&, Fp8GemmKernel, cudaStream_t);

}  // namespace mg::cuda

namespace mg::cuda {

std::string fp8_decode_check(int64_t num_tokens, int64_t top_k, int64_t hidden, int64_t inter,
                             bool gated, const Fp8WeightScales& s13, const Fp8WeightScales& s2) {
  if (num_tokens < 0 || num_tokens > kFp8DecodeMaxTokens) {
    return "FP8 decode takes at most " + std::to_string(kFp8DecodeMaxTokens) + " tokens, not " +
           std::to_string(num_tokens);
  }
  if (top_k < 1 || num_tokens * top_k > 256) {
    return "FP8 decode takes at most 256 (token, expert) pairs and top_k >= 1, not " +
           std::to_string(num_tokens) + " tokens x top_k " + std::to_string(top_k);
  }
  return fp8_expert_mlp_check(hidden, inter, gated, s13, s2);
}

}  // namespace mg::cuda
