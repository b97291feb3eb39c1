#include "ops/moe/experts/cuda_padded_experts.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>

#include "framework/device/allocator.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "ops/moe/experts/cuda_experts.h"

namespace mg {

int64_t cuda_padded_size(int64_t n) {
  return (n + 7) / 8 * 8;
}

namespace {

ExpertsShape padded_shape(const ExpertsShape& shape) {
  ExpertsShape p = shape;
  p.hidden_size = cuda_padded_size(shape.hidden_size);
  p.intermediate_size = cuda_padded_size(shape.intermediate_size);
  return p;
}

// Copies a block of `rows` x `cols` elements between two row-major matrices of the same dtype on
// the same device (host or GPU), from element `src_at` (row pitch `src_pitch` elements) to
// element `dst_at` (row pitch `dst_pitch`).
void copy_block(const Tensor& dst, int64_t dst_at, int64_t dst_pitch, const Tensor& src,
                int64_t src_at, int64_t src_pitch, int64_t rows, int64_t cols) {
  MG_ASSERT(dst.dtype() == src.dtype() && dst.device() == src.device(),
            "padding {} into {}: dtype and device must agree", src.str(), dst.str());
  const size_t es = dtype_size(src.dtype());
  char* d = static_cast<char*>(dst.raw()) + dst_at * es;
  const char* s = static_cast<const char*>(src.raw()) + src_at * es;
  if (src.device().is_cpu()) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(d + r * dst_pitch * es, s + r * src_pitch * es, cols * es);
    return;
  }
  MG_CUDA_CHECK(cudaMemcpy2D(d, dst_pitch * es, s, src_pitch * es, cols * es, rows,
                             cudaMemcpyDeviceToDevice));
}

// A zero tensor like `like` (dtype, device) of `shape`.
Tensor zeros_like(const Tensor& like, Shape shape) {
  Tensor out = empty_tensor(like.device(), like.dtype(), std::move(shape));  // zeroed on the CPU
  if (out.device().is_cuda()) MG_CUDA_CHECK(cudaMemset(out.raw(), 0, out.nbytes()));
  return out;
}

// `c` (canonical, shape `s`) zero-padded to `p` (padded_shape(s)); see the header for the layout.
CanonicalExpertWeights pad_weights(const CanonicalExpertWeights& c, const ExpertsShape& s,
                                   const ExpertsShape& p) {
  if (s.hidden_size == p.hidden_size && s.intermediate_size == p.intermediate_size) return c;
  const int64_t E = s.num_local_experts(), H = s.hidden_size, I = s.intermediate_size;
  const int64_t Hp = p.hidden_size, Ip = p.intermediate_size;
  const int64_t N1 = s.w13_rows(), N1p = p.w13_rows();
  const bool gated = N1 != I;
  CanonicalExpertWeights out;
  out.w13 = zeros_like(c.w13, {E, N1p, Hp});
  out.w2 = zeros_like(c.w2, {E, Hp, Ip});
  for (int64_t e = 0; e < E; ++e) {
    copy_block(out.w13, e * N1p * Hp, Hp, c.w13, e * N1 * H, H, I, H);  // gate (or the only) rows
    if (gated) copy_block(out.w13, (e * N1p + Ip) * Hp, Hp, c.w13, (e * N1 + I) * H, H, I, H);
    copy_block(out.w2, e * Hp * Ip, Ip, c.w2, e * H * I, I, H, I);
  }
  if (c.w13_bias.defined()) {
    out.w13_bias = zeros_like(c.w13_bias, {E, N1p});
    copy_block(out.w13_bias, 0, N1p, c.w13_bias, 0, N1, E, I);
    if (gated) copy_block(out.w13_bias, Ip, N1p, c.w13_bias, I, N1, E, I);
  }
  if (c.w2_bias.defined()) {
    out.w2_bias = zeros_like(c.w2_bias, {E, Hp});
    copy_block(out.w2_bias, 0, Hp, c.w2_bias, 0, H, E, H);
  }
  // cudaMemset and device-to-device cudaMemcpy2D return before they are done: finish them before
  // the caller frees `c` and before a forward's (non-blocking) stream reads `out`.
  if (out.w13.device().is_cuda()) synchronize_device(out.w13.device());
  return out;
}

class CudaPaddedExperts final : public ExpertsMonolithic {
 public:
  CudaPaddedExperts(const ExpertsBackend& backend, ExpertsBuild build)
      : ExpertsMonolithic(backend), shape_(build.shape), padded_(padded_shape(build.shape)) {
    CanonicalExpertWeights weights = pad_weights(build.weights, shape_, padded_);
    build.weights = {};  // the unpadded copy is not kept
    std::unique_ptr<Experts> inner =
        cuda_moe_backend().create(ExpertsBuild{build.config,
                                               padded_,
                                               build.device,
                                               std::move(weights),
                                               build.score_correction_bias,
                                               build.kernel,
                                               build.quant,
                                               {}});
    inner_.reset(static_cast<ExpertsMonolithic*>(inner.release()));
  }

