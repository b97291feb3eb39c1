#include "ops/nn/rms_norm/rms_norm_cpu.h"

#include <algorithm>
#include <cmath>

namespace mg {

namespace {

// Σ x² over n floats: eight partial sums the compiler vectorises, combined in fp64.
double sum_of_squares(const float* x, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += x[i + l] * x[i + l];
  }
  double sum = 0.0;
  for (int l = 0; l < 8; ++l) sum += lanes[l];
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

}  // namespace

void rms_norm_cpu(const float* x, int64_t units, int64_t group, const float* weight, float eps,
                  float* y, ThreadPool* pool) {
  const double eps_d = eps;
  // One unit = one group of one row; groups are contiguous, so unit u starts at u * group.
  auto normalise = [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const float* xs = x + u * group;
      float* ys = y + u * group;
      const float inv_rms =
          static_cast<float>(1.0 / std::sqrt(sum_of_squares(xs, group) / group + eps_d));
      if (weight) {
        for (int64_t i = 0; i < group; ++i) ys[i] = xs[i] * inv_rms * weight[i];
      } else {
        for (int64_t i = 0; i < group; ++i) ys[i] = xs[i] * inv_rms;
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / group);
  if (pool) {
    pool->parallel_for(units, normalise, grain);
  } else {
    normalise(0, units);
  }
}

}  // namespace mg
