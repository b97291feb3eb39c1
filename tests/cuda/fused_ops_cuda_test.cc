// The fused ops on the GPU: add_rms_norm's kernel against the fp64 reference in every dtype
// (rows of up to 1024 take a warp, longer rows a block; odd and prime widths; 1..8 rows and many);
// qk_norm_rope's kernel against the CPU op and against the unfused rms_norm -> rope kernels on
// the GPU (odd head counts, GQA, head_dim 64/80/128 and small heads, partial rotary, both
// pairings, YaRN, 1 to 300 tokens) and its grid of head groups against the one block per token
// it had before (bit for bit, any group size, eager and graph-replayed); and whole models compiled
// with the fuse-ops pass on and off giving the same logits on the device (the fused kernels repeat
// the unfused kernels' rounding and reduction order).
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/import/hf_importer.h"
#include "framework/runtime/session.h"
#include "ops/nn/add_rms_norm/add_rms_norm.h"
#include "ops/nn/qk_norm_rope/qk_norm_rope.h"
#include "ops/nn/rope/rope.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/session_logits.h"

#ifdef MG_WITH_CUDA
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/qk_norm_rope/qk_norm_rope_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

TEST(CudaFusedOps, AddRmsNormMatchesTheReferenceInEveryDtype) {
  MG_REQUIRE_GPU();
  struct Dims {
    int64_t rows, dim;
  };
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const Dims s : {Dims{1, 1}, Dims{1, 7}, Dims{3, 33}, Dims{2, 1024}, Dims{6, 1025},
                         Dims{8, 2048}, Dims{5, 4099}, Dims{300, 131}, Dims{4, 2047}}) {
      for (const bool weight : {true, false}) {
        SCOPED_TRACE(
            fmt::format("{} rows x {}, {}, weight {}", s.rows, s.dim, dtype_name(d.dtype), weight));
        proto::Node node;
        node.set_name("add+norm");
        node.set_op("add_rms_norm");
        node.mutable_rms_norm()->set_eps(1e-5f);
        node.mutable_rms_norm()->set_has_weight(weight);
        const uint32_t seed = static_cast<uint32_t>(s.rows * 977 + s.dim);
        const Tensor a = testing::round_through(
            testing::random_tensor({s.rows, s.dim}, seed, -3.0f, 2.0f), d.dtype);
        const Tensor b = testing::round_through(
            testing::random_tensor({s.rows, s.dim}, seed + 1, -1.0f, 1.0f), d.dtype);
        const Tensor w =
            testing::round_through(testing::random_tensor({s.dim}, seed + 2, 0.5f, 1.5f), d.dtype);
        std::vector<Tensor> inputs = {a, b};
        if (weight) inputs.push_back(w);
        testing::DeviceOp op(node, inputs, d.dtype);
        const std::vector<Tensor> out = op.run(inputs);
        ASSERT_EQ(out.size(), 2u);
        std::vector<float> sum(static_cast<size_t>(s.rows * s.dim)), y(sum.size());
        add_rms_norm_reference(a.data<float>(), b.data<float>(), 1.0f, s.rows, s.dim,
                               weight ? w.data<float>() : nullptr, 1e-5f, sum.data(), y.data());
        const auto span_of = [](const Tensor& t) {
          return std::span<const float>(t.data<float>(), static_cast<size_t>(t.numel()));
        };
        EXPECT_LE(testing::normalized_error(span_of(out[0]), sum), d.tolerance);
        EXPECT_LE(testing::normalized_error(span_of(out[1]), y), d.tolerance);
      }
    }
  }
}

struct QkConfig {
  const char* name;
  int64_t q_heads, k_heads, head_dim, rotary_dim;
  proto::RopePairing pairing;
  bool yarn;
};

proto::QkNormRopeParams qk_params(const QkConfig& c, bool weights) {
  proto::QkNormRopeParams p;
  proto::RopeParams* rope = p.mutable_rope();
  rope->set_num_heads(c.q_heads);
  rope->set_head_dim(c.head_dim);
  rope->set_rotary_dim(c.rotary_dim);
  rope->set_pairing(c.pairing);
  rope->set_theta(1e6);
  if (c.yarn) {
    rope->mutable_scaling()->set_type(proto::RopeScaling::YARN);
    rope->mutable_scaling()->set_factor(4.0);
    rope->mutable_scaling()->set_original_max_position(4096);
  }
  p.set_num_kv_heads(c.k_heads);
  for (proto::RmsNormParams* n : {p.mutable_q_norm(), p.mutable_k_norm()}) {
    n->set_eps(1e-6f);
    n->set_group_size(c.head_dim);
    n->set_has_weight(weights);
  }
  return p;
}

