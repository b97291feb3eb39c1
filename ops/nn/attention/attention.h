// op "attention": causal multi-head attention with grouped KV heads (GQA), a per-session KV cache,
// optional sliding window, Llama-4 chunks and GPT-OSS sinks.
//
// Query t at position p (head h, kv head g = h / (H / KV)) sees cached keys j with
//   j <= p,  j > p - W (W = sliding_window > 0),  floor(j / C) == floor(p / C) (C = chunk_size > 0)
// and gives  o = Σ_j P_j v_j,  P_j = exp(s_j) / (Σ_i exp(s_i) + [exp(σ_h)]),  s_j = scale · q·k_j.
#pragma once

#include <cstdint>

#include "proto/model.pb.h"

namespace mg {

// Reference: fp64 loops over an explicit key/value history.
//   q [tokens, H * D] at `positions` [tokens]; k_seq [seq_len, KV * D] and v_seq [seq_len, KV * Dv]
//   hold the key and value of every position 0..seq_len-1 (every position < seq_len);
//   sinks [H] or null; out [tokens, H * Dv].
void attention_reference(const proto::AttentionParams& params, const float* q,
                         const int32_t* positions, int64_t tokens, const float* k_seq,
                         const float* v_seq, int64_t seq_len, const float* sinks, float* out);

}  // namespace mg
