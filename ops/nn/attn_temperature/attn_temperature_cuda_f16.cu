// attn_temperature kernel instantiated for __half.
#include "ops/nn/attn_temperature/attn_temperature_cuda.cuh"

namespace mg::cuda {
template void launch_attn_temperature<__half>(const AttnTemperatureArgs&, cudaStream_t);
}  // namespace mg::cuda
