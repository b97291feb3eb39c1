// The CPU RoPE loop shared by rope and qk_norm_rope, so the fused op rotates exactly as the op it
// replaces (same cos/sin, same float expressions).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/thread_pool.h"
#include "proto/model.pb.h"

namespace mg {

// RoPE of one params set: inv_freq computed once at construction (params already checked by
// check_rope_params); apply() evaluates cos/sin of each frequency once per token (fp64 angle, so
// large positions stay exact) and rotates that pair in every head.
class RopeCpu {
 public:
  explicit RopeCpu(const proto::RopeParams& params);

  // x, out [tokens, num_heads * head_dim]; out may equal x (in place), else must not overlap
  // it. positions [tokens]; MG_CHECK: none negative. On `pool` when given.
  void apply(const float* x, const int32_t* positions, int64_t tokens, float* out,
             ThreadPool* pool) const;

 private:
  int64_t num_heads_;
  int64_t head_dim_;
  int64_t rotary_dim_;
  int64_t rotary_offset_;
  bool interleaved_;
  std::vector<double> inv_freq_;  // [rotary_dim / 2]
  double attention_factor_;
};

}  // namespace mg
