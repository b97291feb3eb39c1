#include "ops/moe/bench/moe_bench_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <span>

#include "framework/core/fp4.h"
#include "framework/core/int_quant.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/random_fill_cuda.h"
#include "framework/device/random_fill.h"
#include "framework/device/stream.h"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/experts/cuda_wna16_experts.h"
#include "ops/moe/kernel/fused_moe_kernel.h"
#include "ops/moe/kernel/prepare_finalize.h"
#include "ops/moe/oracle/fp4.h"
#include "ops/moe/oracle/fp8.h"
#include "ops/moe/oracle/oracle.h"
#include "ops/moe/oracle/unquantized.h"
#include "ops/moe/oracle/wna16.h"
#include "ops/moe/reference/moe_reference.h"
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

// CUDA events around each call: warm-up, then enough calls to fill `target_ms` (5..400). The
// warm-up is 3 calls and then as many as fill a quarter of target_ms (at most 400): after 3 calls
// alone a run's first point read high (H200, gpt-oss-120b MXFP4, 256 tokens: 1093.0 µs as the
// first point, 853.1 inside another run's sweep; 830.6 as the first point with this warm-up;
// docs/performance.md, session 14).
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
  const int more_warmup =
      std::clamp(static_cast<int>(target_ms / 4 / std::max(one_ms, 1e-3f)), 0, 400);
  for (int i = 0; i < more_warmup; ++i) call(i);
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

// The FP8 tensor-core rate: D [n, n] BF16 = A [n, n] . B [n, n]^T with e4m3 A, B (the "TN" layout
// cuBLASLt's FP8 GEMMs take), fp32 compute, n = 8192, the best heuristic algorithm.
double measure_fp8_flops(cudaStream_t s) {
  const int64_t n = 8192;
  // Random bytes as codes (the rate does not depend on the values; 2 of 256 codes are NaN).
  Tensor a = random_device(DType::kBF16, {n * n / 2}, 4, 1.0f, s);
  Tensor b = random_device(DType::kBF16, {n * n / 2}, 5, 1.0f, s);
  Tensor d = empty_tensor(kGpu, DType::kBF16, {n, n});
  const size_t ws_bytes = size_t{32} << 20;
  Tensor ws = empty_tensor(kGpu, DType::kU8, {static_cast<int64_t>(ws_bytes)});
  cublasLtHandle_t lt;
  MG_CUBLAS_CHECK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  MG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  MG_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  MG_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  cublasLtMatrixLayout_t la, lb, ld;
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n));
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n));
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n));
  cublasLtMatmulPreference_t pref;
  MG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  MG_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &algo, &found));
  MG_CHECK(found > 0, "bench: cuBLASLt has no FP8 GEMM algorithm for {}^3 on this GPU", n);
  const float alpha = 1.0f, beta = 0.0f;
  const Timing t = time_calls(
      [&](int) {
        MG_CUBLAS_CHECK(cublasLtMatmul(lt, op, &alpha, a.raw(), la, b.raw(), lb, &beta, d.raw(), ld,
                                       d.raw(), ld, &algo.algo, ws.raw(), ws_bytes, s));
      },
      100.0, s);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  return 2.0 * n * n * n / (t.median_us * 1e-6);
}

// Codes [E, N, K] e4m3 from random BF16 values (quantized per row per 128 channels on the GPU, so
// no code is NaN), in chunks of experts to bound the BF16 scratch.
Tensor random_fp8_codes(int64_t E, int64_t N, int64_t K, uint64_t seed, cudaStream_t s) {
  Tensor codes = empty_tensor(kGpu, DType::kF8E4M3, {E, N, K});
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 30) / (N * K));  // ~2 GiB of BF16
  for (int64_t e0 = 0; e0 < E; e0 += chunk) {
    const int64_t rows = std::min(chunk, E - e0) * N;
    Tensor x = random_device(DType::kBF16, {rows, K}, seed + e0, 1.0f, s);
    Tensor xs = empty_tensor(kGpu, DType::kF32, {rows, cuda::fp8_groups(K)});
    cuda::Fp8QuantArgs q;
    q.x = x.raw();
    q.max_rows = rows;
    q.k = K;
    q.xq = fp8_codes(codes) + e0 * N * K;
    q.xs = xs.data<float>();
    cuda::launch_fp8_quantize<__nv_bfloat16>(q, s);
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  return codes;
}

