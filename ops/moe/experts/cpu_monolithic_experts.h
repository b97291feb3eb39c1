// Backend "cpu_monolithic": routing and experts in one call, token by token (the shape of a GPU
// decode fast path). Standard format; takes router logits, not top-k ids.
//
//   logits [M, E] -> route_rows -> ids, weights [M, k]
//   per token t, in parallel: out[t] = sum_j w[t, j] Expert_{ids[t, j]}(x[t]) (GEMVs; Llama-4:
//   Expert(w x)); experts of other ranks skipped
// Fast for few tokens (each token reads only its k experts); the modular cpu_eigen batches the
// rows of an expert into GEMMs and wins for many tokens, so it comes first in the CPU list.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cpu_monolithic_backend();

}  // namespace mg
