// The list of built-in ops. Each op folder defines one register_* function; a program adds them
// all to the framework's registry once, before it loads or compiles a graph:
//
//   mg::register_builtin_ops(mg::OpRegistry::global());
//
// The framework never calls this itself: it must not depend on the ops (docs/architecture.md,
// "Layering"), and static-initialiser registration from a static library would be dropped by the
// linker.
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
void register_add_rms_norm(OpRegistry& registry);
void register_qk_norm_rope(OpRegistry& registry);
void register_moe(OpRegistry& registry);
void register_concat_heads(OpRegistry& registry);
void register_clamp(OpRegistry& registry);
void register_attn_temperature(OpRegistry& registry);

// Adds every op above. Calling it again on a registry that already holds them does nothing, so
// entry points and test fixtures may both call it.
void register_builtin_ops(OpRegistry& registry);

}  // namespace mg
