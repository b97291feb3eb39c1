#include "framework/device/cuda/pdl.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"

namespace mg::cuda {
namespace {

// The devices of a process are one model (as multiprocessor_count assumes): the current device's
// compute capability, read once.
bool device_supports_pdl() {
  static const bool supported = [] {
    int device = 0, major = 0;
    MG_CUDA_CHECK(cudaGetDevice(&device));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  return supported;
}

std::atomic<bool>& requested() {
  static std::atomic<bool> value{pdl_requested_by(std::getenv("MG_PDL"))};
  return value;
}

}  // namespace

bool pdl_requested_by(const char* mg_pdl_value) {
  if (mg_pdl_value == nullptr) return true;
  const std::string_view value(mg_pdl_value);
  MG_CHECK(value == "0" || value == "1", "MG_PDL: expected 0 or 1, got '{}'", value);
  return value == "1";
}

bool pdl_enabled() {
  return requested().load(std::memory_order_relaxed) && device_supports_pdl();
}

void set_pdl_enabled(bool enabled) {
  requested().store(enabled, std::memory_order_relaxed);
}

}  // namespace mg::cuda
