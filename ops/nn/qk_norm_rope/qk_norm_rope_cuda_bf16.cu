// qk_norm_rope kernel instantiated for __nv_bfloat16.
#include "ops/nn/qk_norm_rope/qk_norm_rope_cuda.cuh"

namespace mg::cuda {
template void launch_qk_norm_rope<__nv_bfloat16>(const QkNormRopeArgs&, cudaStream_t);
}  // namespace mg::cuda
