// embedding kernel instantiated for float.
#include "ops/nn/embedding/embedding_cuda.cuh"

namespace mg::cuda {
template void launch_embedding<float>(const EmbeddingArgs&, cudaStream_t);
}  // namespace mg::cuda
