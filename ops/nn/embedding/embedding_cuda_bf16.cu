// embedding kernel instantiated for __nv_bfloat16.
#include "ops/nn/embedding/embedding_cuda.cuh"

namespace mg::cuda {
template void launch_embedding<__nv_bfloat16>(const EmbeddingArgs&, cudaStream_t);
}  // namespace mg::cuda
