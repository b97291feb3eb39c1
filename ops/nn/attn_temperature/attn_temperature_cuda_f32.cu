// attn_temperature kernel instantiated for float.
#include "ops/nn/attn_temperature/attn_temperature_cuda.cuh"

namespace mg::cuda {
template void launch_attn_temperature<float>(const AttnTemperatureArgs&, cudaStream_t);
}  // namespace mg::cuda
