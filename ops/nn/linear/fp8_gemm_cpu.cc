#include "ops/nn/linear/fp8_gemm_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/fp8.h"
#include "framework/core/thread_pool.h"
#include "ops/nn/linear/tiled_dequant_gemm_cpu.h"

namespace mg {

namespace {

// One thread's code buffer for the fake quantization, grown on first use.
std::vector<uint8_t>& thread_codes() {
  thread_local std::vector<uint8_t> codes;
  return codes;
}

}  // namespace

void cpu_fp8_gemm_xwt(const float* x, int64_t n, const uint8_t* codes, const float* scale,
                      int64_t R, int64_t C, GroupShape group, float* y, ThreadPool* pool) {
  if (n == 0 || R == 0) return;
  const int64_t gr = group.rows_in(R), gc = group.cols_in(C);
  const int64_t sc = (C + gc - 1) / gc;
  const auto fill_tile = [&](int64_t r0, int64_t t, float* tile) {
    for (int64_t r = 0; r < t; ++r) {
      const float* srow = scale + ((r0 + r) / gr) * sc;
      const uint8_t* wrow = codes + (r0 + r) * C;
      for (int64_t c = 0; c < C; ++c) tile[r * C + c] = fp8_e4m3_to_float(wrow[c]) * srow[c / gc];
    }
  };
  cpu_tiled_dequant_gemm_xwt(x, n, R, C, fill_tile, y, pool);
}

void cpu_fake_quantize_fp8_rows(const float* rows, int64_t n, int64_t width, int64_t group,
                                float* out) {
  const int64_t g = group < 0 ? width : group;
  std::vector<uint8_t>& codes = thread_codes();
  if (static_cast<int64_t>(codes.size()) < g) codes.resize(static_cast<size_t>(g));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c0 = 0; c0 < width; c0 += g) {
      const int64_t len = std::min(g, width - c0);
      const float scale = quantize_fp8_e4m3_group(rows + i * width + c0, len, codes.data());
      for (int64_t c = 0; c < len; ++c) {
        out[i * width + c0 + c] = fp8_e4m3_to_float(codes[c]) * scale;
      }
    }
  }
}

std::string Fp8ActivationQuant::str() const {
  if (static_scale > 0.0f) {
    return fmt::format("activations quantized with the static scale {}", static_scale);
  }
  if (group < 0) return "activations quantized per token";
  return fmt::format("activations quantized per token per {} channels", group);
}

Fp8ActivationQuant fp8_activation_quant(const WeightQuantization& q) {
  Fp8ActivationQuant a;
  switch (q.activation) {
    case ActivationQuant::kDynamic:
      a.group = q.activation_group;
      return a;
    case ActivationQuant::kStatic: {
      MG_ASSERT(q.activation_scale.defined() && q.activation_scale.numel() >= 1,
                "static activation quantization without its scale");
      // Stacked or fused weights carry each part's scale: the largest serves them all.
      const Tensor s = to_f32_cpu(q.activation_scale);
      a.static_scale = *std::max_element(s.data<float>(), s.data<float>() + s.numel());
      MG_ASSERT(a.static_scale > 0.0f && std::isfinite(a.static_scale),
                "static activation scale {} is not positive and finite", a.static_scale);
      return a;
    }
    case ActivationQuant::kNone:
      break;
  }
  MG_FAIL("fp8_activation_quant: the weight does not quantize its activations");
}

std::optional<Fp8MlpActivationQuant> fp8_mlp_activation_quant(const WeightQuantization& up,
                                                              const WeightQuantization& down,
                                                              bool enabled) {
  if (!enabled || !up.defined() || up.activation == ActivationQuant::kNone) return std::nullopt;
  Fp8MlpActivationQuant q;
  q.input = fp8_activation_quant(up);
  // down quantizes its own input: its static scale when it has one, else up's dynamic group.
  q.hidden = down.defined() && down.activation != ActivationQuant::kNone
                 ? fp8_activation_quant(down)
                 : q.input;
  return q;
}

void cpu_fake_quantize_fp8_activations(const float* rows, int64_t n, int64_t width,
                                       const Fp8ActivationQuant& a, float* out) {
  if (a.static_scale <= 0.0f) {
    cpu_fake_quantize_fp8_rows(rows, n, width, a.group, out);
    return;
  }
  std::vector<uint8_t>& codes = thread_codes();
  if (static_cast<int64_t>(codes.size()) < width) codes.resize(static_cast<size_t>(width));
  for (int64_t i = 0; i < n; ++i) {
    quantize_fp8_e4m3_static(rows + i * width, width, a.static_scale, codes.data());
    for (int64_t c = 0; c < width; ++c) {
      out[i * width + c] = fp8_e4m3_to_float(codes[c]) * a.static_scale;
    }
  }
}

}  // namespace mg
