// The grouped expert GEMM instantiated for float, and its shape check.
#include "ops/moe/cuda/grouped_gemm_cuda.cuh"

namespace mg::cuda {
template void launch_grouped_gemm<float>(const GroupedGemmArgs&, GroupedGemmKernel, cudaStream_t);

// Shared by every dtype; lives here so that it is compiled once.
std::string grouped_gemm_check(int64_t n, int64_t k) {
  if (n <= 0) return "N must be positive";
  if (k <= 0) return "K must be positive";
  if (k % 8 != 0) return "K must be a multiple of 8";
  // The kernels index columns and K with 32-bit ints.
  if (n > INT32_MAX / 2 || k > INT32_MAX) return "N and K must fit 32-bit indices";
  return "";
}

}  // namespace mg::cuda
