// The FP8 expert reference (tests only): codes decoded exactly, scales looked up by index, sums
// in fp64, one token and one expert at a time.
#include <vector>

#include "framework/core/fp8.h"
#include "ops/moe/reference/moe_reference.h"

namespace mg::reference {

namespace {

// Element (e, r, c) of quantized matrix stack `codes` [E, R, C].
double fp8_element(const Tensor& codes, const WeightQuantization& q, int64_t e, int64_t r,
                   int64_t c) {
  const int64_t R = codes.dim(1), C = codes.dim(2);
  const int64_t sr = q.scale.dim(1), sc = q.scale.dim(2);
  const double scale =
      q.scale.data<float>()[(e * sr + r / q.group.rows_in(R)) * sc + c / q.group.cols_in(C)];
  return static_cast<double>(fp8_e4m3_to_float(fp8_codes(codes)[(e * R + r) * C + c])) * scale;
}

// v (rounded to fp32) replaced by its FP8 codes x scales per `group` channels.
void fake_quantize(std::vector<double>& v, int64_t group) {
  const int64_t n = static_cast<int64_t>(v.size()), g = group < 0 ? n : group;
  std::vector<float> f(v.begin(), v.end());
  std::vector<uint8_t> codes(static_cast<size_t>(g));
  for (int64_t c0 = 0; c0 < n; c0 += g) {
    const int64_t len = std::min(g, n - c0);
    const float scale = quantize_fp8_e4m3_group(f.data() + c0, len, codes.data());
    for (int64_t c = 0; c < len; ++c) {
      v[c0 + c] = static_cast<double>(fp8_e4m3_to_float(codes[c])) * scale;
    }
  }
}

std::vector<double> bias_values(const Tensor& bias) {
  if (!bias.defined()) return {};
  const Tensor f = to_f32_cpu(bias);
  return std::vector<double>(f.data<float>(), f.data<float>() + f.numel());
}

}  // namespace

std::vector<float> experts_fp8(const MoEConfig& config, std::span<const float> x, int64_t rows,
                               std::span<const int32_t> ids, std::span<const float> weights,
                               const Tensor& w13, const WeightQuantization& w13_quant,
                               const Tensor& w2, const WeightQuantization& w2_quant,
                               const Tensor& w13_bias, const Tensor& w2_bias,
                               std::optional<int64_t> activation_group) {
  const int64_t E = config.num_experts(), k = config.top_k(), H = config.hidden_size();
  const int64_t I = config.intermediate_size(), N1 = config.w13_rows();
  const bool gated = is_gated(config.activation().kind);
  const std::vector<double> b13 = bias_values(w13_bias), b2 = bias_values(w2_bias);
  auto bias_at = [](const std::vector<double>& b, int64_t i) { return b.empty() ? 0.0 : b[i]; };
  std::vector<double> acc(static_cast<size_t>(rows * H), 0.0);
  std::vector<double> xin(static_cast<size_t>(H)), a(static_cast<size_t>(I));
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[static_cast<size_t>(t * k + j)];
      if (e < 0 || e >= E) continue;
      const double w = weights[static_cast<size_t>(t * k + j)];
      for (int64_t h = 0; h < H; ++h) xin[h] = x[static_cast<size_t>(t * H + h)];
      if (activation_group) fake_quantize(xin, *activation_group);
      auto row_dot = [&](int64_t r) {
        double s = bias_at(b13, e * N1 + r);
        for (int64_t h = 0; h < H; ++h) s += fp8_element(w13, w13_quant, e, r, h) * xin[h];
        return s;
      };
      for (int64_t i = 0; i < I; ++i) {
        a[i] = gated ? activation(config.activation(), row_dot(i), row_dot(I + i))
                     : activation(config.activation(), row_dot(i), 0.0);
      }
      if (activation_group) fake_quantize(a, *activation_group);
      for (int64_t h = 0; h < H; ++h) {
        double y = bias_at(b2, e * H + h);
        for (int64_t i = 0; i < I; ++i) y += fp8_element(w2, w2_quant, e, h, i) * a[i];
        acc[t * H + h] += w * y;
      }
    }
  }
  return std::vector<float>(acc.begin(), acc.end());
}

}  // namespace mg::reference
