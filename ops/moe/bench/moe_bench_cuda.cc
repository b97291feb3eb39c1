#include "ops/moe/bench/moe_bench_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/random_fill_cuda.h"
#include "framework/device/stream.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/kernel/fused_moe_kernel.h"
#include "ops/moe/kernel/prepare_finalize.h"
#include "ops/moe/oracle/oracle.h"
#include "ops/moe/oracle/unquantized.h"
#include "ops/moe/router/router_cuda.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

const std::vector<MoEBenchShape>& moe_bench_shapes() {
  static const std::vector<MoEBenchShape> shapes = {
      {"mixtral", 4096, 14336, 8, 2},
      {"qwen3-30b-a3b", 2048, 768, 128, 8},
      {"deepseek-v3", 7168, 2048, 256, 8},
      {"gpt-oss-120b", 2880, 2880, 128, 4},
  };
  return shapes;
}

namespace {

const Device kGpu = Device::cuda(0);

struct Timing {
  double median_us, p10_us, p90_us;
  int reps;
};

// CUDA events around each call: warm-up, then enough calls to fill `target_ms` (5..400).
template <typename Fn>
Timing time_calls(Fn&& call, double target_ms, cudaStream_t stream, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) call(i);
  cudaEvent_t a, b;
  MG_CUDA_CHECK(cudaEventCreate(&a));
  MG_CUDA_CHECK(cudaEventCreate(&b));
  MG_CUDA_CHECK(cudaEventRecord(a, stream));
  call(warmup);
  MG_CUDA_CHECK(cudaEventRecord(b, stream));
  MG_CUDA_CHECK(cudaEventSynchronize(b));
  float one_ms = 0;
  MG_CUDA_CHECK(cudaEventElapsedTime(&one_ms, a, b));
  const int reps = std::clamp(static_cast<int>(target_ms / std::max(one_ms, 1e-3f)), 5, 400);
  std::vector<cudaEvent_t> starts(reps), ends(reps);
  for (int r = 0; r < reps; ++r) {
    MG_CUDA_CHECK(cudaEventCreate(&starts[r]));
    MG_CUDA_CHECK(cudaEventCreate(&ends[r]));
  }
  for (int r = 0; r < reps; ++r) {
    MG_CUDA_CHECK(cudaEventRecord(starts[r], stream));
    call(r);
    MG_CUDA_CHECK(cudaEventRecord(ends[r], stream));
  }
  MG_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(reps);
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    MG_CUDA_CHECK(cudaEventElapsedTime(&ms, starts[r], ends[r]));
    us[r] = ms * 1e3;
    cudaEventDestroy(starts[r]);
    cudaEventDestroy(ends[r]);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(us.begin(), us.end());
  auto q = [&](double p) { return us[std::min<size_t>(us.size() - 1, p * us.size())]; };
  return {us[us.size() / 2], q(0.1), q(0.9), reps};
}

Tensor random_device(DType dtype, const Shape& shape, uint64_t seed, float scale,
                     cudaStream_t stream) {
  Tensor t = empty_tensor(kGpu, dtype, shape);
  cuda::fill_uniform(t.raw(), t.numel(), dtype, seed, 0.0f, scale, stream);
  return t;
}

MoEConfig bench_config(const MoEBenchShape& s) {
  MoEConfig::Fields f;
  f.routing.method = RoutingMethod::kSoftmaxTopK;
  f.routing.num_experts = s.experts;
  f.routing.top_k = s.top_k;
  f.routing.renormalize = true;
  f.hidden_size = s.hidden;
  f.intermediate_size = s.inter;
  f.activation.kind = MoEActivation::kSiluGated;
  return MoEConfig(f);
}

Tensor to_host_f32(const Tensor& dev) {
  Tensor host = Tensor::empty_cpu(dev.dtype(), dev.shape());
  copy_tensor(host, dev);
  return to_f32_cpu(host);
}

double normalized_error_device(const Tensor& a, const Tensor& b) {
  const Tensor ha = to_host_f32(a), hb = to_host_f32(b);
  double num = 0, den = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const double d = ha.data<float>()[i] - hb.data<float>()[i];
    num += d * d;
    den += static_cast<double>(hb.data<float>()[i]) * hb.data<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

MoEBenchCeilings measure_moe_bench_ceilings() {
  auto stream = make_stream(kGpu);
  const cudaStream_t s = cuda::native(stream.get());
  MoEBenchCeilings c;
  {
    const int64_t bytes = int64_t{2} << 30;
    Tensor src = random_device(DType::kBF16, {bytes / 2}, 1, 1.0f, s);
    Tensor dst = empty_tensor(kGpu, DType::kBF16, {bytes / 2});
    const Timing t = time_calls(
        [&](int) {
          MG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), bytes, cudaMemcpyDeviceToDevice, s));
        },
        100.0, s);
    c.copy_bytes_per_s = 2.0 * bytes / (t.median_us * 1e-6);
  }
  {
    const int64_t n = 8192;
    Tensor a = random_device(DType::kBF16, {n, n}, 2, 1.0f, s);
    Tensor b = random_device(DType::kBF16, {n, n}, 3, 1.0f, s);
    Tensor y = empty_tensor(kGpu, DType::kBF16, {n, n});
    Tensor ws =
        empty_tensor(kGpu, DType::kU8, {static_cast<int64_t>(cuda::GemmXwt::kWorkspaceBytes)});
    cuda::GemmXwt gemm(DType::kBF16, n, n, nullptr, 0);
    const Timing t = time_calls(
        [&](int) { gemm.run(a.raw(), n, b.raw(), y.raw(), 1.0f, ws.raw(), ws.nbytes(), s); }, 100.0,
        s);
    c.bf16_flops_per_s = 2.0 * n * n * n / (t.median_us * 1e-6);
  }
  return c;
}

