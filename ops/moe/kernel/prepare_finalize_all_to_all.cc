#include "ops/moe/kernel/prepare_finalize_all_to_all.h"

#include <algorithm>
#include <cstring>

#include "framework/parallel/communicator.h"

namespace mg {

namespace {

// all_to_allv, or a copy for a group of one.
void exchange(const MoEExecContext& ctx, const void* send, std::span<const int64_t> send_counts,
              void* recv, std::span<const int64_t> recv_counts, DType dtype) {
  if (ctx.comm != nullptr) {
    ctx.comm->all_to_allv(send, send_counts, recv, recv_counts, dtype, ctx.stream);
  } else if (send_counts[0] > 0) {
    std::memcpy(recv, send, static_cast<size_t>(send_counts[0]) * dtype_size(dtype));
  }
}

}  // namespace

// Kept in the workspace between prepare() and finalize().
struct PrepareFinalizeAllToAll::State {
  int64_t num_tokens;
  const float* topk_weights;  // [M, k] (ones for weight-on-input routing)
  int64_t* send_counts;       // [ep] pairs to each rank
  int64_t* recv_counts;       // [ep] pairs from each rank
  int64_t* send_elems;        // [ep] send_counts * H
  int64_t* recv_elems;        // [ep] recv_counts * H
  int32_t* pair_position;     // [M k] row of pair (t, j) in the send buffer
  int32_t* recv_slot;         // [R] slab row of each received row
  float* back;                // [R, H] output rows to send back, in arrival order
  float* returned;            // [M k, H] output rows come back, in send order
  int64_t received;           // R actually received
};

// Every array of one call, carved in one place for sizing and for use. M tokens on this rank,
// at most M_max on any rank.
struct PrepareFinalizeAllToAll::Buffers {
  State* state;
  int32_t* fill;               // [ep] or [E_local]
  float* send_x;               // [M k, H]
  int32_t* send_meta;          // [M k]
  float* recv_x;               // [R, H]
  int32_t* recv_meta;          // [R]
  float* slabs;                // [E_local T, H]
  int32_t* expert_num_tokens;  // [E_local]
  float* slab_out;             // [E_local T, H]