// Device FP8 weights of scheme `quant` for the bench layer: codes as above, scales uniform in
// +-sqrt(3 / K) / 448 (the real weights then have the variance of the BF16 bench's).
QuantizedExpertWeights random_fp8_weights(QuantScheme quant, int64_t E, int64_t H, int64_t I,
                                          cudaStream_t s) {
  const GroupShape g = quant == QuantScheme::kFp8Block        ? GroupShape::block(128, 128)
                       : quant == QuantScheme::kFp8PerChannel ? GroupShape::per_channel()
                                                              : GroupShape::per_tensor();
  const bool per_token = quant != QuantScheme::kFp8Block;
  auto make = [&](int64_t N, int64_t K, uint64_t seed, Tensor& codes, WeightQuantization& q) {
    codes = random_fp8_codes(E, N, K, seed, s);
    q.group = g;
    q.scale = random_device(DType::kF32, scale_shape_for({E, N, K}, g), seed + 7,
                            std::sqrt(3.0f / K) / 448.0f, s);
    q.activation = ActivationQuant::kDynamic;
    q.activation_group = per_token ? -1 : 128;
  };
  QuantizedExpertWeights w;
  make(2 * I, H, 21, w.w13, w.w13_quant);
  make(H, I, 22, w.w2, w.w2_quant);
  return w;
}

// Device FP4 weights of scheme `quant` (MXFP4: groups of 32 columns, NVFP4: 16) for the bench
// layer: packed codes of uniform random bytes (every E2M1 value), F32 scales (decoded, as the
// loader makes them) in [0.25, 0.75) / sqrt(K) rounded to what the checkpoints' scale bytes hold
// (MXFP4: down to a power of two; NVFP4: an E4M3 value times a power-of-two global scale per
// expert), so that cuda_fp4 keeps them as bytes (an E2M1 code's rms is ~2.9, so the real weights
// have about the variance of the BF16 bench's).
QuantizedExpertWeights random_fp4_weights(QuantScheme quant, int64_t E, int64_t H, int64_t I,
                                          cudaStream_t s) {
  const bool mx = quant == QuantScheme::kMxfp4;
  const GroupShape g{1, mx ? 32 : 16};
  auto make = [&](int64_t N, int64_t K, uint64_t seed, Tensor& codes, WeightQuantization& q) {
    codes = empty_tensor(kGpu, DType::kU8, {E, N, K / 2});
    MG_CHECK(codes.numel() % 4 == 0, "bench moe: FP4 rows of {} columns", K);
    cuda::launch_wna16_random_fill(static_cast<uint32_t*>(codes.raw()), codes.numel() / 4, nullptr,
                                   0, 4, 1.0f, seed, s);
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    q.group = g;
    const float base = 0.5f / std::sqrt(static_cast<float>(K));
    const float global = mx ? 1.0f : e8m0_scale_value(e8m0_floor_code(base));
    q.scale = empty_tensor(kGpu, DType::kF32, scale_shape_for({E, N, K}, g));
    fill_random_scales(q.scale, seed + 7, base, nullptr,
                       mx ? Fp4ScaleGrid::kE8M0 : Fp4ScaleGrid::kE4M3, global);
    if (!mx) {
      q.global_scale = Tensor::empty_cpu(DType::kF32, {E, 1});
      std::fill_n(q.global_scale.data<float>(), E, global);
    }
  };
  QuantizedExpertWeights w;
  make(2 * I, H, 31, w.w13, w.w13_quant);
  make(H, I, 32, w.w2, w.w2_quant);
  return w;
}

// The F32 values [.., C] of host packed FP4 codes [.., C / 2] with host F32 scales per
// `q.group` (decoded here with fp4.h's codec, not by the backends' code).
Tensor dequantize_fp4_host(const Tensor& codes, const WeightQuantization& q) {
  const int64_t Cb = codes.dim(-1), C = 2 * Cb;
  const int64_t g = q.group.cols_in(C), sc = q.scale.dim(-1);
  Shape shape = codes.shape();
  shape.back() = C;
  Tensor out = Tensor::empty_cpu(DType::kF32, shape);
  const uint8_t* in = static_cast<const uint8_t*>(codes.raw());
  for (int64_t r = 0; r < codes.numel() / Cb; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      out.data<float>()[r * C + c] =
          fp4_e2m1_to_float(fp4_code_at(in + r * Cb, c)) * q.scale.data<float>()[r * sc + c / g];
    }
  }
  return out;
}

