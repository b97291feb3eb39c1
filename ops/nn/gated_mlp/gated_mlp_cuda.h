// CUDA launcher of gated_mlp's activation step: h = act(g) * u elementwise, in place in g, between
// the gate/up GEMMs and the down GEMM (gated_mlp_cuda_kernel.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

enum class GatedActivation { kSilu, kGeluErf, kGeluTanh };

struct GatedActArgs {
  void* g = nullptr;        // [n]: gate · x in, act(g) * u out
  const void* u = nullptr;  // [n]: up · x
  int64_t n = 0;
};

// T: float, __half or __nv_bfloat16 (instantiated in gated_mlp_cuda_<dtype>.cu).
template <typename T>
void launch_gated_act(GatedActivation activation, const GatedActArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
