#include "ops/moe/experts/cpu_fp8_experts.h"

#include <algorithm>
#include <vector>

#include "ops/moe/experts/cpu_checks.h"
#include "ops/moe/experts/cpu_eigen_experts.h"
#include "ops/moe/experts/cpu_expert_mlp.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"

namespace mg {

namespace {

// y [n, R] = x [n, C] . W_e^T for expert e of quantized stack (codes [E, R, C], q).
void expert_gemm(const float* x, int64_t n, const Tensor& codes, const WeightQuantization& q,
                 int64_t e, float* y) {
  const int64_t R = codes.dim(1), C = codes.dim(2);
  const int64_t scales_per_expert = q.scale.dim(1) * q.scale.dim(2);
  cpu_fp8_gemm_xwt(x, n, fp8_codes(codes) + e * R * C,
                   q.scale.data<float>() + e * scales_per_expert, R, C, q.group, y, nullptr);
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
      : shape_(std::move(shape)), w_(std::move(w)), act_quant_(activation.quantized()) {
    if (act_quant_) {
      // GEMM1's input with w13's instruction, GEMM2's with w2's (static checkpoints: a scale
      // each; dynamic: the same group).
      x_quant_ = fp8_activation_quant(w_.w13_quant);
      h_quant_ = fp8_activation_quant(w_.w2_quant);
    }
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
    // GEMM1 reads the rows quantized in place (GEMM2 overwrites them anyway).
    if (act_quant_) cpu_fake_quantize_fp8_activations(rows, n, H, x_quant_, rows);
    expert_gemm(rows, n, w_.w13, w_.w13_quant, e, h1);
    add_bias_rows(h1, n, N1, w_.w13_bias, e);
    apply_expert_activation(shape_.activation, h1, n, I, act);
    if (act_quant_) cpu_fake_quantize_fp8_activations(act, n, I, h_quant_, act);
    expert_gemm(act, n, w_.w2, w_.w2_quant, e, rows);
    add_bias_rows(rows, n, H, w_.w2_bias, e);
  }

 private:
  ExpertsShape shape_;
  QuantizedExpertWeights w_;
  bool act_quant_;
  Fp8ActivationQuant x_quant_, h_quant_;
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
    if (a.quantized() && a.dtype() != DType::kF8E4M3) {
      return "quantizes activations to F8_E4M3 only, not " + a.str();
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
