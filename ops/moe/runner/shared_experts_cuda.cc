#include "ops/moe/runner/shared_experts_cuda.h"

#include <cuda_runtime_api.h>

#include "framework/device/allocator.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/moe_elementwise_cuda.h"
#include "ops/moe/experts/cuda_expert_common.h"

namespace mg {

namespace {

// [gate; up] rows [first, first + rows) of each as one device tensor, so one GEMM gives each
// row as [gate | up]. The whole `up` is adopted as it is when nothing is to be cut or joined.
Tensor concat_rows(const Tensor& gate, const Tensor& up, bool gated, int64_t first, int64_t rows) {
  if (!gated && first == 0 && rows == up.dim(0)) return up;
  MG_ASSERT(!gated || (gate.shape() == up.shape() && gate.dtype() == up.dtype()),
            "shared experts: gate {} and up {} differ", gate.str(), up.str());
  const int64_t H = up.dim(1);
  const size_t row_bytes = static_cast<size_t>(H) * dtype_size(up.dtype());
  const size_t part = static_cast<size_t>(rows) * row_bytes;
  Tensor w13 = empty_tensor(up.device(), up.dtype(), {(gated ? 2 : 1) * rows, H});
  char* dst = static_cast<char*>(w13.raw());
  if (gated) {
    MG_CUDA_CHECK(cudaMemcpy(dst, static_cast<const char*>(gate.raw()) + first * row_bytes, part,
                             cudaMemcpyDeviceToDevice));
    dst += part;
  }
  MG_CUDA_CHECK(cudaMemcpy(dst, static_cast<const char*>(up.raw()) + first * row_bytes, part,
                           cudaMemcpyDeviceToDevice));
  // A device-to-device cudaMemcpy returns before it is done; the forwards' streams do not wait
  // for the legacy stream it ran on.
  MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return w13;
}

// Columns [first, first + cols) of `down` [H, Is] (the whole tensor when that is all of it).
Tensor slice_columns(const Tensor& down, int64_t first, int64_t cols) {
  if (first == 0 && cols == down.dim(1)) return down;
  const size_t es = dtype_size(down.dtype());
  Tensor out = empty_tensor(down.device(), down.dtype(), {down.dim(0), cols});
  MG_CUDA_CHECK(cudaMemcpy2D(out.raw(), cols * es,
                             static_cast<const char*>(down.raw()) + first * es, down.dim(1) * es,
                             cols * es, down.dim(0), cudaMemcpyDeviceToDevice));
  MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // as in concat_rows
  return out;
}

SharedExpertsConfig split_config(SharedExpertsConfig config, int tp_size) {
  MG_CHECK(tp_size >= 1 && config.intermediate_size % tp_size == 0,
           "shared experts: intermediate size {} cannot be split evenly over {} tensor-parallel "
           "ranks",
           config.intermediate_size, tp_size);
  config.intermediate_size /= tp_size;
  return config;
}

}  // namespace

struct CudaSharedExperts::Scratch {
  std::byte* h;     // [M, N1s]
  std::byte* a;     // [M, Is]
  std::byte* gate;  // [M]
  std::byte* blas;  // cuBLAS workspace

  Scratch(Workspace& ws, const CudaSharedExperts& s, int64_t M) {
    const int64_t es = dtype_size(s.dtype_), Is = s.config_.intermediate_size;
    h = ws.take<std::byte>(M * s.w13_.dim(0) * es);
    a = ws.take<std::byte>(M * Is * es);
    gate = ws.take<std::byte>(s.config_.has_gate ? M * es : 0);
    blas = ws.take<std::byte>(cuda::GemmXwt::kWorkspaceBytes);
  }
};

CudaSharedExperts::CudaSharedExperts(const SharedExpertsConfig& config, int64_t hidden_size,
                                     DType dtype, int tp_size, int tp_rank, const Tensor& gate,
                                     const Tensor& up, const Tensor& down,
                                     const Tensor& expert_gate)
    : config_(split_config(config, tp_size)),
      hidden_size_(hidden_size),
      dtype_(dtype),
      w13_(concat_rows(gate, up, is_gated(config.activation.kind),
                       tp_rank * config_.intermediate_size, config_.intermediate_size)),
      w2_(slice_columns(down, tp_rank * config_.intermediate_size, config_.intermediate_size)),
      expert_gate_(config.has_gate ? expert_gate : Tensor()),
      gemm13_(dtype, hidden_size, w13_.dim(0), nullptr, up.device().index),
      gemm2_(dtype, config_.intermediate_size, hidden_size, nullptr, up.device().index) {
  MG_ASSERT(up.device().is_cuda() && up.dtype() == dtype,
            "shared experts on CUDA: weights must be {} on the GPU, got {}", dtype_name(dtype),
            up.str());
  if (config.has_gate) gemm_gate_.emplace(dtype, hidden_size, 1, nullptr, up.device().index);
}

size_t CudaSharedExperts::workspace_bytes(int64_t max_tokens) const {
  Workspace ws = Workspace::sizing();
  Scratch(ws, *this, max_tokens);
  return ws.bytes();
}

void CudaSharedExperts::forward(const void* x, int64_t M, void* out, Workspace& ws, ThreadPool*,
                                Stream* stream) const {
  Scratch sc(ws, *this, M);
  if (M == 0) return;
  const cudaStream_t s = cuda::native(stream);
  const int64_t H = hidden_size_, Is = config_.intermediate_size;
  const size_t blas_bytes = cuda::GemmXwt::kWorkspaceBytes;
  gemm13_.run(x, M, w13_.raw(), sc.h, 1.0f, sc.blas, blas_bytes, s);
  cuda::dispatch_float_dtype(dtype_, [&](auto t) {
    using T = decltype(t);
    cuda::launch_moe_activation<T>(sc.h, M, Is, cuda_act_params(config_.activation), sc.a, s);
  });
  gemm2_.run(sc.a, M, w2_.raw(), out, 1.0f, sc.blas, blas_bytes, s);
  if (!gemm_gate_) return;
  gemm_gate_->run(x, M, expert_gate_.raw(), sc.gate, 1.0f, sc.blas, blas_bytes, s);
  cuda::dispatch_float_dtype(dtype_, [&](auto t) {
    cuda::launch_moe_scale_rows_sigmoid<decltype(t)>(out, sc.gate, M, H, s);
  });
}

void CudaSharedExperts::add_output(void* y, const void* shared_out, int64_t n,
                                   Stream* stream) const {
  cuda::dispatch_float_dtype(dtype_, [&](auto t) {
    cuda::launch_moe_accumulate<decltype(t)>(y, shared_out, n, cuda::native(stream));
  });
}

}  // namespace mg
