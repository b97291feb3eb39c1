// Grouped expert GEMM of the CUDA MoE experts backend: for every expert e, the rows
// [offsets[e], offsets[e+1]) of the permuted activations times that expert's weight, with a bias
// or bias + activation epilogue (GEMM1 → act and GEMM2 of the expert MLP in one launch each).
//
//   c[r, :] = epilogue(a[r, :] · b[e]ᵀ)   for r in [offsets[e], offsets[e+1])
//
// The per-expert row counts exist only on the device, so the launch covers an upper bound of
// tiles and each CTA finds its (expert, row block) from expert_offsets; the launcher neither syncs
// nor allocates and can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "ops/moe/cuda/grouped_gemm_kernels.h"
#include "ops/moe/cuda/moe_cuda_types.h"

namespace mg::cuda {

enum class GroupedEpilogue : int32_t {
  kBias,        // c = acc + bias                          (b has N rows per expert)
  kActivation,  // c = moe_activation(act, acc_gate + bias_gate, acc_up + bias_up) for gated kinds
                //   (b has 2N rows per expert: gate rows [0, N), up rows [N, 2N); c has N cols),
                //   c = moe_activation(act, acc + bias, 0) for plain kinds (b has N rows)
};

// All pointers are device pointers, 16-byte aligned (the kernels load 16-byte vectors).
struct GroupedGemmArgs {
  const void* a = nullptr;     // [max_rows, K] T row-major (rows permuted by expert); the TMA
                               // kernel loads whole 64-row boxes, so rows up to max_rows are read
                               // (never stored) and must be allocated
  const void* b = nullptr;     // [E, N_b, K] T row-major: each expert's weight as [out, in]
  const void* bias = nullptr;  // [E, N_b] T or null
  void* c = nullptr;           // [rows, N] T
  const int32_t* expert_offsets = nullptr;  // [E + 1] DEVICE: rows of expert e are
                                            // [offsets[e], offsets[e+1]); offsets[E] <= max_rows
  int64_t num_experts = 0;                  // E
  int64_t max_rows = 0;                     // host-known upper bound of offsets[E] (grid sizing)
  int64_t n = 0;                            // N (output columns)
  int64_t k = 0;                            // K; a multiple of 8
  GroupedEpilogue epilogue = GroupedEpilogue::kBias;
  MoEActParams act;  // kActivation only
};

// Runs `kernel` (grouped_gemm_kernels.h; ops/moe/heuristics/unquantized_kernel_choice.h chooses
// it): T = __nv_bfloat16 or __half: tensor cores with fp32 accumulation, epilogue in fp32, one
// rounding; T = float: kFfma only, a plain fp32 CUDA-core kernel (correctness mode; no TF32).
// A kernel that cannot run the GEMM (no tile of its kind, no sm_90a kernels, TMA boxes larger than
// the problem) is an mg::Error saying why. Rows of c outside [offsets[0], offsets[E]) are not
// written.
template <typename T>
void launch_grouped_gemm(const GroupedGemmArgs& args, GroupedGemmKernel kernel,
                         cudaStream_t stream);

// Whether the loaded binary holds the sm_90a kernels (wgmma, tma) for the current GPU: false on
// GPUs other than sm_90 and in builds without CUDA architecture 90a. Asked once per process.
bool grouped_gemm_sm90a_kernels();

// Host: "" when the shape is supported, else a short reason (e.g. "K must be a multiple of 8").
std::string grouped_gemm_check(int64_t n, int64_t k);

}  // namespace mg::cuda
