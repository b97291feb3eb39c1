#include "ops/moe/experts/cpu_wna16_experts.h"

#include "framework/core/int_quant.h"
#include "ops/moe/experts/cpu_checks.h"
#include "ops/moe/experts/cpu_eigen_experts.h"
#include "ops/moe/experts/cpu_expert_mlp.h"
#include "ops/nn/linear/int_gemm_cpu.h"

namespace mg {

namespace {

void add_bias_rows(float* y, int64_t n, int64_t width, const Tensor& bias, int64_t e) {
  if (!bias.defined()) return;
  const float* b = bias.data<float>() + e * width;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < width; ++c) y[i * width + c] += b[c];
  }
}

class Wna16ExpertMlp final : public CpuExpertMlp {
 public:
  Wna16ExpertMlp(ExpertsShape shape, QuantizedExpertWeights w)
      : shape_(std::move(shape)), w_(std::move(w)) {
    const int64_t E = shape_.num_local_experts(), H = shape_.hidden_size;
    const int64_t I = shape_.intermediate_size, N1 = shape_.w13_rows();
    MG_ASSERT(w_.w13_quant.is_integer() && w_.w2_quant.is_integer() &&
                  w_.w13_quant.logical_shape == Shape({E, N1, H}) &&
                  w_.w2_quant.logical_shape == Shape({E, H, I}) &&
                  w_.w13.shape() == int_codes_shape(w_.w13_quant.element, {E, N1, H}) &&
                  w_.w2.shape() == int_codes_shape(w_.w2_quant.element, {E, H, I}),
              "cpu_wna16: weights w13 {} w2 {} do not fit E={} N1={} H={} I={}", w_.w13.str(),
              w_.w2.str(), E, N1, H, I);
  }

  void run(int64_t e, float* rows, int64_t n, float* h1, float* act) const override {
    if (n == 0) return;
    const int64_t H = shape_.hidden_size, I = shape_.intermediate_size, N1 = shape_.w13_rows();
    cpu_int_gemm_xwt(rows, n, w_.w13, w_.w13_quant, e, h1, nullptr);
    add_bias_rows(h1, n, N1, w_.w13_bias, e);
    apply_expert_activation(shape_.activation, h1, n, I, act);
    cpu_int_gemm_xwt(act, n, w_.w2, w_.w2_quant, e, rows, nullptr);
    add_bias_rows(rows, n, H, w_.w2_bias, e);
  }

 private:
  ExpertsShape shape_;
  QuantizedExpertWeights w_;
};

class CpuWna16Backend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cpu_wna16"; }
  bool is_monolithic() const override { return false; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cpu_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    if (!is_wna16_scheme(quant.scheme())) {
      return fmt::format("takes integer weight-only codes, not {}",
                         quant_scheme_name(quant.scheme()));
    }
    const QuantKey& a = quant.activation_key();
    if (a.quantized() || a.dtype() != DType::kF32) return "computes in F32, not " + a.str();
    return {};
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_parallel(const ParallelConfig&) const override { return {}; }
  std::string check_shape(const ExpertsShape&) const override { return {}; }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return make_cpu_permuted_experts(
        *this, build.shape,
        std::make_unique<Wna16ExpertMlp>(build.shape, std::move(build.quantized)));
  }
};

}  // namespace

const ExpertsBackend& cpu_wna16_backend() {
  static const CpuWna16Backend backend;
  return backend;
}

}  // namespace mg
