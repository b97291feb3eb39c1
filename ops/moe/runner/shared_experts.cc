#include "ops/moe/runner/shared_experts.h"

#include <algorithm>

#include "ops/moe/experts/cpu_expert_mlp.h"
#include "ops/nn/activation.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"
#include "ops/nn/linear/linear_gemm.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/runner/shared_experts_cuda.h"
#endif

namespace mg {

struct CpuSharedExperts::Scratch {
  float* h;     // [M, N1s]
  float* a;     // [M, Is]
  float* gate;  // [M]
  float* xq;    // [M, H], W8A8 only: x quantized

  Scratch(Workspace& ws, const CpuSharedExperts& s, int64_t M) {
    const int64_t N1 =
        is_gated(s.activation_.kind) ? 2 * s.intermediate_size_ : s.intermediate_size_;
    h = ws.take<float>(M * N1);
    a = ws.take<float>(M * s.intermediate_size_);
    gate = ws.take<float>(s.expert_gate_.defined() ? M : 0);
    xq = ws.take<float>(s.act_quant_ ? M * s.hidden_size_ : 0);
  }
};

CpuSharedExperts::CpuSharedExperts(const SharedExpertsConfig& config, int64_t hidden_size,
                                   int tp_size, int tp_rank, const Tensor& gate, const Tensor& up,
                                   const Tensor& down, const Tensor& expert_gate,
                                   std::optional<Fp8MlpActivationQuant> act_quant)
    : activation_(config.activation), hidden_size_(hidden_size), act_quant_(act_quant) {
  const int64_t Is = config.intermediate_size, H = hidden_size;
  MG_CHECK(Is % tp_size == 0,
           "shared experts: intermediate size {} cannot be split evenly over {} tensor-parallel "
           "ranks",
           Is, tp_size);
  intermediate_size_ = Is / tp_size;
  const int64_t Il = intermediate_size_, first = tp_rank * Il;
  const bool gated = is_gated(activation_.kind);
  // [gate slice; up slice] rows, so one GEMM gives each row as [gate | up].
  w13_ = Tensor::empty_cpu(DType::kF32, {gated ? 2 * Il : Il, H});
  float* w13 = w13_.data<float>();
  if (gated) std::copy_n(gate.data<float>() + first * H, Il * H, w13);
  std::copy_n(up.data<float>() + first * H, Il * H, w13 + (gated ? Il * H : 0));
  w2_ = Tensor::empty_cpu(DType::kF32, {H, Il});
  for (int64_t h = 0; h < H; ++h) {
    std::copy_n(down.data<float>() + h * Is + first, Il, w2_.data<float>() + h * Il);
  }
  if (config.has_gate) {
    expert_gate_ = Tensor::empty_cpu(DType::kF32, {H});
    std::copy_n(expert_gate.data<float>(), H, expert_gate_.data<float>());
  }
}

size_t CpuSharedExperts::workspace_bytes(int64_t max_tokens) const {
  Workspace ws = Workspace::sizing();
  Scratch(ws, *this, max_tokens);
  return ws.bytes();
}

void CpuSharedExperts::forward(const void* x_in, int64_t M, void* out_, Workspace& ws,
                               ThreadPool* pool, Stream*) const {
  const float* x = static_cast<const float*>(x_in);
  float* out = static_cast<float*>(out_);
  Scratch sc(ws, *this, M);
  if (M == 0) return;
  const int64_t H = hidden_size_, Il = intermediate_size_;
  const float* x_gemm = x;
  if (act_quant_) {
    cpu_parallel_for(pool, M, 1, [&](int64_t begin, int64_t end) {
      cpu_fake_quantize_fp8_activations(x + begin * H, end - begin, H, act_quant_->input,
                                        sc.xq + begin * H);
    });
    x_gemm = sc.xq;
  }
  cpu_gemm_xwt(x_gemm, M, H, w13_.data<float>(), w13_.dim(0), sc.h, pool);
  cpu_parallel_for(pool, M, std::max<int64_t>(1, 4096 / Il), [&](int64_t begin, int64_t end) {
    apply_expert_activation(activation_, sc.h + begin * w13_.dim(0), end - begin, Il,
                            sc.a + begin * Il);
    if (act_quant_) {
      cpu_fake_quantize_fp8_activations(sc.a + begin * Il, end - begin, Il, act_quant_->hidden,
                                        sc.a + begin * Il);
    }
  });
  cpu_gemm_xwt(sc.a, M, Il, w2_.data<float>(), H, out, pool);
  if (!expert_gate_.defined()) return;
  // Qwen2-MoE: out[t] *= sigmoid(x[t] . w_sg).
  cpu_gemm_xwt(x, M, H, expert_gate_.data<float>(), 1, sc.gate, pool);
  for (int64_t t = 0; t < M; ++t) {
    const float s = sigmoid(sc.gate[t]);
    for (int64_t h = 0; h < H; ++h) out[t * H + h] *= s;
  }
}

void CpuSharedExperts::add_output(void* y_in, const void* x_in, int64_t n, Stream*) const {
  float* y = static_cast<float*>(y_in);
  const float* x = static_cast<const float*>(x_in);
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

std::unique_ptr<SharedExperts> make_shared_experts(Device device, const SharedExpertsConfig& config,
                                                   int64_t hidden_size, DType dtype, int tp_size,
                                                   int tp_rank, const Tensor& gate,
                                                   const Tensor& up, const Tensor& down,
                                                   const Tensor& expert_gate,
                                                   std::optional<Fp8MlpActivationQuant> act_quant) {
  switch (device.type) {
    case DeviceType::kCPU:
      return std::make_unique<CpuSharedExperts>(config, hidden_size, tp_size, tp_rank, gate, up,
                                                down, expert_gate, act_quant);
    case DeviceType::kCUDA:
#ifdef MG_WITH_CUDA
      return std::make_unique<CudaSharedExperts>(config, hidden_size, dtype, tp_size, tp_rank, gate,
                                                 up, down, expert_gate);
#else
      MG_FAIL("shared experts on {} need a build with CUDA (MG_CUDA=ON)", device.str());
#endif
  }
  MG_FAIL("shared experts have no class for {}", device.str());
}

}  // namespace mg
