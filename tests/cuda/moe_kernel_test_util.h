// Helpers shared by the CUDA MoE kernel tests (decode experts, FP8, WNA16 grouped GEMMs and the
// WNA16 decode path): the activations in fp64, the elementwise + L2 comparison, device copies of
// host vectors.
#pragma once

#ifdef MG_WITH_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ops/moe/cuda/moe_cuda_types.h"
#include "tests/cuda/cuda_test_util.h"

namespace mg::testing {

// The MoE activations in fp64, the formulas of ops/moe/cuda/moe_activation_cuda.cuh.
inline double reference_activation(const cuda::MoEActParams& p, double g, double u) {
  using cuda::MoEActKind;
  const auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const auto gelu = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
  switch (p.kind) {
    case MoEActKind::kSiluGated:
      return g * sigmoid(g) * u;
    case MoEActKind::kGeluGated:
      return gelu(g) * u;
    case MoEActKind::kGeluTanhGated:
      return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
    case MoEActKind::kSwigluOai: {
      g = std::min<double>(g, p.swiglu_limit);
      u = std::clamp<double>(u, -p.swiglu_limit, p.swiglu_limit);
      return (u + 1.0) * g * sigmoid(p.swiglu_alpha * g);
    }
    case MoEActKind::kReluSquared:
      return g > 0.0 ? g * g : 0.0;
    case MoEActKind::kSilu:
      return g * sigmoid(g);
    case MoEActKind::kGelu:
      return gelu(g);
  }
  return 0.0;
}

// Compares `got` with `ref` elementwise (|err| <= rel |ref| + abs_frac rms(ref) + extra[i]) and by
// the normalised L2 error; returns "" or what failed.
inline std::string compare_bounded(const std::vector<double>& got, const std::vector<double>& ref,
                                   double rel, double abs_frac, double l2_limit,
                                   const std::vector<double>* extra = nullptr) {
  double ref2 = 0.0, err2 = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ref2 += ref[i] * ref[i];
    err2 += (got[i] - ref[i]) * (got[i] - ref[i]);
  }
  if (ref.empty()) return "";
  const double rms = std::sqrt(ref2 / static_cast<double>(ref.size()));
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    const double allowed = rel * std::fabs(ref[i]) + abs_frac * rms + (extra ? (*extra)[i] : 0.0);
    if (!(err <= allowed)) {
      if (bad++ == 0) first = fmt::format("element {}: got {} want {}", i, got[i], ref[i]);
    }
  }
  const double l2 = ref2 == 0.0 ? std::sqrt(err2) : std::sqrt(err2 / ref2);
  if (bad > 0 || !(l2 < l2_limit)) {
    return fmt::format("{} of {} elements out of bounds (first: {}), normalised L2 {} (limit {})",
                       bad, ref.size(), first, l2, l2_limit);
  }
  return "";
}

// A device copy of `v` (at least 16 bytes, so an empty vector still gives a valid pointer).
template <typename V>
std::unique_ptr<DeviceBuffer> device_copy(const std::vector<V>& v) {
  auto d = std::make_unique<DeviceBuffer>(std::max<size_t>(v.size() * sizeof(V), 16));
  if (!v.empty()) d->upload(v.data(), v.size() * sizeof(V));
  return d;
}

}  // namespace mg::testing

#endif  // MG_WITH_CUDA
