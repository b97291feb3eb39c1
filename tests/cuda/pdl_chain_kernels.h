// Producer -> consumer kernel chains that check the programmatic-dependent-launch contract of
// framework/device/cuda/pdl.cuh on the GPU (pdl_chain_kernels.cu; used by pdl_cuda_test.cc).
//
// Round r of a chain: a producer kernel lets its dependents launch at once, spins for `spin_us`
// and only then writes r into every element of a buffer; a consumer copies the buffer into row
// r of the output. A consumer that read before its pdl_wait would see round r - 1's values (or
// the initial -1). Every kernel goes through launch_pdl, so MG_PDL / set_pdl_enabled applies.
#pragma once

#include <cstdint>

namespace mg::testing {

enum class PdlChain {
  kDirect,               // producer -> consumer
  kThroughMemset,        // producer -> cudaMemsetAsync of another buffer -> consumer
  kThroughMiddleKernel,  // producer -> a kernel that waits and touches nothing -> consumer
  kAcrossStreams,        // producer on stream A -> event -> consumer on stream B -> event -> A
  kConsumerReadsEarly,   // producer -> a consumer that reads BEFORE pdl_wait (breaks the rule)
};

struct PdlChainResult {
  int64_t checked = 0;  // output elements compared (rounds x elements x graph launches)
  int64_t wrong = 0;    // of which held something other than their round
};

// `rounds` rounds over a buffer of `elements` ints, queued directly on streams, or captured into
// one CUDA graph that is launched `graph_launches` times (outputs checked after every launch).
PdlChainResult run_pdl_chain(PdlChain chain, int rounds, int elements, int spin_us, bool cuda_graph,
                             int graph_launches);

}  // namespace mg::testing
