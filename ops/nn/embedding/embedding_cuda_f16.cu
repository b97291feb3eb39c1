// embedding kernel instantiated for __half.
#include "ops/nn/embedding/embedding_cuda.cuh"

namespace mg::cuda {
template void launch_embedding<__half>(const EmbeddingArgs&, cudaStream_t);
}  // namespace mg::cuda
