#include "ops/moe/experts/cpu_eigen_experts.h"

#include <algorithm>

#include "ops/moe/experts/cpu_checks.h"
#include "ops/moe/experts/cpu_expert_mlp.h"

namespace mg {

namespace {

constexpr int64_t kBlockRows = 32;

// Scratch of one apply() with at most `max_tokens` tokens (M k expanded rows).
struct Scratch {
  int32_t* expert_offsets;        // [E_local + 1]
  int32_t* fill;                  // [E_local]
  int32_t* expanded_to_permuted;  // [M k]
  int32_t* permuted_to_expanded;  // [M k]
  int32_t* block_expert;          // [max_blocks]
  int32_t* block_begin;           // [max_blocks]
  float* permuted;                // [M k, H]: x rows, then y rows
  float* h1;                      // [M k, N1]
  float* act;                     // [M k, I]

  Scratch(Workspace& ws, const ExpertsShape& s, int64_t max_tokens) {
    const int64_t rows = max_tokens * s.top_k, E = s.num_local_experts();
    expert_offsets = ws.take<int32_t>(E + 1);
    fill = ws.take<int32_t>(E);
    expanded_to_permuted = ws.take<int32_t>(rows);
    permuted_to_expanded = ws.take<int32_t>(rows);
    block_expert = ws.take<int32_t>(rows / kBlockRows + E + 1);
    block_begin = ws.take<int32_t>(rows / kBlockRows + E + 1);
    permuted = ws.take<float>(rows * s.hidden_size);
    h1 = ws.take<float>(rows * s.w13_rows());
    act = ws.take<float>(rows * s.intermediate_size);
  }
};

// Stage 1. Returns the number of permuted rows P.
int64_t build_expert_offsets(const ExpertsShape& s, const int32_t* topk_ids, int64_t M,
                             Scratch& sc) {
  const int64_t E = s.num_local_experts(), k = s.top_k, rows = M * k;
  const int32_t* to_local = s.expert_map.global_to_local.data();
  for (int64_t e = 0; e < E; ++e) sc.fill[e] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t id = topk_ids[r];
    MG_ASSERT(id >= 0 && id < s.num_experts, "expert id {} out of range", id);
    const int32_t e = to_local[id];
    if (e >= 0) ++sc.fill[e];
  }
  sc.expert_offsets[0] = 0;
  for (int64_t e = 0; e < E; ++e) sc.expert_offsets[e + 1] = sc.expert_offsets[e] + sc.fill[e];
  for (int64_t e = 0; e < E; ++e) sc.fill[e] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t e = to_local[topk_ids[r]];
    if (e < 0) {
      sc.expanded_to_permuted[r] = -1;
      continue;
    }
    const int32_t p = sc.expert_offsets[e] + sc.fill[e]++;
    sc.expanded_to_permuted[r] = p;
    sc.permuted_to_expanded[p] = static_cast<int32_t>(r);
  }
  return sc.expert_offsets[E];
}

// F32 canonical weights.
class F32ExpertMlp final : public CpuExpertMlp {
 public:
  F32ExpertMlp(ExpertsShape shape, CanonicalExpertWeights weights)
      : shape_(std::move(shape)), weights_(std::move(weights)) {
    check_canonical_weights(weights_, shape_);
  }
  void run(int64_t e, float* rows, int64_t n, float* h1, float* act) const override {
    run_expert_mlp(shape_, expert_matrices(weights_, shape_, e), rows, n, h1, act, rows);
  }

 private:
  ExpertsShape shape_;
  CanonicalExpertWeights weights_;
};

class CpuPermutedExperts final : public ExpertsModular {
 public:
  CpuPermutedExperts(const ExpertsBackend& backend, ExpertsShape shape,
                     std::unique_ptr<CpuExpertMlp> mlp)
      : ExpertsModular(backend), shape_(std::move(shape)), mlp_(std::move(mlp)) {}

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedTokens& t, Workspace& ws, const MoEExecContext& ctx) override {
    const ExpertsShape& s = shape_;
    const int64_t M = t.num_tokens, k = s.top_k, H = s.hidden_size;
    const int64_t N1 = s.w13_rows(), I = s.intermediate_size;
    Scratch sc(ws, s, M);
    const int64_t P = build_expert_offsets(s, t.topk_ids, M, sc);

    // Stage 2: permuted [P, H] = x[token of each permuted row].
    cpu_parallel_for(ctx.pool, P, std::max<int64_t>(1, 8192 / H), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const float* src = f32_ptr(t.hidden) + (sc.permuted_to_expanded[p] / k) * H;
        std::copy(src, src + H, sc.permuted + p * H);
      }
    });

    // Stage 3: blocks of up to kBlockRows rows of one expert each.
    int64_t blocks = 0;
    for (int64_t e = 0; e < s.num_local_experts(); ++e) {
      for (int32_t b = sc.expert_offsets[e]; b < sc.expert_offsets[e + 1]; b += kBlockRows) {
        sc.block_expert[blocks] = static_cast<int32_t>(e);
        sc.block_begin[blocks++] = b;
      }
    }
    cpu_parallel_for(ctx.pool, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int32_t e = sc.block_expert[b];
        const int64_t p0 = sc.block_begin[b];
        const int64_t n = std::min<int64_t>(kBlockRows, sc.expert_offsets[e + 1] - p0);
        mlp_->run(e, sc.permuted + p0 * H, n, sc.h1 + p0 * N1, sc.act + p0 * I);
      }
    });

    // Stage 4: out[t] = sum_j w[t, j] y[row of (t, j)], in j order.
    cpu_parallel_for(ctx.pool, M, std::max<int64_t>(1, 4096 / (H * k)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t tok = begin; tok < end; ++tok) {
                         float* out = f32_ptr(t.expert_output) + tok * H;
                         std::fill(out, out + H, 0.0f);
                         for (int64_t j = 0; j < k; ++j) {
                           const int32_t p = sc.expanded_to_permuted[tok * k + j];
                           if (p < 0) continue;
                           const float w = t.topk_weights[tok * k + j];
                           const float* y = sc.permuted + static_cast<int64_t>(p) * H;
                           for (int64_t h = 0; h < H; ++h) out[h] += w * y[h];
                         }
                       }
                     });
  }

 private:
  ExpertsShape shape_;
  std::unique_ptr<CpuExpertMlp> mlp_;
};

class CpuEigenBackend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cpu_eigen"; }
  bool is_monolithic() const override { return false; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cpu_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    return cpu_check_quant(quant);
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_parallel(const ParallelConfig&) const override { return {}; }
  std::string check_shape(const ExpertsShape&) const override { return {}; }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return make_cpu_permuted_experts(
        *this, build.shape, std::make_unique<F32ExpertMlp>(build.shape, std::move(build.weights)));
  }
};

}  // namespace

std::unique_ptr<Experts> make_cpu_permuted_experts(const ExpertsBackend& backend,
                                                   ExpertsShape shape,
                                                   std::unique_ptr<CpuExpertMlp> mlp) {
  return std::make_unique<CpuPermutedExperts>(backend, std::move(shape), std::move(mlp));
}

const ExpertsBackend& cpu_eigen_backend() {
  static const CpuEigenBackend backend;
  return backend;
}

}  // namespace mg
