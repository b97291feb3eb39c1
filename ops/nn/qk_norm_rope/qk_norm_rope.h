// op "qk_norm_rope" (params: QkNormRopeParams): the per-head RMSNorm of q and of k followed by
// RoPE of both, as one op:
//   q_out = rope(rms_norm(q, q_norm)),  k_out = rope(rms_norm(k, k_norm))
// with every head normalised on its own (Qwen3-MoE's q_norm / k_norm, weight [head_dim]); a norm
// left unset is left out (q_out = rope(q)).
// The fuse-ops compile pass (framework/compile/fuse_ops.h) writes it in place of the importer's
// rms_norm -> rope chains of q and k (qk_norm_rope_fusion.cc): four launches of a decode step's
// layer become one, and the normed q and k no longer round-trip through memory. Where q and k
// have no norm (GPT-OSS, Mixtral, Qwen2-MoE, Granite, ...) it replaces their two ropes: the rope
// kernel runs one block per token, a chain of every head in turn, where this one spreads the
// heads over blocks (a GPT-OSS decode token's 64 + 8 heads: 18 blocks, not two launches of one).
// Both devices compute what the two ops did: the CPU kernel runs rms_norm's and rope's own loops
// (rms_norm_cpu, RopeCpu); the CUDA kernel sums a head in rms_norm's warp order and rounds the
// normed head to the activation dtype before rotating it, as the rope op read it back.
#pragma once

#include <cstdint>

#include "proto/model.pb.h"

namespace mg {

// Largest head_dim the op takes: the size up to which rms_norm gives a group one warp (its CUDA
// warp kernel), the layout the fused kernel repeats. The rewrite leaves larger heads unfused.
inline constexpr int64_t kQkNormRopeMaxHeadDim = 1024;

// The graph rewrites (qk_norm_rope_fusion.cc); each returns how many q/k pairs it fused.
// fuse_qk_norm_rope: per-head rms_norm -> rope chains of q and k.
int fuse_qk_norm_rope(proto::Model& model);
// fuse_qk_rope: the ropes of q and k where no norm precedes them (both norms left unset), run
// after fuse_qk_norm_rope.
int fuse_qk_rope(proto::Model& model);

// The RoPE params of k: the op's rope with num_kv_heads heads.
proto::RopeParams qk_norm_rope_k_rope(const proto::QkNormRopeParams& params);

// Reference: rms_norm_reference (where the norm is set) then rope_reference (fp64 loops), for q
// and for k.
// q, q_out [tokens, rope.num_heads * head_dim]; k, k_out [tokens, num_kv_heads * head_dim];
// positions [tokens]; weights [head_dim] or null.
void qk_norm_rope_reference(const proto::QkNormRopeParams& params, const float* q, const float* k,
                            const int32_t* positions, int64_t tokens, const float* q_weight,
                            const float* k_weight, float* q_out, float* k_out);

}  // namespace mg
