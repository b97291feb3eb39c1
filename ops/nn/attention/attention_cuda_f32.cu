// attention kernels instantiated for float.
#include "ops/nn/attention/attention_cuda.cuh"

namespace mg::cuda {
template void launch_kv_cache_write<float>(const AttentionDims&, const KvCacheWriteArgs&,
                                           cudaStream_t);
template void launch_attention<float>(const AttentionDims&, const AttentionArgs&, cudaStream_t);
}  // namespace mg::cuda
