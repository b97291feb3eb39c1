#include <vector>

#include "ops/nn/qk_norm_rope/qk_norm_rope.h"
#include "ops/nn/rms_norm/rms_norm.h"
#include "ops/nn/rope/rope.h"

namespace mg {

proto::RopeParams qk_norm_rope_k_rope(const proto::QkNormRopeParams& params) {
  proto::RopeParams k = params.rope();
  k.set_num_heads(params.num_kv_heads());
  return k;
}

void qk_norm_rope_reference(const proto::QkNormRopeParams& params, const float* q, const float* k,
                            const int32_t* positions, int64_t tokens, const float* q_weight,
                            const float* k_weight, float* q_out, float* k_out) {
  const int64_t head_dim = params.rope().head_dim();
  auto one = [&](const proto::RopeParams& rope, bool has_norm, const proto::RmsNormParams& norm,
                 const float* x, const float* weight, float* out) {
    if (!has_norm) {
      rope_reference(rope, x, positions, tokens, out);
      return;
    }
    const int64_t width = rope.num_heads() * head_dim;
    std::vector<float> normed(static_cast<size_t>(tokens * width));
    rms_norm_reference(x, tokens, width, head_dim, weight, norm.eps(), normed.data());
    rope_reference(rope, normed.data(), positions, tokens, out);
  };
  one(params.rope(), params.has_q_norm(), params.q_norm(), q, q_weight, q_out);
  one(qk_norm_rope_k_rope(params), params.has_k_norm(), params.k_norm(), k, k_weight, k_out);
}

}  // namespace mg