  Buffers(Workspace& ws, const ExpertsShape& s, int ep, int64_t M_max) {
    const int64_t k = s.top_k, H = s.hidden_size, E = s.num_local_experts();
    const int64_t T = ep * M_max;
    const int64_t R = ep * M_max * std::min(k, E);
    state = ws.take<State>(1);
    int64_t* counts = ws.take<int64_t>(4 * ep);
    int32_t* pair_position = ws.take<int32_t>(M_max * k);
    int32_t* recv_slot = ws.take<int32_t>(R);
    float* back = ws.take<float>(R * H);
    float* returned = ws.take<float>(M_max * k * H);
    fill = ws.take<int32_t>(ep);
    send_x = ws.take<float>(M_max * k * H);
    send_meta = ws.take<int32_t>(M_max * k);
    recv_x = ws.take<float>(R * H);
    recv_meta = ws.take<int32_t>(R);
    slabs = ws.take<float>(E * T * H);
    expert_num_tokens = ws.take<int32_t>(E);
    slab_out = ws.take<float>(E * T * H);
    if (ws.is_sizing()) return;
    *state = State{0,
                   nullptr,
                   counts,
                   counts + ep,
                   counts + 2 * ep,
                   counts + 3 * ep,
                   pair_position,
                   recv_slot,
                   back,
                   returned,
                   0};
  }
};

size_t PrepareFinalizeAllToAll::workspace_bytes(int64_t max_tokens, bool monolithic) const {
  MG_ASSERT(!monolithic, "all_to_all has no monolithic path");
  Workspace ws = Workspace::sizing();
  Buffers(ws, shape_, ep_size_, max_tokens);
  PrepareArgs args;
  args.num_tokens = max_tokens;
  scale_input_by_weight(args, ws, MoEExecContext{});
  return ws.bytes();
}

DispatchedTokens PrepareFinalizeAllToAll::prepare(const PrepareArgs& in, Workspace& ws,
                                                  const MoEExecContext& ctx) {
  const int ep = ep_size_;
  MG_ASSERT(ctx.comm == nullptr ? ep == 1 : ctx.comm->size() == ep,
            "all_to_all prepare/finalize needs the EP group ({} ranks)", ep);
  const int64_t M = in.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
  const int64_t E_global = shape_.num_experts, E = shape_.num_local_experts();
  // The slabs hold the most any expert can receive: every rank's tokens of this step.
  int64_t M_max = M;
  if (ctx.comm) ctx.comm->all_reduce(&M_max, 1, DType::kI64, ReduceOp::kMax, ctx.stream);
  Buffers b(ws, shape_, ep, M_max);
  State& s = *b.state;
  const PrepareArgs args = scale_input_by_weight(in, ws, ctx);
  s.num_tokens = M;
  s.topk_weights = args.topk_weights;

  // Pairs per destination rank, then each pair's row in the send buffer (stable: token, k).
  std::fill(s.send_counts, s.send_counts + ep, 0);
  for (int64_t p = 0; p < M * k; ++p) {
    ++s.send_counts[locate_expert(E_global, ep, args.topk_ids[p]).rank];
  }
  for (int r = 0, offset = 0; r < ep; offset += static_cast<int>(s.send_counts[r]), ++r) {
    b.fill[r] = offset;
  }
  for (int64_t p = 0; p < M * k; ++p) {
    const ExpertLocation loc = locate_expert(E_global, ep, args.topk_ids[p]);
    const int32_t row = b.fill[loc.rank]++;
    s.pair_position[p] = row;
    b.send_meta[row] = loc.local;
    std::copy_n(f32_ptr(args.hidden) + (p / k) * H, H, b.send_x + static_cast<int64_t>(row) * H);
  }

  // Dispatch.
  if (ctx.comm) {
    ctx.comm->all_to_all(s.send_counts, s.recv_counts, 1, DType::kI64, ctx.stream);
  } else {
    s.recv_counts[0] = s.send_counts[0];
  }
  s.received = 0;
  for (int r = 0; r < ep; ++r) {
    s.send_elems[r] = s.send_counts[r] * H;
    s.recv_elems[r] = s.recv_counts[r] * H;
    s.received += s.recv_counts[r];
  }
  const std::span<const int64_t> send_counts(s.send_counts, static_cast<size_t>(ep));
  const std::span<const int64_t> recv_counts(s.recv_counts, static_cast<size_t>(ep));
  exchange(ctx, b.send_meta, send_counts, b.recv_meta, recv_counts, DType::kI32);
  exchange(ctx, b.send_x, {s.send_elems, static_cast<size_t>(ep)}, b.recv_x,
           {s.recv_elems, static_cast<size_t>(ep)}, DType::kF32);

  // Bucket the received rows by local expert, in arrival order.
  const int64_t T = ep * M_max;
  std::fill(b.expert_num_tokens, b.expert_num_tokens + E, 0);
  for (int64_t i = 0; i < s.received; ++i) {
    const int32_t e = b.recv_meta[i];
    MG_ASSERT(e >= 0 && e < E && b.expert_num_tokens[e] < T, "all_to_all: bad row for expert {}",
              e);
    const int64_t slot = e * T + b.expert_num_tokens[e]++;
    s.recv_slot[i] = static_cast<int32_t>(slot);
    std::copy_n(b.recv_x + i * H, H, b.slabs + slot * H);
  }

  DispatchedTokens t;
  t.format = ActivationFormat::kBatched;
  t.hidden = b.slabs;
  t.expert_num_tokens = b.expert_num_tokens;
  t.max_tokens_per_expert = T;
  t.expert_output = b.slab_out;
  t.finalize_state = &s;
  return t;
}

void PrepareFinalizeAllToAll::finalize(const DispatchedTokens& t, void* out,
                                       const MoEExecContext& ctx) {
  const State& s = *static_cast<const State*>(t.finalize_state);
  const int64_t H = shape_.hidden_size, k = shape_.top_k;
  const size_t ep = static_cast<size_t>(ep_size_);
  for (int64_t i = 0; i < s.received; ++i) {
    std::copy_n(f32_ptr(t.expert_output) + static_cast<int64_t>(s.recv_slot[i]) * H, H,
                s.back + i * H);
  }
  // Combine: the inverse exchange (what came from rank r goes back to rank r).
  exchange(ctx, s.back, {s.recv_elems, ep}, s.returned, {s.send_elems, ep}, DType::kF32);
  for (int64_t tok = 0; tok < s.num_tokens; ++tok) {
    float* o = f32_ptr(out) + tok * H;
    std::fill(o, o + H, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float w = s.topk_weights[tok * k + j];
      const float* row = s.returned + static_cast<int64_t>(s.pair_position[tok * k + j]) * H;
      for (int64_t h = 0; h < H; ++h) o[h] += w * row[h];
    }
  }
}

DispatchedLogits PrepareFinalizeAllToAll::prepare_monolithic(const PrepareArgs&, Workspace&,
                                                             const MoEExecContext&) {
  MG_ASSERT(false, "all_to_all has no monolithic path");
  return {};
}

void PrepareFinalizeAllToAll::finalize_monolithic(const DispatchedLogits&, void*,
                                                  const MoEExecContext&) {
  MG_ASSERT(false, "all_to_all has no monolithic path");
}

}  // namespace mg
