#include "ops/nn/rope/rope_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "ops/nn/rope/rope.h"

namespace mg {

RopeCpu::RopeCpu(const proto::RopeParams& p)
    : num_heads_(p.num_heads()),
      head_dim_(p.head_dim()),
      rotary_dim_(rope_rotary_dim(p)),
      rotary_offset_(p.rotary_offset()),
      interleaved_(p.pairing() == proto::INTERLEAVED),
      inv_freq_(rope_inv_freq(p)),
      attention_factor_(rope_attention_factor(p)) {}

void RopeCpu::apply(const float* x, const int32_t* positions, int64_t tokens, float* out,
                    ThreadPool* pool) const {
  const int64_t width = num_heads_ * head_dim_;
  for (int64_t t = 0; t < tokens; ++t) {
    MG_CHECK(positions[t] >= 0, "rope: position {} (row {}) is negative", positions[t], t);
  }
  const int64_t half = rotary_dim_ / 2;
  // Pair i of a head: dims (a_i, b_i) relative to the rotary slice.
  const int64_t a_step = interleaved_ ? 2 : 1;
  const int64_t b_offset = interleaved_ ? 1 : half;
  auto rotate = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* xr = x + t * width;
      float* outr = out + t * width;
      if (outr != xr) std::memcpy(outr, xr, static_cast<size_t>(width) * sizeof(float));
      const double position = positions[t];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = position * inv_freq_[i];
        const float c = static_cast<float>(std::cos(angle) * attention_factor_);
        const float s = static_cast<float>(std::sin(angle) * attention_factor_);
        const int64_t a = rotary_offset_ + i * a_step;
        const int64_t b = a + b_offset;
        for (int64_t h = 0; h < num_heads_; ++h) {
          const int64_t base = h * head_dim_;
          // Both read before either is written: in place is fine.
          const float xa = xr[base + a];
          const float xb = xr[base + b];
          outr[base + a] = xa * c - xb * s;
          outr[base + b] = xb * c + xa * s;
        }
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, (1 << 13) / std::max<int64_t>(1, num_heads_ * half));
  if (pool) {
    pool->parallel_for(tokens, rotate, grain);
  } else {
    rotate(0, tokens);
  }
}

}  // namespace mg
