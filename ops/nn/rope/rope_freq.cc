// RoPE parameter checks and the kernel's frequency math (HF modeling_rope_utils semantics).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "framework/core/error.h"
#include "ops/nn/rope/rope.h"

namespace mg {

namespace {

using Scaling = proto::RopeScaling;

void check_positive(double value, const char* name) {
  MG_CHECK(std::isfinite(value) && value > 0.0, "rope: {} must be positive and finite, got {}",
           name, value);
}

// HF get_mscale: 1 for s <= 1, else 0.1 * m * ln(s) + 1.
double yarn_get_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

void apply_yarn(const proto::RopeParams& p, int64_t rotary_dim, std::vector<double>& inv_freq) {
  const Scaling& s = p.scaling();
  const double dim = static_cast<double>(rotary_dim);
  const double log_theta = std::log(p.theta());
  const double original = static_cast<double>(s.original_max_position());
  // The dim index whose wavelength makes `rotations` full turns over the original context.
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * log_theta);
  };
  double low = correction_dim(s.has_beta_fast() ? s.beta_fast() : 32.0);
  double high = correction_dim(s.has_beta_slow() ? s.beta_slow() : 1.0);
  if (!s.has_truncate() || s.truncate()) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;  // avoid dividing by zero in the ramp
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
    const double extrapolated = inv_freq[i];
    const double interpolated = inv_freq[i] / s.factor();
    inv_freq[i] = interpolated * (1.0 - extrapolation) + extrapolated * extrapolation;
  }
}

void apply_llama3(const proto::RopeParams& p, std::vector<double>& inv_freq) {
  const Scaling& s = p.scaling();
  const double original = static_cast<double>(s.original_max_position());
  const double low_freq_wavelen = original / s.low_freq_factor();
  const double high_freq_wavelen = original / s.high_freq_factor();
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies are kept
    if (wavelen > low_freq_wavelen) {           // low frequencies are interpolated fully
      f /= s.factor();
      continue;
    }
    // Band in between; empty (a single wavelength, kept) when the two factors are equal.
    if (s.high_freq_factor() == s.low_freq_factor()) continue;
    const double smooth =
        (original / wavelen - s.low_freq_factor()) / (s.high_freq_factor() - s.low_freq_factor());
    f = (1.0 - smooth) * f / s.factor() + smooth * f;
  }
}

}  // namespace

int64_t rope_rotary_dim(const proto::RopeParams& params) {
  return params.rotary_dim() == 0 ? params.head_dim() : params.rotary_dim();
}

void check_rope_params(const proto::RopeParams& p) {
  MG_CHECK(p.num_heads() > 0, "rope: num_heads must be positive, got {}", p.num_heads());
  MG_CHECK(p.head_dim() > 0, "rope: head_dim must be positive, got {}", p.head_dim());
  MG_CHECK(p.rotary_offset() >= 0 && p.rotary_offset() < p.head_dim(),
           "rope: rotary_offset {} must be in [0, head_dim {})", p.rotary_offset(), p.head_dim());
  MG_CHECK(p.rotary_dim() >= 0, "rope: rotary_dim {} must be >= 0 (0 means head_dim)",
           p.rotary_dim());
  const int64_t rotary_dim = rope_rotary_dim(p);
  MG_CHECK(rotary_dim % 2 == 0, "rope: rotary_dim {} must be even", rotary_dim);
  MG_CHECK(rotary_dim <= p.head_dim() - p.rotary_offset(),
           "rope: rotary_dim {}{} exceeds head_dim {} - rotary_offset {} = {}", rotary_dim,
           p.rotary_dim() == 0 ? " (0 means head_dim)" : "", p.head_dim(), p.rotary_offset(),
           p.head_dim() - p.rotary_offset());
  MG_CHECK(p.pairing() == proto::HALF_SPLIT || p.pairing() == proto::INTERLEAVED,
           "rope: pairing must be HALF_SPLIT or INTERLEAVED, got {}",
           proto::RopePairing_IsValid(p.pairing()) ? proto::RopePairing_Name(p.pairing())
                                                   : std::to_string(p.pairing()));
  check_positive(p.theta(), "theta");

  const Scaling& s = p.scaling();
  MG_CHECK(Scaling::Type_IsValid(s.type()),
           "rope: unknown scaling type {} (expected NONE, LINEAR, YARN or LLAMA3)",
           static_cast<int>(s.type()));
  if (s.type() == Scaling::NONE) return;
  check_positive(s.factor(), "scaling.factor");
  if (s.type() == Scaling::LINEAR) return;
  MG_CHECK(s.original_max_position() > 0,
           "rope: scaling.original_max_position must be positive, got {}",
           s.original_max_position());
  if (s.type() == Scaling::YARN) {
    MG_CHECK(p.theta() != 1.0, "rope: yarn needs theta != 1 (it divides by ln theta)");
    if (s.has_beta_fast()) check_positive(s.beta_fast(), "scaling.beta_fast");
    if (s.has_beta_slow()) check_positive(s.beta_slow(), "scaling.beta_slow");
    if (s.has_attention_factor()) check_positive(s.attention_factor(), "scaling.attention_factor");
    MG_CHECK(std::isfinite(s.mscale()) && std::isfinite(s.mscale_all_dim()),
             "rope: scaling.mscale {} and mscale_all_dim {} must be finite", s.mscale(),
             s.mscale_all_dim());
    return;
  }
  // LLAMA3
  check_positive(s.low_freq_factor(), "scaling.low_freq_factor");
  check_positive(s.high_freq_factor(), "scaling.high_freq_factor");
  MG_CHECK(s.high_freq_factor() >= s.low_freq_factor(),
           "rope: llama3 high_freq_factor {} must be >= low_freq_factor {}", s.high_freq_factor(),
           s.low_freq_factor());
}

std::vector<double> rope_inv_freq(const proto::RopeParams& p) {
  const int64_t rotary_dim = rope_rotary_dim(p);
  std::vector<double> inv_freq(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = 1.0 / std::pow(p.theta(), static_cast<double>(2 * i) / rotary_dim);
  }
  switch (p.scaling().type()) {
    case Scaling::NONE:
      break;
    case Scaling::LINEAR:
      for (double& f : inv_freq) f /= p.scaling().factor();
      break;
    case Scaling::YARN:
      apply_yarn(p, rotary_dim, inv_freq);
      break;
    case Scaling::LLAMA3:
      apply_llama3(p, inv_freq);
      break;
    case proto::RopeScaling_Type_RopeScaling_Type_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::RopeScaling_Type_RopeScaling_Type_INT_MAX_SENTINEL_DO_NOT_USE_:
      MG_ASSERT(false, "rope: scaling type not checked");
  }
  return inv_freq;
}

double rope_attention_factor(const proto::RopeParams& p) {
  const Scaling& s = p.scaling();
  if (s.type() != Scaling::YARN) return 1.0;
  if (s.has_attention_factor()) return s.attention_factor();
  // HF: the ratio when both mscale and mscale_all_dim are set (non-zero), else get_mscale(s, 1).
  if (s.mscale() != 0.0 && s.mscale_all_dim() != 0.0) {
    return yarn_get_mscale(s.factor(), s.mscale()) /
           yarn_get_mscale(s.factor(), s.mscale_all_dim());
  }
  return yarn_get_mscale(s.factor(), 1.0);
}

}  // namespace mg
