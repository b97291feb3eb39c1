// The expert MLPs as per-expert cuBLASLt GEMMs, shared by the cuda_cublas backend and the
// cuda_moe backend's large-batch path:
//   align -> gather -> [read the expert offsets back: one host sync] -> per expert
//   GEMM1 (bias in the epilogue) -> activation over all rows -> per expert GEMM2 -> combine.
// cuBLASLt's Hopper kernels win once every expert has many rows (docs/performance.md), and the
// one sync costs little next to milliseconds of GEMMs; it makes the path uncapturable, so it never
// serves a decode step. Built only with MG_WITH_CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

class CublasExpertGemms {
 public:
  // Keeps a reference to `weights` (owned by the experts object, which outlives this).
  CublasExpertGemms(const ExpertsShape& shape, const CudaExpertWeights& weights, Device device);
  ~CublasExpertGemms();
  CublasExpertGemms(const CublasExpertGemms&) = delete;
  CublasExpertGemms& operator=(const CublasExpertGemms&) = delete;

  // Scratch beyond a GroupedScratch for `num_tokens` tokens.
  struct Scratch {
    void* h1;    // [P, N1] before the activation
    void* blas;  // cuBLAS workspace
    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t num_tokens);
  };

  // out [M, H] = sum_j w[t, j] Expert_{ids[t, j]}(x[t]); blocks the host until the alignment is
  // done.
  void run(const void* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights,
           const GroupedScratch& grouped, const Scratch& scratch, void* out, Stream* stream) const;

 private:
  const ExpertsShape& shape_;
  const CudaExpertWeights& weights_;
  // One GEMM object per expert and matrix: the bias pointer is part of cuBLASLt's matmul
  // descriptor, so it is fixed per object.
  std::vector<std::unique_ptr<cuda::GemmXwt>> gemm1_;
  std::vector<std::unique_ptr<cuda::GemmXwt>> gemm2_;
  int32_t* host_offsets_ = nullptr;  // pinned [E_local + 1]
};

}  // namespace mg
