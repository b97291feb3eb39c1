// attention kernels instantiated for __half.
#include "ops/nn/attention/attention_cuda.cuh"

namespace mg::cuda {
template void launch_kv_cache_write<__half>(const AttentionDims&, const KvCacheWriteArgs&,
                                            cudaStream_t);
template void launch_attention<__half>(const AttentionDims&, const AttentionArgs&, cudaStream_t);
}  // namespace mg::cuda