// How a QkNormRopeParams' norms are set in the tests: both with weights, both without, or unset
// (the ropes of q and k alone).
enum class Norms { kWeights, kNoWeights, kNone };

const char* norms_name(Norms n) {
  return n == Norms::kWeights ? "norms with weights"
                              : (n == Norms::kNoWeights ? "norms without weights" : "no norms");
}

proto::QkNormRopeParams qk_params(const QkConfig& c, Norms norms) {
  proto::QkNormRopeParams p = qk_params(c, norms == Norms::kWeights);
  if (norms == Norms::kNone) {
    p.clear_q_norm();
    p.clear_k_norm();
  }
  return p;
}

// rope of one tensor through the rope op's CUDA kernel.
Tensor rope_on_gpu(const proto::RopeParams& rope, const Tensor& x, const Tensor& positions,
                   DType dtype) {
  proto::Node r;
  r.set_name("rope");
  r.set_op("rope");
  *r.mutable_rope() = rope;
  const std::vector<Tensor> rope_inputs = {x, positions};
  return testing::DeviceOp(r, rope_inputs, dtype).run(rope_inputs).at(0);
}

// rms_norm then rope of one tensor through the two ops' CUDA kernels (the normed tensor comes
// back to the host as the dtype's values, so uploading it again is exact); the rope alone where
// the norm is unset (`has_norm` false).
Tensor unfused_on_gpu(bool has_norm, const proto::RmsNormParams& norm,
                      const proto::RopeParams& rope, const Tensor& x, const Tensor& weight,
                      const Tensor& positions, DType dtype) {
  if (!has_norm) return rope_on_gpu(rope, x, positions, dtype);
  proto::Node n;
  n.set_name("norm");
  n.set_op("rms_norm");
  *n.mutable_rms_norm() = norm;
  const std::vector<Tensor> norm_inputs = {x, weight};
  const Tensor normed = testing::DeviceOp(n, norm_inputs, dtype).run(norm_inputs).at(0);
  return rope_on_gpu(rope, normed, positions, dtype);
}

TEST(CudaFusedOps, QkNormRopeMatchesTheCpuOpAndTheUnfusedKernels) {
  MG_REQUIRE_GPU();
  const QkConfig configs[] = {
      {"qwen3-30b-a3b", 32, 4, 128, 0, proto::HALF_SPLIT, false},
      {"odd heads", 5, 3, 64, 0, proto::HALF_SPLIT, false},
      {"head80 partial", 7, 1, 80, 32, proto::HALF_SPLIT, false},
      {"interleaved yarn", 9, 3, 64, 0, proto::INTERLEAVED, true},
      {"small heads", 3, 1, 6, 0, proto::HALF_SPLIT, false},  // the qwen3_moe_odd fixture's
      {"one head of 1024", 1, 1, 1024, 0, proto::HALF_SPLIT, false},
      {"odd total heads", 7, 2, 128, 0, proto::HALF_SPLIT, false},  // 9: a group of one left
      {"gpt-oss", 64, 8, 64, 0, proto::HALF_SPLIT, true},
  };
  const auto span_of = [](const Tensor& t) {
    return std::span<const float>(t.data<float>(), static_cast<size_t>(t.numel()));
  };
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const QkConfig& c : configs) {
      for (const int64_t tokens : {1, 37, 300}) {
        for (const Norms norms : {Norms::kWeights, Norms::kNoWeights, Norms::kNone}) {
          SCOPED_TRACE(
              fmt::format("{} T={} {} {}", c.name, tokens, dtype_name(d.dtype), norms_name(norms)));
          const bool weights = norms == Norms::kWeights;
          const proto::QkNormRopeParams p = qk_params(c, norms);
          proto::Node node;
          node.set_name("qk");
          node.set_op("qk_norm_rope");
          *node.mutable_qk_norm_rope() = p;
          const uint32_t seed = static_cast<uint32_t>(tokens * 977 + c.q_heads * 31 + c.head_dim);
          auto rounded = [&](Shape shape, uint32_t s, float lo, float hi) {
            return testing::round_through(testing::random_tensor(std::move(shape), s, lo, hi),
                                          d.dtype);
          };
          const Tensor q = rounded({tokens, c.q_heads * c.head_dim}, seed, -3.0f, 2.0f);
          const Tensor k = rounded({tokens, c.k_heads * c.head_dim}, seed + 1, -1.0f, 1.0f);
          const Tensor qw = weights ? rounded({c.head_dim}, seed + 2, 0.5f, 1.5f) : Tensor();
          const Tensor kw = weights ? rounded({c.head_dim}, seed + 3, 0.5f, 1.5f) : Tensor();
          Tensor positions = Tensor::empty_cpu(DType::kI32, {tokens});
          for (int64_t t = 0; t < tokens; ++t) {
            positions.data<int32_t>()[t] = static_cast<int32_t>((t * 7919 + seed) % 131072);
          }
          const std::vector<Tensor> inputs = {q, k, positions, qw, kw};
          const std::vector<Tensor> gpu = testing::DeviceOp(node, inputs, d.dtype).run(inputs);
          ASSERT_EQ(gpu.size(), 2u);
          const std::vector<Tensor> cpu = testing::run_cpu_op(node, inputs);
          EXPECT_LE(testing::normalized_error(span_of(gpu[0]), span_of(cpu[0])), d.tolerance);
          EXPECT_LE(testing::normalized_error(span_of(gpu[1]), span_of(cpu[1])), d.tolerance);
          // The unfused kernels' reduction order and rounding: the same values. (A bound
          // rather than equality only because nvcc may contract the two kernels' float
          // expressions differently; in practice the error is 0.)
          const Tensor q_unfused =
              unfused_on_gpu(p.has_q_norm(), p.q_norm(), p.rope(), q, qw, positions, d.dtype);
          const Tensor k_unfused = unfused_on_gpu(
              p.has_k_norm(), p.k_norm(), qk_norm_rope_k_rope(p), k, kw, positions, d.dtype);
          EXPECT_LE(testing::normalized_error(span_of(gpu[0]), span_of(q_unfused)), 1e-6);
          EXPECT_LE(testing::normalized_error(span_of(gpu[1]), span_of(k_unfused)), 1e-6);
        }
      }
    }
  }
}

