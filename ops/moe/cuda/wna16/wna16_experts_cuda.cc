// Host side of the WNA16 expert kernels (wna16_experts_cuda.h): the GEMM's checks and dispatch
// over (dtype, bits), the expert MLP's two launches, and the large-M path's chunk loop. Plain C++
// over the launchers the .cu files instantiate.
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>

#include "framework/core/error.h"
#include "ops/moe/cuda/wna16/wna16_gemm_launch.h"

namespace mg::cuda {

Wna16Weights wna16_weights_view(const Wna16PackedHost& p, const uint32_t* words,
                                const float* params, const uint8_t* scale_bytes,
                                const float* globals) {
  Wna16Weights w;
  w.words = words;
  w.params = params;
  w.scale_bytes = scale_bytes;
  w.globals = globals;
  w.bits = p.bits;
  w.codes = p.codes;
  w.parts = p.parts;
  w.part_rows = p.part_rows;
  w.k_steps = p.k_steps;
  w.groups = p.groups;
  w.group_size = p.group_size;
  w.zeros = p.zeros;
  w.e8m0_shift = p.e8m0_shift;
  return w;
}

template <typename T>
void launch_wna16_grouped_gemm(const Wna16GemmArgs& args, Wna16GemmKernel kernel,
                               cudaStream_t stream) {
  const std::string shape = wna16_gemm_check(args.n, args.k);
  MG_CHECK(shape.empty(), "WNA16 grouped GEMM: {}", shape);
  const bool gated = args.epilogue == GroupedEpilogue::kActivation && is_gated(args.act.kind);
  const Wna16Weights& b = args.b;
  MG_CHECK(b.parts == (gated ? 2 : 1),
           "WNA16 grouped GEMM: a {} GEMM takes weights packed in {} row part(s), not {}",
           gated ? "gated" : "plain", gated ? 2 : 1, b.parts);
  MG_CHECK(b.part_rows >= args.n && b.part_rows % 8 == 0 &&
               b.k_steps == (args.k + kWna16KStep - 1) / kWna16KStep && b.groups >= 1 &&
               b.group_size > 0,
           "WNA16 grouped GEMM: packed weights (part rows {}, K steps {}) do not fit N {} K {}",
           b.part_rows, b.k_steps, args.n, args.k);
  if (args.num_experts <= 0 || args.max_rows <= 0) return;
  MG_CHECK(args.a != nullptr && b.words != nullptr && args.c != nullptr &&
               args.expert_offsets != nullptr,
           "WNA16 grouped GEMM: a, b, c and expert_offsets must be set");
  if (kernel == Wna16GemmKernel::kWgmma) return wna16::launch_wgmma_gemm<T>(args, gated, stream);
  switch (b.codes) {
    case Wna16Codes::kInteger:
      MG_CHECK(b.params != nullptr, "WNA16 grouped GEMM: integer codes need their F32 pairs");
      if (wna16_gemm_exact(b, kernel)) {
        switch (b.bits) {
          case 4:
            return wna16::launch_gemm<T, 4, Wna16Codes::kInteger, true>(args, kernel, gated,
                                                                        stream);
          case 8:
            return wna16::launch_gemm<T, 8, Wna16Codes::kInteger, true>(args, kernel, gated,
                                                                        stream);
        }
      }
      switch (b.bits) {
        case 4:
          return wna16::launch_gemm<T, 4, Wna16Codes::kInteger>(args, kernel, gated, stream);
        case 8:
          return wna16::launch_gemm<T, 8, Wna16Codes::kInteger>(args, kernel, gated, stream);
        default:
          MG_FAIL("WNA16 grouped GEMM: {} bits (4 or 8 expected)", b.bits);
      }
    case Wna16Codes::kMxfp4:
      MG_CHECK(b.bits == 4 && b.scale_bytes != nullptr,
               "WNA16 grouped GEMM: MXFP4 codes are 4 bits with E8M0 scale bytes, not {} bits{}",
               b.bits, b.scale_bytes == nullptr ? " without scale bytes" : "");
      return wna16::launch_gemm<T, 4, Wna16Codes::kMxfp4>(args, kernel, gated, stream);
    case Wna16Codes::kNvfp4:
      MG_CHECK(b.bits == 4 && b.scale_bytes != nullptr && b.globals != nullptr,
               "WNA16 grouped GEMM: NVFP4 codes are 4 bits with E4M3 scale bytes and globals, not "
               "{} bits{}",
               b.bits, b.scale_bytes == nullptr || b.globals == nullptr ? " without them" : "");
      return wna16::launch_gemm<T, 4, Wna16Codes::kNvfp4>(args, kernel, gated, stream);
  }
  MG_FAIL("WNA16 grouped GEMM: unknown codes {}", static_cast<int>(b.codes));
}

template <typename T>
void launch_wna16_expert_mlp(const Wna16ExpertMlpArgs& args, Wna16GemmKernel kernel,
                             cudaStream_t stream) {
  const std::string why = wna16_expert_mlp_check(args.hidden, args.inter);
  MG_CHECK(why.empty(), "WNA16 expert MLP: {}", why);
  if (args.num_experts <= 0 || args.max_rows <= 0) return;
  MG_CHECK(args.h != nullptr && args.out != nullptr, "WNA16 expert MLP: h and out must be set");
  MG_CHECK(!wna16_gemm_reads_permuted(kernel) || args.row_to_pair == nullptr,
           "WNA16 expert MLP: {} reads permuted rows: gather x first (row_to_pair null)",
           wna16_gemm_kernel_name(kernel));

  Wna16GemmArgs g1;
  g1.a = args.x;
  g1.row_to_pair = args.row_to_pair;
  g1.top_k = args.top_k;
  g1.b = args.w13;
  g1.bias = args.b13;
  g1.c = args.h;
  g1.expert_offsets = args.expert_offsets;
  g1.num_experts = args.num_experts;
  g1.max_rows = args.max_rows;
  g1.n = args.inter;
  g1.k = args.hidden;
  g1.epilogue = GroupedEpilogue::kActivation;
  g1.act = args.act;
  launch_wna16_grouped_gemm<T>(g1, kernel, stream);

  Wna16GemmArgs g2;
  g2.a = args.h;
  g2.b = args.w2;
  g2.bias = args.b2;
  g2.c = args.out;
  g2.expert_offsets = args.expert_offsets;
  g2.num_experts = args.num_experts;
  g2.max_rows = args.max_rows;
  g2.n = args.hidden;
  g2.k = args.inter;
  g2.epilogue = GroupedEpilogue::kBias;
  launch_wna16_grouped_gemm<T>(g2, kernel, stream);
}

namespace {

// The carve of launch_wna16_dequant_expert_mlp's scratch (256-byte aligned parts); with a null
// base it only counts.
struct DequantScratch {
  void* x_perm = nullptr;  // [P, H]
  void* w13 = nullptr;     // [C, N1, H]
  void* w2 = nullptr;      // [C, H, I]
  void* b13 = nullptr;     // [C, N1]
  void* b2 = nullptr;      // [C, H]
  size_t bytes = 0;

