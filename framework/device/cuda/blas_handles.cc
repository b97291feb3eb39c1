// One cuBLAS and one cuBLASLt handle per device, created on first use and kept for the process.
#include <mutex>
#include <unordered_map>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"

namespace mg::cuda {

namespace {
std::mutex g_mutex;
}

cublasHandle_t cublas_handle(int device) {
  static auto* handles = new std::unordered_map<int, cublasHandle_t>();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& h = (*handles)[device];
  if (h == nullptr) {
    MG_CUDA_CHECK(cudaSetDevice(device));
    MG_CUBLAS_CHECK(cublasCreate(&h));
  }
  return h;
}

cublasLtHandle_t cublaslt_handle(int device) {
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& h = (*handles)[device];
  if (h == nullptr) {
    MG_CUDA_CHECK(cudaSetDevice(device));
    MG_CUBLAS_CHECK(cublasLtCreate(&h));
  }
  return h;
}

}  // namespace mg::cuda
