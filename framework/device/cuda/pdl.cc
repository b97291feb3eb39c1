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

std::atomic<bool>& early_requested() {
  static std::atomic<bool> value{pdl_early_requested_by(std::getenv("MG_PDL_EARLY"))};
  return value;
}

// An on/off switch from the environment: unset (null) or "1" on, "0" off.
bool switch_requested_by(const char* name, const char* value) {
  if (value == nullptr) return true;
  const std::string_view v(value);
  MG_CHECK(v == "0" || v == "1", "{}: expected 0 or 1, got '{}'", name, v);
  return v == "1";
}

}  // namespace

bool pdl_early_dependents() {
  return early_requested().load(std::memory_order_relaxed);
}

void set_pdl_early_dependents(bool early) {
  early_requested().store(early, std::memory_order_relaxed);
}

bool pdl_requested_by(const char* mg_pdl_value) {
  return switch_requested_by("MG_PDL", mg_pdl_value);
}

bool pdl_early_requested_by(const char* mg_pdl_early_value) {
  return switch_requested_by("MG_PDL_EARLY", mg_pdl_early_value);
}

bool pdl_enabled() {
  return requested().load(std::memory_order_relaxed) && device_supports_pdl();
}

void set_pdl_enabled(bool enabled) {
  requested().store(enabled, std::memory_order_relaxed);
}

}  // namespace mg::cuda
