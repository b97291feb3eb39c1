// Backend "cpu_eigen": modular CPU experts, standard format. The default on the CPU.
//
//   x [M, H], ids/weights [M, k]
//   1 build_expert_offsets   expert_offsets [E_local + 1], permuted_to_expanded [P],
//                            expanded_to_permuted [M k] (-1: another rank's expert); stable, so
//                            each expert's rows keep token order
//   2 permute_rows           permuted [P, H] = x[expanded / k]
//   3 expert blocks          per (expert, block of 32 rows), in parallel on the thread pool:
//                            the expert MLP (CpuExpertMlp: GEMM1 -> activation -> GEMM2), y over
//                            permuted
//   4 unpermute_and_reduce   out[t] = sum_j w[t, j] y[expanded_to_permuted[t k + j]], j in order
// P = rows routed to this rank's experts (<= M k). Results do not depend on the thread count.
#pragma once

#include <memory>

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cpu_eigen_backend();

// Stage 3's expert MLP over one block of rows, by weight format (F32 here, FP8 in
// cpu_fp8_experts.cc). Called concurrently from the pool's threads.
class CpuExpertMlp {
 public:
  virtual ~CpuExpertMlp() = default;
  // rows [n, H] in, y [n, H] out in place; h1 [n, N1] and act [n, I] are scratch.
  virtual void run(int64_t local_expert, float* rows, int64_t n, float* h1, float* act) const = 0;
};

// Stages 1-4 around `mlp`, for `backend` (modular, standard format).
std::unique_ptr<Experts> make_cpu_permuted_experts(const ExpertsBackend& backend,
                                                   ExpertsShape shape,
                                                   std::unique_ptr<CpuExpertMlp> mlp);

}  // namespace mg
