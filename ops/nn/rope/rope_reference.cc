// Reference RoPE: the formulas of docs/ops.md written out directly, in fp64, sharing nothing with
// the kernel's rope_freq.cc.
#include <algorithm>
#include <cmath>

#include "ops/nn/rope/rope.h"

namespace mg {

namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

std::vector<double> rope_reference_inv_freq(const proto::RopeParams& params) {
  const int64_t d = params.rotary_dim() == 0 ? params.head_dim() : params.rotary_dim();
  const double theta = params.theta();
  const proto::RopeScaling& sc = params.scaling();
  const double s = sc.factor();
  const double l0 = static_cast<double>(sc.original_max_position());
  std::vector<double> out;
  for (int64_t i = 0; i < d / 2; ++i) {
    // Unscaled: theta^(-2i/d), written as exp to differ from the kernel's pow.
    const double base =
        std::exp(-2.0 * static_cast<double>(i) / static_cast<double>(d) * std::log(theta));
    double f = base;
    if (sc.type() == proto::RopeScaling::LINEAR) {
      f = base / s;
    } else if (sc.type() == proto::RopeScaling::YARN) {
      // corr(r) = d * ln(L0 / (2 pi r)) / (2 ln theta)
      const double beta_fast = sc.has_beta_fast() ? sc.beta_fast() : 32.0;
      const double beta_slow = sc.has_beta_slow() ? sc.beta_slow() : 1.0;
      double lo = d * std::log(l0 / (2 * kPi * beta_fast)) / (2 * std::log(theta));
      double hi = d * std::log(l0 / (2 * kPi * beta_slow)) / (2 * std::log(theta));
      const bool truncate = sc.has_truncate() ? sc.truncate() : true;
      if (truncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
      }
      if (lo < 0) lo = 0;
      if (hi > d - 1) hi = static_cast<double>(d - 1);
      if (lo == hi) hi = hi + 0.001;
      double ramp = (static_cast<double>(i) - lo) / (hi - lo);
      if (ramp < 0) ramp = 0;
      if (ramp > 1) ramp = 1;
      // ramp 0: keep the original frequency; ramp 1: fully interpolated (divided by s).
      f = base * (1 - ramp) + (base / s) * ramp;
    } else if (sc.type() == proto::RopeScaling::LLAMA3) {
      const double wavelen = 2 * kPi / base;
      const double lf = sc.low_freq_factor();
      const double hf = sc.high_freq_factor();
      if (wavelen > l0 / lf) {
        f = base / s;
      } else if (wavelen < l0 / hf || hf == lf) {
        f = base;
      } else {
        const double smooth = (l0 / wavelen - lf) / (hf - lf);
        f = (1 - smooth) * base / s + smooth * base;
      }
    }
    out.push_back(f);
  }
  return out;
}

double rope_reference_attention_factor(const proto::RopeParams& params) {
  const proto::RopeScaling& sc = params.scaling();
  if (sc.type() != proto::RopeScaling::YARN) return 1.0;
  if (sc.has_attention_factor()) return sc.attention_factor();
  const double s = sc.factor();
  auto mscale_of = [s](double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
  if (sc.mscale() != 0 && sc.mscale_all_dim() != 0) {
    return mscale_of(sc.mscale()) / mscale_of(sc.mscale_all_dim());
  }
  return mscale_of(1.0);
}

void rope_reference(const proto::RopeParams& params, const float* x, const int32_t* positions,
                    int64_t tokens, float* out) {
  const int64_t heads = params.num_heads();
  const int64_t head_dim = params.head_dim();
  const int64_t d = params.rotary_dim() == 0 ? head_dim : params.rotary_dim();
  const int64_t offset = params.rotary_offset();
  const std::vector<double> inv_freq = rope_reference_inv_freq(params);
  const double mult = rope_reference_attention_factor(params);
  const int64_t width = heads * head_dim;
  std::copy(x, x + tokens * width, out);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = x + t * width + h * head_dim + offset;
      float* oh = out + t * width + h * head_dim + offset;
      for (int64_t i = 0; i < d / 2; ++i) {
        const double angle = static_cast<double>(positions[t]) * inv_freq[i];
        const double c = std::cos(angle) * mult;
        const double s = std::sin(angle) * mult;
        // The two dims of pair i.
        const int64_t a = params.pairing() == proto::INTERLEAVED ? 2 * i : i;
        const int64_t b = params.pairing() == proto::INTERLEAVED ? 2 * i + 1 : i + d / 2;
        const double xa = xh[a];
        const double xb = xh[b];
        oh[a] = static_cast<float>(xa * c - xb * s);
        oh[b] = static_cast<float>(xb * c + xa * s);
      }
    }
  }
}

}  // namespace mg
