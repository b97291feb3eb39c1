#include "framework/device/cuda/cuda_check.h"

namespace mg::detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw InternalError(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(err),
                                  cudaGetErrorString(err), call, file, line));
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw InternalError(fmt::format("cuBLAS error {} ({}) in {} at {}:{}", cublasGetStatusName(st),
                                  cublasGetStatusString(st), call, file, line));
}

}  // namespace mg::detail
