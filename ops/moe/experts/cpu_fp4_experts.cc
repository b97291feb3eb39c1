#include "ops/moe/experts/cpu_fp4_experts.h"

#include <algorithm>
#include <vector>

#include "framework/core/fp4.h"
#include "ops/moe/experts/cpu_checks.h"
#include "ops/moe/experts/cpu_eigen_experts.h"
#include "ops/moe/experts/cpu_expert_mlp.h"
#include "ops/moe/oracle/fp4.h"
#include "ops/nn/linear/fp4_gemm_cpu.h"

namespace mg {

namespace {

void add_bias_rows(float* y, int64_t n, int64_t width, const Tensor& bias, int64_t e) {
  if (!bias.defined()) return;
  const float* b = bias.data<float>() + e * width;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < width; ++c) y[i * width + c] += b[c];
  }
}

// y [n, R] = x . W_e^T for expert e of the packed stack `codes` [E, R, C / 2].
void expert_gemm(const float* x, int64_t n, const Tensor& codes, const WeightQuantization& q,
                 int64_t e, float* y) {
  const int64_t R = codes.dim(1), Cb = codes.dim(2), C = 2 * Cb;
  const int64_t scales_per_expert = q.scale.dim(1) * q.scale.dim(2);
  cpu_fp4_gemm_xwt(x, n, static_cast<const uint8_t*>(codes.raw()) + e * R * Cb,
                   q.scale.data<float>() + e * scales_per_expert, R, C, q.group.cols_in(C), y,
                   nullptr);
}

class Fp4ExpertMlp final : public CpuExpertMlp {
 public:
  Fp4ExpertMlp(ExpertsShape shape, QuantizedExpertWeights w)
      : shape_(std::move(shape)), w_(std::move(w)) {
    const int64_t E = shape_.num_local_experts(), H = shape_.hidden_size;
    const int64_t I = shape_.intermediate_size, N1 = shape_.w13_rows();
    MG_ASSERT(w_.w13.dtype() == DType::kU8 && w_.w13.shape() == Shape({E, N1, H / 2}) &&
                  H % 2 == 0 && I % 2 == 0 && w_.w2.dtype() == DType::kU8 &&
                  w_.w2.shape() == Shape({E, H, I / 2}) &&
                  w_.w13_quant.scale.shape() == scale_shape_for({E, N1, H}, w_.w13_quant.group) &&
                  w_.w2_quant.scale.shape() == scale_shape_for({E, H, I}, w_.w2_quant.group),
              "cpu_fp4: weights w13 {} w2 {} do not fit {}", w_.w13.str(), w_.w2.str(),
              shape_.activation.str());
  }

  void run(int64_t e, float* rows, int64_t n, float* h1, float* act) const override {
    if (n == 0) return;
    const int64_t H = shape_.hidden_size, I = shape_.intermediate_size, N1 = shape_.w13_rows();
    expert_gemm(rows, n, w_.w13, w_.w13_quant, e, h1);
    add_bias_rows(h1, n, N1, w_.w13_bias, e);
    apply_expert_activation(shape_.activation, h1, n, I, act);
    expert_gemm(act, n, w_.w2, w_.w2_quant, e, rows);
    add_bias_rows(rows, n, H, w_.w2_bias, e);
  }

 private:
  ExpertsShape shape_;
  QuantizedExpertWeights w_;
};

class CpuFp4Backend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cpu_fp4"; }
  bool is_monolithic() const override { return false; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cpu_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    if (!is_fp4_scheme(quant.scheme())) {
      return fmt::format("takes FP4 weights (MXFP4, NVFP4), not {}",
                         quant_scheme_name(quant.scheme()));
    }
    const QuantKey& a = quant.activation_key();
    if (a.quantized() || a.dtype() != DType::kF32) {
      return "computes weight-only in F32, not activations " + a.str();
    }
    return {};
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_parallel(const ParallelConfig&) const override { return {}; }
  std::string check_shape(const ExpertsShape&) const override { return {}; }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return make_cpu_permuted_experts(
        *this, build.shape,
        std::make_unique<Fp4ExpertMlp>(build.shape, std::move(build.quantized)));
  }
};

}  // namespace

const ExpertsBackend& cpu_fp4_backend() {
  static const CpuFp4Backend backend;
  return backend;
}

}  // namespace mg
