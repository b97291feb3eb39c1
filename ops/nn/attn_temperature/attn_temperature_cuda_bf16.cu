// attn_temperature kernel instantiated for __nv_bfloat16.
#include "ops/nn/attn_temperature/attn_temperature_cuda.cuh"

namespace mg::cuda {
template void launch_attn_temperature<__nv_bfloat16>(const AttnTemperatureArgs&, cudaStream_t);
}  // namespace mg::cuda