  DequantScratch(void* base, int64_t max_rows, int64_t experts_per_chunk, int64_t hidden,
                 int64_t inter, bool gated, size_t es) {
    const int64_t n1 = (gated ? 2 : 1) * inter;
    const auto take = [&](int64_t elements) -> void* {
      const size_t offset = bytes;
      bytes += (static_cast<size_t>(elements) * es + 255) / 256 * 256;
      return base == nullptr ? nullptr : static_cast<std::byte*>(base) + offset;
    };
    x_perm = take(max_rows * hidden);
    w13 = take(experts_per_chunk * n1 * hidden);
    w2 = take(experts_per_chunk * hidden * inter);
    b13 = take(experts_per_chunk * n1);
    b2 = take(experts_per_chunk * hidden);
  }
};

}  // namespace

size_t wna16_dequant_mlp_scratch_bytes(int64_t max_rows, int64_t num_experts, int64_t hidden,
                                       int64_t inter, bool gated, size_t element_bytes,
                                       int64_t budget_bytes) {
  const Wna16DequantChunks chunks =
      wna16_dequant_chunks(num_experts, hidden, inter, gated, element_bytes, budget_bytes);
  return DequantScratch(nullptr, max_rows, chunks.experts_per_chunk, hidden, inter, gated,
                        element_bytes)
      .bytes;
}

template <typename T>
void launch_wna16_dequant_expert_mlp(const Wna16DequantMlpArgs& args, cudaStream_t stream) {
  const std::string why = wna16_expert_mlp_check(args.hidden, args.inter);
  MG_CHECK(why.empty(), "WNA16 dequantized expert MLP: {}", why);
  std::string gemm = grouped_gemm_check(args.inter, args.hidden);
  if (gemm.empty()) gemm = grouped_gemm_check(args.hidden, args.inter);
  MG_CHECK(gemm.empty(), "WNA16 dequantized expert MLP: {}", gemm);
  const bool gated = is_gated(args.act.kind);
  MG_CHECK(args.w13.parts == (gated ? 2 : 1) && args.w2.parts == 1,
           "WNA16 dequantized expert MLP: w13 in {} part(s) and w2 in 1 expected, not {} and {}",
           gated ? 2 : 1, args.w13.parts, args.w2.parts);
  const int64_t P = args.tokens * args.top_k;
  if (args.num_experts <= 0 || P <= 0) return;
  MG_CHECK(args.scratch != nullptr && args.h != nullptr && args.out != nullptr &&
               args.align.expert_offsets != nullptr && args.align.pair_to_row != nullptr,
           "WNA16 dequantized expert MLP: scratch, h, out and the alignment must be set");
  const Wna16DequantChunks chunks = wna16_dequant_chunks(args.num_experts, args.hidden, args.inter,
                                                         gated, sizeof(T), args.budget_bytes);
  const DequantScratch sc(args.scratch, P, chunks.experts_per_chunk, args.hidden, args.inter, gated,
                          sizeof(T));

  launch_moe_gather<T>(args.x, args.tokens, args.top_k, args.hidden, args.align, sc.x_perm, stream);
  for (int64_t chunk = 0; chunk < chunks.chunks; ++chunk) {
    const int64_t e0 = chunk * chunks.experts_per_chunk;
    const int64_t count = std::min(chunks.experts_per_chunk, args.num_experts - e0);
    if (count <= 0) break;
    const int32_t* offsets = args.align.expert_offsets + e0;  // the chunk's [count + 1]

    Wna16DequantArgs d13;
    d13.w = args.w13;
    d13.bias = args.b13;
    d13.expert_begin = e0;
    d13.expert_count = count;
    d13.expert_offsets = offsets;
    d13.n = args.inter;
    d13.k = args.hidden;
    d13.out = sc.w13;
    d13.bias_out = sc.b13;
    launch_wna16_dequantize<T>(d13, stream);
    Wna16DequantArgs d2;
    d2.w = args.w2;
    d2.bias = args.b2;
    d2.expert_begin = e0;
    d2.expert_count = count;
    d2.expert_offsets = offsets;
    d2.n = args.hidden;
    d2.k = args.inter;
    d2.out = sc.w2;
    d2.bias_out = sc.b2;
    launch_wna16_dequantize<T>(d2, stream);

    // The rows of the chunk's experts are [offsets[0], offsets[count]) of the permuted rows (the
    // alignment sorts them by expert); the grouped GEMMs index weights and biases by the expert
    // within the chunk and write only those rows.
    GroupedGemmArgs g1;
    g1.a = sc.x_perm;
    g1.b = sc.w13;
    g1.bias = args.b13 != nullptr ? sc.b13 : nullptr;
    g1.c = args.h;
    g1.expert_offsets = offsets;
    g1.num_experts = count;
    g1.max_rows = P;
    g1.n = args.inter;
    g1.k = args.hidden;
    g1.epilogue = GroupedEpilogue::kActivation;
    g1.act = args.act;
    launch_grouped_gemm<T>(g1, args.gemm1, stream);
    GroupedGemmArgs g2 = g1;
    g2.a = args.h;
    g2.b = sc.w2;
    g2.bias = args.b2 != nullptr ? sc.b2 : nullptr;
    g2.c = args.out;
    g2.n = args.hidden;
    g2.k = args.inter;
    g2.epilogue = GroupedEpilogue::kBias;
    launch_grouped_gemm<T>(g2, args.gemm2, stream);
  }
}

template void launch_wna16_grouped_gemm<__nv_bfloat16>(const Wna16GemmArgs&, Wna16GemmKernel,
                                                       cudaStream_t);
template void launch_wna16_grouped_gemm<__half>(const Wna16GemmArgs&, Wna16GemmKernel,
                                                cudaStream_t);
template void launch_wna16_expert_mlp<__nv_bfloat16>(const Wna16ExpertMlpArgs&, Wna16GemmKernel,
                                                     cudaStream_t);
template void launch_wna16_expert_mlp<__half>(const Wna16ExpertMlpArgs&, Wna16GemmKernel,
                                              cudaStream_t);
template void launch_wna16_dequant_expert_mlp<__nv_bfloat16>(const Wna16DequantMlpArgs&,
                                                             cudaStream_t);
template void launch_wna16_dequant_expert_mlp<__half>(const Wna16DequantMlpArgs&, cudaStream_t);

}  // namespace mg::cuda
