// Backend "cpu_eigen": modular CPU experts, standard format. The default on the CPU.
//
//   x [M, H], ids/weights [M, k]
//   1 build_expert_offsets   expert_offsets [E_local + 1], permuted_to_expanded [P],
//                            expanded_to_permuted [M k] (-1: another rank's expert); stable, so
//                            each expert's rows keep token order
//   2 permute_rows           permuted [P, H] = x[expanded / k]
//   3 expert blocks          per (expert, block of 32 rows), in parallel on the thread pool:
//                            GEMM1 -> activation -> GEMM2 (cpu_expert_mlp.h), y over permuted
//   4 unpermute_and_reduce   out[t] = sum_j w[t, j] y[expanded_to_permuted[t k + j]], j in order
// P = rows routed to this rank's experts (<= M k). Results do not depend on the thread count.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cpu_eigen_backend();

}  // namespace mg