std::vector<MoEBenchPoint> run_moe_bench(
    const MoEBenchOptions& o, const MoEBenchCeilings& ceil,
    const std::function<void(const MoEBenchPoint&)>& progress) {
  MG_CHECK(o.sets >= 1, "bench moe: --sets must be at least 1");
  auto stream = make_stream(kGpu);
  const cudaStream_t s = cuda::native(stream.get());
  const std::vector<const ExpertsBackend*> list = unquantized_priority(kGpu);
  std::vector<MoEBenchPoint> points;
  for (const MoEBenchShape& sh : o.shapes) {
    const MoEConfig config = bench_config(sh);
    ExpertsShape shape = local_experts_shape(config, ParallelConfig());
    shape.dtype = o.dtype;
    const int64_t E = sh.experts, H = sh.hidden, I = sh.inter, k = sh.top_k;
    // randn * 1/sqrt(fan_in) has the variance of uniform +-sqrt(3/fan_in).
    CanonicalExpertWeights w;
    w.w13 = random_device(o.dtype, {E, 2 * I, H}, 11, std::sqrt(3.0f / H), s);
    w.w2 = random_device(o.dtype, {E, H, I}, 12, std::sqrt(3.0f / I), s);
    const MoEQuantConfig quant = MoEQuantConfig::unquantized(o.dtype);
    const ParallelConfig parallel;
    for (int64_t M : o.tokens) {
      std::vector<Tensor> xs, logits;
      for (int set = 0; set < o.sets; ++set) {
        xs.push_back(random_device(o.dtype, {M, H}, 100 + set, 1.7f, s));
        logits.push_back(random_device(DType::kF32, {M, E}, 200 + set, 1.7f, s));
      }
      Tensor ids = empty_tensor(kGpu, DType::kI32, {M, k});
      Tensor weights = empty_tensor(kGpu, DType::kF32, {M, k});
      Tensor out = empty_tensor(kGpu, o.dtype, {M, H});
      Tensor first_out;
      const cuda::RouteParams route = route_params(config.routing());
      for (const std::string& name : o.backends) {
        // "backend" or "backend:kernel" (a forced kernel, `bench moe --kernel`).
        const BackendRequest request = split_backend_request(name);
        auto it = std::find_if(list.begin(), list.end(), [&](const ExpertsBackend* b) {
          return b->name() == request.backend;
        });
        MG_CHECK(it != list.end(), "bench moe: unknown CUDA backend '{}'", request.backend);
        const ExpertsBackend& backend = **it;
        std::string why =
            check_backend(backend, OracleQuery{kGpu, config, quant, parallel, shape, name});
        if (why.empty()) why = backend.check_kernel(request.kernel, shape, kGpu);
        MG_CHECK(why.empty(), "bench moe: {} does not take {}: {}", name, sh.name, why);
        FusedMoEKernel kernel(
            make_prepare_finalize(parallel, shape),
            backend.create(ExpertsBuild{config, shape, kGpu, w, Tensor(), request.kernel}));
        const size_t ws_bytes = kernel.workspace_bytes(M);
        Tensor ws =
            empty_tensor(kGpu, DType::kU8, {static_cast<int64_t>(std::max<size_t>(ws_bytes, 64))});
        const MoEExecContext ctx{nullptr, stream.get(), nullptr};
        auto call = [&](int r) {
          const int set = r % o.sets;
          PrepareArgs args;
          args.hidden = xs[set].raw();
          args.num_tokens = M;
          args.out = out.raw();
          Workspace carve(ws.raw(), ws_bytes);
          if (kernel.is_monolithic()) {
            args.router_logits = logits[set].data<float>();
            kernel.apply_monolithic(args, carve, ctx);
          } else {
            // The same routing kernel the runner runs, inside the timed call as for the peers.
            cuda::launch_moe_route<float>(route, logits[set].data<float>(), M, nullptr,
                                          ids.data<int32_t>(), weights.data<float>(), s);
            args.topk_ids = ids.data<int32_t>();
            args.topk_weights = weights.data<float>();
            kernel.apply(args, carve, ctx);
          }
        };
        MoEBenchPoint p;
        p.shape = sh.name;
        p.backend = name;
        p.tokens = M;
        if (o.check) {
          call(0);
          MG_CUDA_CHECK(cudaStreamSynchronize(s));
          if (!first_out.defined()) {
            first_out = empty_tensor(kGpu, o.dtype, {M, H});
            MG_CUDA_CHECK(
                cudaMemcpy(first_out.raw(), out.raw(), out.nbytes(), cudaMemcpyDeviceToDevice));
          }
          p.check_error = normalized_error_device(out, first_out);
        }
        const Timing t = time_calls(call, o.target_ms, s);
        p.median_us = t.median_us;
        p.p10_us = t.p10_us;
        p.p90_us = t.p90_us;
        p.reps = t.reps;
        p.distinct_experts = E * (1.0 - std::pow(1.0 - static_cast<double>(k) / E, M));
        const double es = dtype_size(o.dtype);
        p.bytes = p.distinct_experts * 3.0 * H * I * es + M * H * es * 2 + M * E * 4.0;
        p.flops = 2.0 * M * k * 3.0 * H * I;
        p.floor_us =
            std::max(p.bytes / ceil.copy_bytes_per_s, p.flops / ceil.bf16_flops_per_s) * 1e6;
        points.push_back(p);
        if (progress) progress(p);
      }
    }
  }
  return points;
}

}  // namespace mg