// Row `r` of the device matrix `t` [M, H] as F32 [1, H] on the host.
Tensor row_to_host_f32(const Tensor& t, int64_t r) {
  const int64_t H = t.shape()[1];
  Tensor host = Tensor::empty_cpu(t.dtype(), {1, H});
  MG_CUDA_CHECK(cudaMemcpy(host.raw(), static_cast<const char*>(t.raw()) + r * host.nbytes(),
                           host.nbytes(), cudaMemcpyDeviceToHost));
  return to_f32_cpu(host);
}

// Experts `ids` of the device tensor `t` [E, ...] copied to a host tensor [ids.size(), ...] of the
// same dtype (scale tensors included: their leading dimension is the expert's).
Tensor experts_to_host(const Tensor& t, std::span<const int32_t> ids) {
  Shape shape = t.shape();
  const size_t slab = t.nbytes() / static_cast<size_t>(shape[0]);
  shape[0] = static_cast<int64_t>(ids.size());
  Tensor host = Tensor::empty_cpu(t.dtype(), shape);
  for (size_t j = 0; j < ids.size(); ++j) {
    MG_CUDA_CHECK(cudaMemcpy(static_cast<char*>(host.raw()) + j * slab,
                             static_cast<const char*>(t.raw()) + ids[j] * slab, slab,
                             cudaMemcpyDeviceToHost));
  }
  return host;
}

// The F32 weights [ids.size(), rows, K] that experts `ids` of the packed device matrix `m` hold,
// read back through the layout on the host (wna16_unpack_host: the documented word and pair
// layout, not the kernels' dequantization).
Tensor wna16_experts_to_host(const Wna16DeviceMatrix& m, int64_t rows,
                             std::span<const int32_t> ids) {
  cuda::Wna16PackedHost p = m.layout;
  p.experts = static_cast<int64_t>(ids.size());
  const Tensor words = experts_to_host(m.words, ids), params = experts_to_host(m.params, ids);
  p.words.assign(static_cast<const uint32_t*>(words.raw()),
                 static_cast<const uint32_t*>(words.raw()) + words.numel());
  p.params.assign(params.data<float>(), params.data<float>() + params.numel());
  const std::vector<float> values = cuda::wna16_unpack_host(p, rows);
  Tensor out = Tensor::empty_cpu(DType::kF32, {p.experts, rows, p.cols});
  std::copy(values.begin(), values.end(), out.data<float>());
  return out;
}

// The independent check of one (shape, tokens): the fp64 reference layer
// (ops/moe/reference/moe_reference.h: its own routing and expert loops, nothing shared with the
// backends) on up to kMoEBenchCheckRows rows of input set 0, spread over the batch. Rows whose
// top-k choice is a near-tie (the reference's margin) are skipped: fp32 routing may pick either.
// Only the chosen experts' weights come back to the host, one row at a time.
struct CheckReference {
  std::vector<int64_t> rows;
  std::vector<float> out;  // [rows, H]