// The launcher called directly: q and k of `tokens` rows normed (as `norms` says) and rotated with
// `heads_per_block` heads per block (0: the rule); returns the bytes of q_out then k_out (graph
// replay checked equal to the eager run).
std::vector<uint8_t> qk_norm_rope_bytes(const proto::QkNormRopeParams& p, DType dtype,
                                        int64_t tokens, int64_t heads_per_block, Norms norms) {
  const bool weights = norms == Norms::kWeights;
  const int64_t q_heads = p.rope().num_heads(), k_heads = p.num_kv_heads();
  const int64_t d = p.rope().head_dim();
  const uint32_t seed = static_cast<uint32_t>(tokens * 131 + q_heads * 7 + d);
  const auto device_of = [&](const Tensor& host) {
    const Tensor cast = cast_cpu(host, dtype);
    auto buffer = std::make_unique<testing::DeviceBuffer>(cast.nbytes());
    buffer->upload(cast.raw(), cast.nbytes());
    return buffer;
  };
  const auto q = device_of(testing::random_tensor({tokens, q_heads * d}, seed, -3.0f, 2.0f));
  const auto k = device_of(testing::random_tensor({tokens, k_heads * d}, seed + 1, -1.0f, 1.0f));
  const auto qw = device_of(testing::random_tensor({d}, seed + 2, 0.5f, 1.5f));
  const auto kw = device_of(testing::random_tensor({d}, seed + 3, 0.5f, 1.5f));
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    positions[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + seed) % 131072);
  }
  testing::DeviceBuffer positions_device(positions.size() * sizeof(int32_t));
  positions_device.upload(positions.data(), positions.size() * sizeof(int32_t));
  const std::vector<double> inv_freq = rope_inv_freq(p.rope());
  testing::DeviceBuffer inv_freq_device(inv_freq.size() * sizeof(double));
  inv_freq_device.upload(inv_freq.data(), inv_freq.size() * sizeof(double));
  const size_t q_bytes = static_cast<size_t>(tokens * q_heads * d) * dtype_size(dtype);
  const size_t k_bytes = static_cast<size_t>(tokens * k_heads * d) * dtype_size(dtype);
  testing::DeviceBuffer out(q_bytes + k_bytes);

  cuda::QkNormRopeArgs a;
  a.q = q->as<void>();
  a.k = k->as<void>();
  a.q_weight = weights ? qw->as<void>() : nullptr;
  a.k_weight = weights ? kw->as<void>() : nullptr;
  a.q_out = out.as<uint8_t>();
  a.k_out = out.as<uint8_t>() + q_bytes;
  a.positions = positions_device.as<int32_t>();
  a.inv_freq = inv_freq_device.as<double>();
  a.tokens = tokens;
  a.q_heads = q_heads;
  a.k_heads = k_heads;
  a.head_dim = d;
  a.rotary_dim = rope_rotary_dim(p.rope());
  a.interleaved = p.rope().pairing() == proto::INTERLEAVED;
  a.attention_factor = rope_attention_factor(p.rope());
  a.q_norm = a.k_norm = norms != Norms::kNone;
  a.q_eps = p.q_norm().eps();
  a.k_eps = p.k_norm().eps();
  a.heads_per_block = heads_per_block;
  return testing::run_eager_and_graph(
      [&](cudaStream_t stream) {
        cuda::dispatch_float_dtype(
            dtype, [&](auto tag) { cuda::launch_qk_norm_rope<decltype(tag)>(a, stream); });
      },
      out, q_bytes + k_bytes);
}

