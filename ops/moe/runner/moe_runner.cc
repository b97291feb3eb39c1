#include "ops/moe/runner/moe_runner.h"

#include "framework/device/stream.h"
#include "framework/parallel/communicator.h"

namespace mg {

namespace {

// Joins the side stream back into the main stream when a step ends, however it ends: an experts
// kernel that refuses a batch (it throws) after the shared experts were queued on the side stream
// must not leave them running while the next forward reuses the same workspace on the main
// stream (seen as wrong outputs of the first accepted batch when other processes slowed the GPU).
class SideStreamJoin {
 public:
  SideStreamJoin(const MoERunContext& ctx, bool active) : ctx_(ctx), active_(active) {}
  ~SideStreamJoin() {
    try {
      join();
    } catch (...) {  // already unwinding from the step's error; nothing better to report
    }
  }
  SideStreamJoin(const SideStreamJoin&) = delete;
  SideStreamJoin& operator=(const SideStreamJoin&) = delete;

  void join() {
    if (!active_) return;
    active_ = false;
    ctx_.join->record(*ctx_.side_stream);
    ctx_.join->wait_on(*ctx_.stream);
  }

 private:
  const MoERunContext& ctx_;
  bool active_;
};

}  // namespace

// Per-step arrays of the runner; the kernel's scratch follows in the same workspace.
struct MoERunner::Buffers {
  std::byte* logits;  // [n, E] router.logits_dtype()
  int32_t* ids;       // [n, k]
  float* weights;     // [n, k]
  float* route;       // routing scratch
  std::byte* shared;  // [n, H] activation dtype
  std::byte* blas;    // the gate GEMM's cuBLAS workspace (CUDA)

