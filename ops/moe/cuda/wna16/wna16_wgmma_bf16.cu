// The WNA16 wgmma grouped GEMM (wna16_wgmma.cuh) instantiated for __nv_bfloat16.
#include "ops/moe/cuda/wna16/wna16_wgmma.cuh"

#include "ops/moe/cuda/wna16/wna16_gemm_launch.h"

namespace mg::cuda {
namespace wna16 {
template void launch_wgmma_gemm<__nv_bfloat16>(const Wna16GemmArgs&, bool, cudaStream_t);
}  // namespace wna16

template <>
bool wna16_wgmma_available<__nv_bfloat16>() {
  return wna16::wgmma_kernel_available<__nv_bfloat16>();
}
}  // namespace mg::cuda
