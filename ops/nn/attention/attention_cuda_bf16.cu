// attention kernels instantiated for __nv_bfloat16.
#include "ops/nn/attention/attention_cuda.cuh"

namespace mg::cuda {
template void launch_kv_cache_write<__nv_bfloat16>(const AttentionDims&, const KvCacheWriteArgs&,
                                                   cudaStream_t);
template void launch_attention<__nv_bfloat16>(const AttentionDims&, const AttentionArgs&,
                                              cudaStream_t);
}  // namespace mg::cuda
