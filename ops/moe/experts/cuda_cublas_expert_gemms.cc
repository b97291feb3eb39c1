#include "ops/moe/experts/cuda_cublas_expert_gemms.h"

#include <cuda_runtime_api.h>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/moe_elementwise_cuda.h"

namespace mg {

CublasExpertGemms::Scratch::Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M)
    : h1(ws.take<std::byte>(M * shape.top_k * shape.w13_rows() * dtype_size(shape.dtype))),
      blas(ws.take<std::byte>(cuda::GemmXwt::kWorkspaceBytes)) {}

CublasExpertGemms::CublasExpertGemms(const ExpertsShape& shape, const CudaExpertWeights& weights,
                                     Device device)
    : shape_(shape), weights_(weights) {
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t N1 = shape.w13_rows(), I = shape.intermediate_size;
  const int64_t es = dtype_size(shape.dtype);
  for (int64_t e = 0; e < E; ++e) {
    const void* b13 = weights_.w13_bias.defined()
                          ? static_cast<const std::byte*>(weights_.w13_bias.raw()) + e * N1 * es
                          : nullptr;
    gemm1_.push_back(std::make_unique<cuda::GemmXwt>(shape.dtype, H, N1, b13, device.index));
    gemm2_.push_back(std::make_unique<cuda::GemmXwt>(shape.dtype, I, H, nullptr, device.index));
  }
  MG_CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&host_offsets_), (E + 1) * sizeof(int32_t)));
}

CublasExpertGemms::~CublasExpertGemms() {
  cudaFreeHost(host_offsets_);
}

void CublasExpertGemms::run(const void* x, int64_t M, const int32_t* ids, const float* weights,
                            const GroupedScratch& g, const Scratch& sc, void* out,
                            Stream* stream) const {
  if (M == 0) return;
  const int64_t k = shape_.top_k, H = shape_.hidden_size, E = shape_.num_local_experts();
  const int64_t I = shape_.intermediate_size, N1 = shape_.w13_rows();
  const int64_t es = dtype_size(shape_.dtype);
  const cudaStream_t s = cuda::native(stream);
  cuda::launch_moe_align(ids, M * k, weights_.map(), shape_.num_experts, E, g.align, s);
  cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
    cuda::launch_moe_gather<decltype(tag)>(x, M, k, H, g.align, g.x_perm, s);
  });
  // The per-expert GEMM sizes are host arguments: read the offsets back (the one sync).
  MG_CUDA_CHECK(cudaMemcpyAsync(host_offsets_, g.align.expert_offsets, (E + 1) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, s));
  MG_CUDA_CHECK(cudaStreamSynchronize(s));
  auto row = [&](void* base, int64_t r, int64_t cols) {
    return static_cast<std::byte*>(base) + r * cols * es;
  };
  const size_t blas_bytes = cuda::GemmXwt::kWorkspaceBytes;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = host_offsets_[e], rows = host_offsets_[e + 1] - begin;
    if (rows == 0) continue;
    gemm1_[e]->run(row(g.x_perm, begin, H), rows,
                   static_cast<const std::byte*>(weights_.w13.raw()) + e * N1 * H * es,
                   row(sc.h1, begin, N1), 1.0f, sc.blas, blas_bytes, s);
  }
  const int64_t P = host_offsets_[E];
  cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
    cuda::launch_moe_activation<decltype(tag)>(sc.h1, P, I, cuda_act_params(shape_.activation),
                                               g.h_perm, s);
  });
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = host_offsets_[e], rows = host_offsets_[e + 1] - begin;
    if (rows == 0) continue;
    gemm2_[e]->run(row(g.h_perm, begin, I), rows,
                   static_cast<const std::byte*>(weights_.w2.raw()) + e * H * I * es,
                   row(g.y_perm, begin, H), 1.0f, sc.blas, blas_bytes, s);
  }
  cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
    cuda::launch_moe_combine<decltype(tag)>(g.y_perm, g.align, ids, weights, weights_.map(),
                                            weights_.b2(), M, k, H, out, s);
  });
}

}  // namespace mg
