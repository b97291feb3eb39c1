// Backend "cpu_batched": modular CPU experts, batched format (what the all_to_all
// prepare/finalize delivers).
//
//   x   [E_local, T, H] slabs, expert_num_tokens [E_local] (rows [n_e, T) of slab e unused)
//   out [E_local, T, H]: out[e, r] = Expert_e(x[e, r]) for r < n_e, unweighted; finalize
//       weights and sums the k rows of each token after combining them back
// Work is split in blocks of 32 rows of one expert, in parallel on the thread pool.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cpu_batched_backend();

}  // namespace mg
