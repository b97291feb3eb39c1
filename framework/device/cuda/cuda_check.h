// Checked CUDA and cuBLAS calls: a failure throws mg::InternalError naming the call and the
// runtime's message. Kernel launches are followed by MG_CUDA_CHECK_LAUNCH().
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "framework/core/error.h"

namespace mg::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                     int line);
}  // namespace mg::detail

#define MG_CUDA_CHECK(call)                                               \
  do {                                                                    \
    cudaError_t mg_err_ = (call);                                         \
    if (mg_err_ != cudaSuccess) [[unlikely]]                              \
      ::mg::detail::throw_cuda_error(mg_err_, #call, __FILE__, __LINE__); \
  } while (false)

#define MG_CUDA_CHECK_LAUNCH() MG_CUDA_CHECK(cudaGetLastError())

#define MG_CUBLAS_CHECK(call)                                              \
  do {                                                                     \
    cublasStatus_t mg_st_ = (call);                                        \
    if (mg_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                      \
      ::mg::detail::throw_cublas_error(mg_st_, #call, __FILE__, __LINE__); \
  } while (false)