// The grid of (token, head group) blocks computes each head exactly as the one block per token
// of before (a group of every head), so the bytes are the same at any group size: the rule's,
// one head per block and groups that leave a short last one.
TEST(CudaFusedOps, QkNormRopeHeadGroupsGiveTheOneBlockPerTokenBytes) {
  MG_REQUIRE_GPU();
  const QkConfig configs[] = {
      {"qwen3-30b-a3b", 32, 4, 128, 0, proto::HALF_SPLIT, false},
      {"odd total heads", 7, 2, 128, 0, proto::HALF_SPLIT, false},
      {"head80 partial", 7, 1, 80, 32, proto::HALF_SPLIT, false},
      {"interleaved yarn", 9, 3, 64, 0, proto::INTERLEAVED, true},
      {"small heads", 3, 1, 6, 0, proto::HALF_SPLIT, false},
  };
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const QkConfig& c : configs) {
      const proto::QkNormRopeParams p = qk_params(c, true);
      const int64_t heads = c.q_heads + c.k_heads;
      for (const int64_t tokens : {1, 300}) {
        for (const Norms norms : {Norms::kWeights, Norms::kNoWeights, Norms::kNone}) {
          SCOPED_TRACE(
              fmt::format("{} T={} {} {}", c.name, tokens, dtype_name(d.dtype), norms_name(norms)));
          const std::vector<uint8_t> one_block_per_token =
              qk_norm_rope_bytes(p, d.dtype, tokens, heads, norms);
          for (const int64_t group : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}}) {
            SCOPED_TRACE(fmt::format("heads per block {} (0: the rule)", group));
            EXPECT_TRUE(qk_norm_rope_bytes(p, d.dtype, tokens, group, norms) ==
                        one_block_per_token);
          }
        }
      }
    }
  }
}

std::shared_ptr<const ExecutionPlan> compile_for_gpu(const std::filesystem::path& model,
                                                     DType dtype, bool fuse) {
  CompileOptions options;
  options.fuse_ops = fuse;
  options.device = Device::cuda(0);
  options.activation_dtype = dtype;
  options.max_tokens = 64;
  if (model.extension() == ".pbtxt") return compile_graph_file(model, options);
  HfImportResult imported = import_hf_checkpoint(model);
  return compile_model(std::move(imported.model), model / "model.pbtxt", options);
}

// Prompt logits, then three one-token decode steps (the GEMV path), concatenated.
std::vector<float> device_logits(std::shared_ptr<const ExecutionPlan> plan, bool cuda_graph) {
  SessionOptions so;
  so.threads = 2;
  so.cuda_graph = cuda_graph;
  Session s(std::move(plan), so);
  return testing::prompt_and_decode_logits(s);
}

TEST(CudaFusedOps, LogitsAreTheSameWithTheFuseOpsPassOnAndOff) {
  MG_REQUIRE_GPU();
  const std::filesystem::path src(MG_SOURCE_DIR);
  for (const auto& model :
       {src / "models/tiny-llama/model.pbtxt", src / "models/tiny-moe/model.pbtxt",
        src / "tests/fixtures/hf/qwen3_moe", src / "tests/fixtures/hf/qwen3_moe_odd",
        // The q/k rope pairs fused without norms (and GPT-OSS's sinks, YaRN and biases).
        src / "tests/fixtures/hf/gpt_oss", src / "tests/fixtures/hf/mixtral_odd"}) {
    for (const DType dtype : {DType::kBF16, DType::kF32}) {
      for (const bool graph : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} cuda_graph {}", model.string(), dtype_name(dtype), graph));
        const std::vector<float> off = device_logits(compile_for_gpu(model, dtype, false), graph);
        const std::vector<float> on = device_logits(compile_for_gpu(model, dtype, true), graph);
        ASSERT_EQ(on.size(), off.size());
        // Same rounding and reduction order as the unfused kernels: equal up to the last bit in
        // practice; the bound leaves room for a reordered float sum without hiding a real bug.
        EXPECT_LE(testing::normalized_error(on, off), 1e-6);
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