  CheckReference(const MoEConfig& config, const Tensor& x, const Tensor& logits,
                 const CanonicalExpertWeights& w, const QuantizedExpertWeights& qw,
                 const Wna16DeviceWeights* packed) {
    const int64_t M = x.shape()[0], k = config.top_k();
    const Tensor hl = to_host_f32(logits);
    const reference::Routing routing = reference::route(
        config.routing(), {hl.data<float>(), static_cast<size_t>(hl.numel())}, M, {});
    const int64_t step = std::max<int64_t>(1, M / kMoEBenchCheckRows);
    for (int pass = 0; pass < 2; ++pass) {  // evenly spread rows first, then any row
      for (int64_t r = 0; r < M && static_cast<int64_t>(rows.size()) < kMoEBenchCheckRows;
           r += pass == 0 ? step : 1) {
        if (routing.margin[r] > 1e-6 && std::find(rows.begin(), rows.end(), r) == rows.end()) {
          rows.push_back(r);
        }
      }
    }
    if (rows.empty()) rows.push_back(0);  // every row a near-tie: check row 0 all the same
    // The row's k experts become experts 0..k-1 of a k-expert layer.
    MoEConfig::Fields f = config.fields();
    f.routing.num_experts = k;
    const MoEConfig sub(f);
    std::vector<int32_t> local(k);
    for (int64_t j = 0; j < k; ++j) local[j] = static_cast<int32_t>(j);
    for (int64_t r : rows) {
      const std::span<const int32_t> ids(routing.ids.data() + r * k, k);
      const std::span<const float> weights(routing.weights.data() + r * k, k);
      const Tensor hx = row_to_host_f32(x, r);
      const std::span<const float> xr(hx.data<float>(), static_cast<size_t>(hx.numel()));
      std::vector<float> y;
      if (w.w13.defined()) {
        y = reference::experts(sub, xr, 1, local, weights, experts_to_host(w.w13, ids), Tensor(),
                               experts_to_host(w.w2, ids), Tensor());
      } else if (packed != nullptr) {  // WNA16: the packed codes and pairs read back
        y = reference::experts(
            sub, xr, 1, local, weights, wna16_experts_to_host(packed->w13, config.w13_rows(), ids),
            Tensor(), wna16_experts_to_host(packed->w2, config.hidden_size(), ids), Tensor());
      } else if (qw.w13.dtype() == DType::kU8) {  // FP4: the packed codes dequantized here
        WeightQuantization q13 = qw.w13_quant, q2 = qw.w2_quant;
        q13.scale = experts_to_host(q13.scale, ids);
        q2.scale = experts_to_host(q2.scale, ids);
        y = reference::experts(sub, xr, 1, local, weights,
                               dequantize_fp4_host(experts_to_host(qw.w13, ids), q13), Tensor(),
                               dequantize_fp4_host(experts_to_host(qw.w2, ids), q2), Tensor());
      } else {
        WeightQuantization q13 = qw.w13_quant, q2 = qw.w2_quant;
        q13.scale = experts_to_host(q13.scale, ids);
        q2.scale = experts_to_host(q2.scale, ids);
        const std::optional<int64_t> act_group = q13.activation == ActivationQuant::kDynamic
                                                     ? std::optional<int64_t>(q13.activation_group)
                                                     : std::nullopt;
        y = reference::experts_fp8(sub, xr, 1, local, weights, experts_to_host(qw.w13, ids), q13,
                                   experts_to_host(qw.w2, ids), q2, Tensor(), Tensor(), act_group);
      }
      out.insert(out.end(), y.begin(), y.end());
    }
  }

  // The normalised error of `got` (device [M, H]) on the sampled rows.
  double error(const Tensor& got) const {
    const int64_t H = got.shape()[1];
    double num = 0, den = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Tensor h = row_to_host_f32(got, rows[i]);
      for (int64_t c = 0; c < H; ++c) {
        const double ref = out[i * H + c];
        const double d = h.data<float>()[c] - ref;
        num += d * d;
        den += ref * ref;
      }
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }
};

}  // namespace

double moe_bench_check_tolerance(DType dtype, QuantScheme quant) {
  if (quant != QuantScheme::kUnquantized && !is_wna16_scheme(quant)) return 6e-2;
  if (dtype == DType::kBF16) return 3e-2;
  if (dtype == DType::kF16) return 5e-3;
  MG_CHECK(dtype == DType::kF32, "bench moe: activations are BF16, F16 or F32, not {}",
           dtype_name(dtype));
  return 1e-4;
}

double wna16_checkpoint_expert_bytes(int64_t hidden, int64_t inter, QuantElement element,
                                     int64_t group) {
  const double bits = quant_element_bits(element);
  const auto groups = [&](int64_t k) {
    return group < 0 ? 1.0 : static_cast<double>((k + group - 1) / group);
  };
  const double scale_groups = 2.0 * inter * groups(hidden) + hidden * groups(inter);
  const double per_group = 2.0 + (quant_element_signed(element) ? 0.0 : bits / 8.0);
  return 3.0 * hidden * inter * bits / 8.0 + scale_groups * per_group;
}

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
  c.fp8_flops_per_s = measure_fp8_flops(s);
  return c;
}