  bool graph_capturable() const override { return inner_->graph_capturable(); }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, padded_, max_rows);
    return ws.bytes() + inner_->workspace_bytes(max_rows);
  }

  void apply(const DispatchedLogits& t, Workspace& ws, const MoEExecContext& ctx) override {
    const Scratch sc(ws, shape_, padded_, t.num_tokens);
    const int64_t M = t.num_tokens, H = shape_.hidden_size, Hp = padded_.hidden_size;
    if (H == Hp || M == 0) {  // rows already aligned: only the weights are padded
      inner_->apply(t, ws, ctx);
      return;
    }
    const size_t es = dtype_size(shape_.dtype);
    const cudaStream_t s = cuda::native(ctx.stream);
    char* x = static_cast<char*>(sc.x);
    MG_CUDA_CHECK(cudaMemset2DAsync(x + H * es, Hp * es, 0, (Hp - H) * es, M, s));
    MG_CUDA_CHECK(
        cudaMemcpy2DAsync(x, Hp * es, t.hidden, H * es, H * es, M, cudaMemcpyDeviceToDevice, s));
    DispatchedLogits padded = t;
    padded.hidden = sc.x;
    padded.expert_output = sc.y;
    inner_->apply(padded, ws, ctx);
    MG_CUDA_CHECK(cudaMemcpy2DAsync(t.expert_output, H * es, sc.y, Hp * es, H * es, M,
                                    cudaMemcpyDeviceToDevice, s));
  }

 private:
  // The padded input and output rows, [M, Hp] each; none when H is aligned. Carved before the
  // inner experts' scratch, which follows in the same workspace.
  struct Scratch {
    void* x;
    void* y;
    Scratch(Workspace& ws, const ExpertsShape& shape, const ExpertsShape& padded, int64_t M) {
      const int64_t n = shape.hidden_size == padded.hidden_size
                            ? 0
                            : M * padded.hidden_size * dtype_size(shape.dtype);
      x = ws.take<std::byte>(n);
      y = ws.take<std::byte>(n);
    }
  };

  ExpertsShape shape_;
  ExpertsShape padded_;
  std::unique_ptr<ExpertsMonolithic> inner_;  // cuda_moe on the padded shape
};

// Every check but the shape's is cuda_moe's; the shape is checked padded.
class CudaPaddedBackend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cuda_padded"; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return inner().check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    return inner().check_quant(quant);
  }
  std::string check_activation(const ActivationConfig& activation) const override {
    return inner().check_activation(activation);
  }
  std::string check_routing(const RoutingConfig& routing) const override {
    return inner().check_routing(routing);
  }
  std::string check_parallel(const ParallelConfig& parallel) const override {
    return inner().check_parallel(parallel);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    if (shape.hidden_size <= 0 || shape.intermediate_size <= 0) {
      return fmt::format("hidden {} and intermediate {} must be positive", shape.hidden_size,
                         shape.intermediate_size);
    }
    return inner().check_shape(padded_shape(shape));
  }
  std::string check_kernel(std::string_view kernel, const ExpertsShape& shape,
                           Device device) const override {
    return inner().check_kernel(kernel, padded_shape(shape), device);
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CudaPaddedExperts>(*this, std::move(build));
  }

 private:
  static const ExpertsBackend& inner() { return cuda_moe_backend(); }
};

}  // namespace

const ExpertsBackend& cuda_padded_backend() {
  static const CudaPaddedBackend backend;
  return backend;
}

}  // namespace mg