  Buffers(Workspace& ws, const MoERunner& r, int64_t n) {
    const int64_t E = r.config_.num_experts(), k = r.config_.top_k();
    logits = ws.take<std::byte>(n * E * dtype_size(r.router_->logits_dtype()));
    ids = ws.take<int32_t>(n * k);
    weights = ws.take<float>(n * k);
    route = ws.take<float>(r.router_->route_scratch_floats(n));
    shared = ws.take<std::byte>(r.shared_ ? n * r.config_.hidden_size() * dtype_size(r.dtype_) : 0);
    blas = ws.take<std::byte>(static_cast<int64_t>(r.router_->gate_workspace_bytes()));
  }
};

MoERunner::MoERunner(MoEConfig config, ParallelConfig parallel, std::unique_ptr<Router> router,
                     std::unique_ptr<FusedMoEKernel> kernel, std::unique_ptr<SharedExperts> shared)
    : config_(std::move(config)),
      parallel_(parallel),
      dp_ranks_(parallel.dp_group()),
      tp_ranks_(parallel.tp_group()),
      router_(std::move(router)),
      kernel_(std::move(kernel)),
      shared_(std::move(shared)),
      dtype_(kernel_->prepare_finalize().shape().dtype) {}

size_t MoERunner::step_bytes(int64_t step) const {
  Workspace ws = Workspace::sizing();
  Buffers(ws, *this, step);
  size_t bytes = ws.bytes() + kernel_->workspace_bytes(step);
  if (shared_) bytes += shared_->workspace_bytes(step);
  return bytes;
}

size_t MoERunner::workspace_bytes(int64_t max_tokens) const {
  const int64_t chunk = config_.dp_chunk_size();
  return step_bytes(chunk > 0 ? std::min(chunk, max_tokens) : max_tokens);
}

void MoERunner::forward(const void* x, int64_t M, void* out, void* workspace,
                        size_t workspace_bytes, const MoERunContext& ctx) {
  const ParallelConfig& p = parallel_;
  Communicator* dp_comm = nullptr;
  Communicator* tp_comm = nullptr;
  if (!p.is_single_rank()) {
    MG_CHECK(ctx.comm != nullptr && ctx.comm->size() == p.world_size() &&
                 ctx.comm->rank() == p.world_rank(),
             "MoE node compiled for {} (rank {} of {}) runs with {}", p.str(), p.world_rank(),
             p.world_size(),
             ctx.comm ? fmt::format("rank {} of {}", ctx.comm->rank(), ctx.comm->size())
                      : std::string("no communicator"));
    // Both subgroup calls on every rank, in the same order (they partition the ranks).
    dp_comm = &ctx.comm->subgroup(dp_ranks_);
    tp_comm = &ctx.comm->subgroup(tp_ranks_);
  }
  const int64_t H = config_.hidden_size();
  const int64_t row_bytes = H * dtype_size(dtype_);

  // The step count must be the same on every DP rank.
  int64_t max_dp = M;
  if (p.dp_size() > 1) dp_comm->all_reduce(&max_dp, 1, DType::kI64, ReduceOp::kMax, ctx.stream);
  const int64_t chunk = config_.dp_chunk_size();
  const int64_t step = chunk > 0 ? std::min(chunk, max_dp) : max_dp;
  if (step == 0) return;
  MG_CHECK(step_bytes(step) <= workspace_bytes,
           "MoE node: a step of {} tokens needs {} bytes of workspace, the plan gave {} (was it "
           "planned for fewer tokens than a DP rank now has?)",
           step, step_bytes(step), workspace_bytes);
  const int64_t steps = (max_dp + step - 1) / step;
  const bool has_side = ctx.side_stream != nullptr && shared_ != nullptr;
  const MoEExecContext kctx{ctx.pool, ctx.stream, dp_comm};

  for (int64_t s = 0; s < steps; ++s) {
    const int64_t begin = std::min(s * step, M);
    const int64_t n = std::min(begin + step, M) - begin;
    const void* xs = static_cast<const std::byte*>(x) + begin * row_bytes;
    void* os = static_cast<std::byte*>(out) + begin * row_bytes;
    Workspace ws(workspace, workspace_bytes);
    Buffers b(ws, *this, n);
    // Large steps keep the GPU busy on one stream; the fork/join only pays off when the routed
    // experts leave SMs idle (decode and small prefill chunks).
    const bool side = has_side && n <= ctx.side_stream_max_tokens;

    if (side) {
      ctx.fork->record(*ctx.stream);
      ctx.fork->wait_on(*ctx.side_stream);
    }
    SideStreamJoin side_join(ctx, side);
    const RouterRun rr{ctx.pool, ctx.stream, b.blas, router_->gate_workspace_bytes(),
                       ctx.route_counters};
    // The runner routes for modular kernels, and for monolithic ones that take routed ids when
    // gate + route is one launch (else they route from the logits themselves).
    const bool route_here = !kernel_->is_monolithic() || (kernel_->monolithic_takes_routing() &&
                                                          router_->fuses_route(xs, n, rr));
    if (route_here) {
      router_->gate_and_route(xs, n, b.logits, b.ids, b.weights, b.route, rr);
    } else {
      router_->gate(xs, n, b.logits, rr);
    }
    // On a GPU this is queued on the side stream and overlaps the routed experts; CPU streams
    // run it right here.
    if (shared_) {
      shared_->forward(xs, n, b.shared, ws, ctx.pool, side ? ctx.side_stream : ctx.stream);
    }

    PrepareArgs args;
    args.hidden = xs;
    args.num_tokens = n;
    args.out = os;
    if (route_here) {
      args.topk_ids = b.ids;
      args.topk_weights = b.weights;
    }
    if (kernel_->is_monolithic()) {
      args.router_logits = reinterpret_cast<const float*>(b.logits);  // F32 (router.h)
      kernel_->apply_monolithic(args, ws, kctx);
    } else {
      kernel_->apply(args, ws, kctx);
    }
    side_join.join();

    const bool reduce_tp = p.tp_size() > 1;
    if (shared_ && reduce_tp && kernel_->output_is_reduced()) {
      tp_comm->all_reduce(b.shared, n * H, dtype_, ReduceOp::kSum, ctx.stream);
    }
    if (shared_) shared_->add_output(os, b.shared, n * H, ctx.stream);
    if (reduce_tp && !kernel_->output_is_reduced()) {
      tp_comm->all_reduce(os, n * H, dtype_, ReduceOp::kSum, ctx.stream);
    }
  }
}

}  // namespace mg
