#include "ops/moe/experts/cpu_fp8_experts.h"

#include <algorithm>
#include <vector>

#include "framework/core/fp8.h"
#include "ops/moe/experts/cpu_checks.h"
#include "ops/moe/experts/cpu_eigen_experts.h"
#include "ops/moe/experts/cpu_expert_mlp.h"
#include "ops/nn/linear/linear_gemm.h"

namespace mg {

namespace {

// Weight rows dequantized per tile: 128 x H floats (3.5 MiB at H = 7168) per thread.
constexpr int64_t kTileRows = 128;

bool is_fp8_scheme(QuantScheme scheme) {
  return scheme == QuantScheme::kFp8Block || scheme == QuantScheme::kFp8PerChannel ||
         scheme == QuantScheme::kFp8PerTensor;
}

// Scratch of one thread, grown on first use (the pool's threads are fixed, so this is bounded by
// threads x (tile + tile output + quantized rows)).
struct ThreadScratch {
  std::vector<float> tile;
  std::vector<float> tile_out;
  std::vector<float> rows;
  std::vector<uint8_t> codes;
};
ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

float* grown(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// y [n, R] = x [n, C] . W^T for FP8 weight matrix `m` ([R, C] codes of expert e with its scales):
// 128-row tiles dequantized to F32, then the F32 GEMM of the unquantized path.
void fp8_gemm_xwt(const float* x, int64_t n, const Tensor& codes, const WeightQuantization& q,
                  int64_t e, float* y) {
  const int64_t R = codes.dim(1), C = codes.dim(2);
  const int64_t gr = q.group.rows_in(R), gc = q.group.cols_in(C);
  const int64_t s_rows = q.scale.dim(1), s_cols = q.scale.dim(2);
  const uint8_t* w = fp8_codes(codes) + e * R * C;
  const float* scale = q.scale.data<float>() + e * s_rows * s_cols;
  ThreadScratch& ts = thread_scratch();
  for (int64_t r0 = 0; r0 < R; r0 += kTileRows) {
    const int64_t t = std::min(kTileRows, R - r0);
    float* tile = grown(ts.tile, t * C);
    for (int64_t r = 0; r < t; ++r) {
      const float* srow = scale + ((r0 + r) / gr) * s_cols;
      const uint8_t* wrow = w + (r0 + r) * C;
      for (int64_t c = 0; c < C; ++c) tile[r * C + c] = fp8_e4m3_to_float(wrow[c]) * srow[c / gc];
    }
    float* out = grown(ts.tile_out, n * t);
    cpu_gemm_xwt(x, n, C, tile, t, out, nullptr);
    for (int64_t i = 0; i < n; ++i) std::copy_n(out + i * t, t, y + i * R + r0);
  }
}

// rows [n, width] -> codes x scale per token per `group` channels (-1: the whole row), into `out`.
void fake_quantize_rows(const float* rows, int64_t n, int64_t width, int64_t group, float* out) {
  const int64_t g = group < 0 ? width : group;
  ThreadScratch& ts = thread_scratch();
  if (static_cast<int64_t>(ts.codes.size()) < g) ts.codes.resize(g);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c0 = 0; c0 < width; c0 += g) {
      const int64_t len = std::min(g, width - c0);
      const float* src = rows + i * width + c0;
      const float scale = quantize_fp8_e4m3_group(src, len, ts.codes.data());
      for (int64_t c = 0; c < len; ++c) {
        out[i * width + c0 + c] = fp8_e4m3_to_float(ts.codes[c]) * scale;
      }
    }
  }
}

void add_bias_rows(float* y, int64_t n, int64_t width, const Tensor& bias, int64_t e) {
  if (!bias.defined()) return;
  const float* b = bias.data<float>() + e * width;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < width; ++c) y[i * width + c] += b[c];
  }
}

class Fp8ExpertMlp final : public CpuExpertMlp {
 public:
  Fp8ExpertMlp(ExpertsShape shape, QuantizedExpertWeights w, const QuantKey& activation)
      : shape_(std::move(shape)),
        w_(std::move(w)),
        act_quant_(activation.quantized()),
        act_group_(activation.group().cols) {
    const int64_t E = shape_.num_local_experts(), H = shape_.hidden_size;
    const int64_t I = shape_.intermediate_size, N1 = shape_.w13_rows();
    MG_ASSERT(
        w_.w13.dtype() == DType::kF8E4M3 && w_.w13.shape() == Shape({E, N1, H}) &&
            w_.w2.dtype() == DType::kF8E4M3 && w_.w2.shape() == Shape({E, H, I}) &&
            w_.w13_quant.scale.shape() == scale_shape_for(w_.w13.shape(), w_.w13_quant.group) &&
            w_.w2_quant.scale.shape() == scale_shape_for(w_.w2.shape(), w_.w2_quant.group),
        "cpu_fp8: weights w13 {} w2 {} do not fit {}", w_.w13.str(), w_.w2.str(),
        shape_.activation.str());
  }

  void run(int64_t e, float* rows, int64_t n, float* h1, float* act) const override {
    if (n == 0) return;
    const int64_t H = shape_.hidden_size, I = shape_.intermediate_size, N1 = shape_.w13_rows();
    ThreadScratch& ts = thread_scratch();
    const float* x = rows;
    if (act_quant_) {
      float* xq = grown(ts.rows, n * std::max(H, I));
      fake_quantize_rows(rows, n, H, act_group_, xq);
      x = xq;
    }
    fp8_gemm_xwt(x, n, w_.w13, w_.w13_quant, e, h1);
    add_bias_rows(h1, n, N1, w_.w13_bias, e);
    apply_expert_activation(shape_.activation, h1, n, I, act);
    if (act_quant_) fake_quantize_rows(act, n, I, act_group_, act);
    fp8_gemm_xwt(act, n, w_.w2, w_.w2_quant, e, rows);
    add_bias_rows(rows, n, H, w_.w2_bias, e);
  }

 private:
  ExpertsShape shape_;
  QuantizedExpertWeights w_;
  bool act_quant_;
  int64_t act_group_;
};

class CpuFp8Backend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cpu_fp8"; }
  bool is_monolithic() const override { return false; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cpu_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    if (!is_fp8_scheme(quant.scheme())) {
      return fmt::format("takes FP8 weights, not {}", quant_scheme_name(quant.scheme()));
    }
    const QuantKey& a = quant.activation_key();
    if (a.quantized() && (a.dtype() != DType::kF8E4M3 || a.is_static())) {
      return "quantizes activations dynamically to F8_E4M3 only, not " + a.str();
    }
    if (!a.quantized() && a.dtype() != DType::kF32) {
      return "computes in F32, not " + a.str();
    }
    return {};
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_parallel(const ParallelConfig&) const override { return {}; }
  std::string check_shape(const ExpertsShape&) const override { return {}; }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return make_cpu_permuted_experts(
        *this, build.shape,
        std::make_unique<Fp8ExpertMlp>(build.shape, std::move(build.quantized),
                                       build.quant.activation_key()));
  }
};

}  // namespace

const ExpertsBackend& cpu_fp8_backend() {
  static const CpuFp8Backend backend;
  return backend;
}

}  // namespace mg
