// The list of built-in ops. Each op folder defines one register_* function.
#pragma once

namespace mg {

class OpRegistry;

void register_embedding(OpRegistry& registry);
void register_rms_norm(OpRegistry& registry);
void register_linear(OpRegistry& registry);
void register_rope(OpRegistry& registry);
void register_attention(OpRegistry& registry);
void register_gated_mlp(OpRegistry& registry);
void register_add(OpRegistry& registry);
void register_moe(OpRegistry& registry);
void register_concat_heads(OpRegistry& registry);
void register_clamp(OpRegistry& registry);
void register_attn_temperature(OpRegistry& registry);

inline void register_all_ops(OpRegistry& registry) {
  register_embedding(registry);
  register_rms_norm(registry);
  register_linear(registry);
  register_rope(registry);
  register_attention(registry);
  register_gated_mlp(registry);
  register_add(registry);
  register_moe(registry);
  register_concat_heads(registry);
  register_clamp(registry);
  register_attn_temperature(registry);
}

}  // namespace mg