std::vector<MoEBenchPoint> run_moe_bench(
    const MoEBenchOptions& o, const MoEBenchCeilings& ceil,
    const std::function<void(const MoEBenchPoint&)>& progress) {
  MG_CHECK(o.sets >= 1, "bench moe: --sets must be at least 1");
  auto stream = make_stream(kGpu);
  const cudaStream_t s = cuda::native(stream.get());
  const bool fp4 = is_fp4_scheme(o.quant);
  const bool wna16 = is_wna16_scheme(o.quant);
  const bool fp8 = o.quant != QuantScheme::kUnquantized && !fp4 && !wna16;
  MG_CHECK(!fp8 || is_fp8_scheme(o.quant), "bench moe: --quant {} is not supported",
           quant_scheme_name(o.quant));
  const int bits = wna16 ? quant_element_bits(o.int_element) : 0;
  MG_CHECK(!wna16 || bits == (o.quant == QuantScheme::kInt4WeightOnly ? 4 : 8),
           "bench moe: quant scheme {} takes {} codes, not {}", quant_scheme_name(o.quant),
           o.quant == QuantScheme::kInt4WeightOnly ? "4-bit" : "8-bit",
           quant_element_name(o.int_element));
  const std::vector<const ExpertsBackend*> list = fp4     ? fp4_priority(kGpu)
                                                  : wna16 ? wna16_priority(kGpu)
                                                  : fp8   ? fp8_priority(kGpu)
                                                          : unquantized_priority(kGpu);
  // The layer of one shape on one GPU.
  const auto shape_of = [&](const MoEConfig& config) {
    ExpertsShape shape = local_experts_shape(config, ParallelConfig());
    shape.dtype = o.dtype;
    return shape;
  };
  const auto config_of = [&](const MoEBenchShape& sh) {
    MoEConfig::Fields fields = bench_config(sh).fields();
    fields.quant_scheme = o.quant;
    return MoEConfig(fields);
  };
  // WNA16: the groups of every shape are checked before any is timed (cuda_wna16's weights check;
  // the random weights are made in its layout only). A shape the groups do not divide is skipped
  // with a line saying why (e.g. gpt-oss-120b's 2880 at g128 among the default shapes); the bench
  // fails only when no shape is left.
  const ExpertWeightFacts::Matrix int_matrix{bits, o.int_group, false};
  const ExpertWeightFacts int_facts{int_matrix, int_matrix};
  std::vector<MoEBenchShape> shapes;
  std::string refused;
  for (const MoEBenchShape& sh : o.shapes) {
    const std::string why =
        wna16 ? cuda_wna16_backend().check_weights(int_facts, shape_of(config_of(sh))) : "";
    if (why.empty()) {
      shapes.push_back(sh);
      continue;
    }
    refused = fmt::format(
        "bench moe: cuda_wna16 does not take {} with {} groups: weights: {} (bench that shape "
        "with a group that divides its sizes, e.g. {}-g64, or channel-wise)",
        sh.name, o.int_group < 0 ? std::string("channel-wise") : std::to_string(o.int_group), why,
        quant_element_name(o.int_element));
    fmt::print(stderr, "{}; skipped\n", refused);
  }
  MG_CHECK(!shapes.empty(), "{}", refused);
  std::vector<MoEBenchPoint> points;
  for (const MoEBenchShape& sh : shapes) {
    const MoEConfig config = config_of(sh);
    const ExpertsShape shape = shape_of(config);
    const int64_t E = sh.experts, H = sh.hidden, I = sh.inter, k = sh.top_k;
    // randn * 1/sqrt(fan_in) has the variance of uniform +-sqrt(3/fan_in).
    CanonicalExpertWeights w;
    QuantizedExpertWeights qw;
    std::optional<Wna16DeviceWeights> packed;  // WNA16: cuda_wna16's own layout
    std::optional<ExpertWeightFacts> facts;    // WNA16: for the backends' weights check
    std::optional<MoEQuantConfig> quant;
    double expert_bytes = 3.0 * H * I * dtype_size(o.dtype);  // per expert, as the floor counts
    if (fp8) {
      qw = random_fp8_weights(o.quant, E, H, I, s);
      const RawExpertWeights raw{{}, {}, {}, {}, qw.w13_quant, qw.w2_quant};
      quant = fp8_quant_config(config, raw, o.dtype, /*quantize_activations=*/true);
      expert_bytes = 3.0 * H * I + 4.0 * (qw.w13_quant.scale.numel() + qw.w2_quant.scale.numel()) /
                                       static_cast<double>(E);
    } else if (fp4) {
      qw = random_fp4_weights(o.quant, E, H, I, s);
      const RawExpertWeights raw{qw.w13, {}, qw.w2, {}, qw.w13_quant, qw.w2_quant};
      quant = fp4_quant_config(config, raw, o.dtype);
      // The checkpoint's bytes: packed codes, one 1-byte scale per group (E8M0 or E4M3) and
      // NVFP4's global scale, one float per matrix (gate, up, down), as cuda_fp4 keeps them (it
      // also streams the padding of K to a multiple of 128: cuda_fp4_expert_bytes).
      expert_bytes =
          1.5 * H * I +
          (qw.w13_quant.scale.numel() + qw.w2_quant.scale.numel()) / static_cast<double>(E) +
          (o.quant == QuantScheme::kNvfp4 ? 3.0 * 4.0 : 0.0);
    } else if (wna16) {
      facts = int_facts;
      quant = MoEQuantConfig(o.quant,
                             QuantKey::integer(o.int_element, DType::kF32, {1, o.int_group},
                                               !quant_element_signed(o.int_element)),
                             QuantKey::unquantized(o.dtype));
      packed = make_random_wna16_weights(shape, kGpu, bits, o.int_group, 41);
      expert_bytes = wna16_checkpoint_expert_bytes(H, I, o.int_element, o.int_group);
    } else {
      w.w13 = random_device(o.dtype, {E, 2 * I, H}, 11, std::sqrt(3.0f / H), s);
      w.w2 = random_device(o.dtype, {E, H, I}, 12, std::sqrt(3.0f / I), s);
      quant = MoEQuantConfig::unquantized(o.dtype);
    }
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
      std::optional<CheckReference> check;  // once per (shape, tokens), for every backend
      if (o.check) {
        // The inputs (and the weights) were made on `s`; the reference reads them from the host.
        MG_CUDA_CHECK(cudaStreamSynchronize(s));
        check.emplace(config, xs[0], logits[0], w, qw, packed ? &*packed : nullptr);
      }
      const cuda::RouteParams route = route_params(config.routing());
      for (const std::string& name : o.backends) {
        // "backend" or "backend:kernel" (a forced kernel, `bench moe --kernel`).
        const BackendRequest request = split_backend_request(name);
        auto it = std::find_if(list.begin(), list.end(), [&](const ExpertsBackend* b) {
          return b->name() == request.backend;
        });
        MG_CHECK(it != list.end(), "bench moe: unknown CUDA backend '{}'", request.backend);
        const ExpertsBackend& backend = **it;
        // Random WNA16 weights exist only in cuda_wna16's packed layout.
        MG_CHECK(!wna16 || backend.name() == "cuda_wna16",
                 "bench moe: --quant {} times cuda_wna16 only (its packed weights are made on the "
                 "GPU), not {}",
                 quant_element_name(o.int_element), request.backend);
        std::string why = check_backend(backend, OracleQuery{kGpu, config, *quant, parallel, shape,
                                                             name, facts ? &*facts : nullptr});
        if (why.empty()) why = backend.check_kernel(request.kernel, shape, kGpu);
        MG_CHECK(why.empty(), "bench moe: {} does not take {}: {}", name, sh.name, why);
        ExpertsBuild build{config, shape, kGpu, w, Tensor(), request.kernel, *quant, qw};
        FusedMoEKernel kernel(make_prepare_finalize(parallel, shape),
                              packed ? make_cuda_wna16_experts_from_packed(build, *packed)
                                     : backend.create(std::move(build)));
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
        if (check) {
          call(0);
          MG_CUDA_CHECK(cudaStreamSynchronize(s));
          if (o.perturb_checked_output) o.perturb_checked_output(name, out);
          p.check_error = check->error(out);
          p.check_failed = !(p.check_error <= moe_bench_check_tolerance(o.dtype, o.quant));
        }
        const Timing t = time_calls(call, o.target_ms, s);
        p.median_us = t.median_us;
        p.p10_us = t.p10_us;
        p.p90_us = t.p90_us;
        p.reps = t.reps;
        p.distinct_experts = E * (1.0 - std::pow(1.0 - static_cast<double>(k) / E, M));
        const double es = dtype_size(o.dtype);
        p.bytes = p.distinct_experts * expert_bytes + M * H * es * 2 + M * E * 4.0;
        p.flops = 2.0 * M * k * 3.0 * H * I;
        const double rate = fp8 ? ceil.fp8_flops_per_s : ceil.bf16_flops_per_s;
        p.floor_us = std::max(p.bytes / ceil.copy_bytes_per_s, p.flops / rate) * 1e6;
        points.push_back(p);
        if (progress) progress(p);
      }
    }
  }
  return points;
}

}  // namespace mg
