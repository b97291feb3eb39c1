#include "ops/builtin_ops.h"

#include "framework/op/op_registry.h"

namespace mg {

void register_builtin_ops(OpRegistry& registry) {
  // The ops go in together, so one of them present means all are.
  if (registry.find("embedding") != nullptr) return;
  register_embedding(registry);
  register_rms_norm(registry);
  register_linear(registry);
  register_rope(registry);
  register_attention(registry);
  register_gated_mlp(registry);
  register_add(registry);
  register_add_rms_norm(registry);
  register_qk_norm_rope(registry);
  register_moe(registry);
  register_concat_heads(registry);
  register_clamp(registry);
  register_attn_temperature(registry);
}

}  // namespace mg
