#include "ops/moe/experts/cpu_batched_experts.h"

#include <algorithm>

#include "ops/moe/experts/cpu_checks.h"
#include "ops/moe/experts/cpu_expert_mlp.h"

namespace mg {

namespace {

constexpr int64_t kBlockRows = 32;

struct Scratch {
  int32_t* block_expert;  // [max_blocks]
  int32_t* block_begin;   // [max_blocks]
  float* h1;              // [E_local T, N1], indexed like the slab rows
  float* act;             // [E_local T, I]

  Scratch(Workspace& ws, const ExpertsShape& s, int64_t max_tokens_per_expert) {
    const int64_t E = s.num_local_experts();
    const int64_t blocks = E * ((max_tokens_per_expert + kBlockRows - 1) / kBlockRows);
    block_expert = ws.take<int32_t>(blocks);
    block_begin = ws.take<int32_t>(blocks);
    h1 = ws.take<float>(E * max_tokens_per_expert * s.w13_rows());
    act = ws.take<float>(E * max_tokens_per_expert * s.intermediate_size);
  }
};

class CpuBatchedExperts final : public ExpertsModular {
 public:
  CpuBatchedExperts(const ExpertsBackend& backend, ExpertsShape shape,
                    CanonicalExpertWeights weights)
      : ExpertsModular(backend), shape_(std::move(shape)), weights_(std::move(weights)) {
    check_canonical_weights(weights_, shape_);
  }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedTokens& t, Workspace& ws, const MoEExecContext& ctx) override {
    MG_ASSERT(t.format == ActivationFormat::kBatched, "cpu_batched got {} tokens",
              activation_format_name(t.format));
    const ExpertsShape& s = shape_;
    const int64_t T = t.max_tokens_per_expert, H = s.hidden_size;
    const int64_t N1 = s.w13_rows(), I = s.intermediate_size;
    Scratch sc(ws, s, T);
    int64_t blocks = 0;
    for (int64_t e = 0; e < s.num_local_experts(); ++e) {
      MG_ASSERT(t.expert_num_tokens[e] >= 0 && t.expert_num_tokens[e] <= T,
                "expert {} has {} tokens in a slab of {}", e, t.expert_num_tokens[e], T);
      for (int32_t r = 0; r < t.expert_num_tokens[e]; r += kBlockRows) {
        sc.block_expert[blocks] = static_cast<int32_t>(e);
        sc.block_begin[blocks++] = r;
      }
    }
    cpu_parallel_for(ctx.pool, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t e = sc.block_expert[b], r0 = sc.block_begin[b];
        const int64_t n = std::min<int64_t>(kBlockRows, t.expert_num_tokens[e] - r0);
        const int64_t row = e * T + r0;
        run_expert_mlp(s, expert_matrices(weights_, s, e), f32_ptr(t.hidden) + row * H, n,
                       sc.h1 + row * N1, sc.act + row * I, f32_ptr(t.expert_output) + row * H);
      }
    });
  }

 private:
  ExpertsShape shape_;
  CanonicalExpertWeights weights_;
};

class CpuBatchedBackend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cpu_batched"; }
  bool is_monolithic() const override { return false; }
  ActivationFormat activation_format() const override { return ActivationFormat::kBatched; }
  std::string check_device(Device device) const override { return cpu_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    return cpu_check_quant(quant);
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_parallel(const ParallelConfig&) const override { return {}; }
  std::string check_shape(const ExpertsShape&) const override { return {}; }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CpuBatchedExperts>(*this, build.shape, std::move(build.weights));
  }
};

}  // namespace

const ExpertsBackend& cpu_batched_backend() {
  static const CpuBatchedBackend backend;
  return backend;
}

}  // namespace mg
