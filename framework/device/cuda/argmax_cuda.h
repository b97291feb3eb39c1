// Greedy picks on the GPU: per row of F32 logits, the argmax and the first non-finite element, so
// that a decode step of greedy sequences copies back two ints per row instead of the whole row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

// For each of `rows` rows of `vocab` F32 values at `logits` (row r at logits + r * vocab):
// out[2r] = the index of the largest finite value, the lowest index among equal ones (as
// mg::argmax on the host: -0.0 equals +0.0), and out[2r + 1] = the index of the first NaN or
// infinity, -1 when there is none (mg::find_non_finite). A row with no finite value has
// out[2r] = INT32_MAX. Queued on `stream`.
void argmax_rows_cuda(const float* logits, int64_t rows, int64_t vocab, int32_t* out,
                      cudaStream_t stream);

}  // namespace mg::cuda
