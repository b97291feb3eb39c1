// The CUDA kernels of embedding, rms_norm, linear, rope, add and gated_mlp against their CPU
// references, over the shapes of the CPU op tests, in BF16, F16 and F32. Inputs are random (never
// zero) and rounded through the dtype first, so the reference sees exactly what the kernel sees
// and the error left is the kernel's arithmetic and its output rounding. The ops that only
// imported checkpoints use are in importer_ops_cuda_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "ops/nn/add/add.h"
#include "ops/nn/embedding/embedding.h"
#include "ops/nn/gated_mlp/gated_mlp.h"
#include "ops/nn/linear/linear.h"
#include "ops/nn/rms_norm/rms_norm.h"
#include "ops/nn/rope/rope.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/op_harness.h"
#include "tests/unit/ops/nn_test_util.h"
namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::cuda_dtypes;
using testing::DeviceOp;
using testing::dtype_trace;
using testing::DtypeTolerance;
using testing::round_through;

TEST(CudaOps, EmbeddingMatchesReference) {
  MG_REQUIRE_GPU();
  struct Case {
    int64_t vocab, hidden;
    std::vector<int32_t> ids;
    std::optional<float> scale;
  };
  const std::vector<Case> cases = {
      {1, 1, {0}, std::nullopt},
      {37, 13, {36}, std::nullopt},
      {37, 13, {5, 0, 36, 5, 17}, 2.5f},
      {1000, 129, {999, 3, 3, 512, 0, 1, 77, 400, 401}, 0.125f},
  };
  uint32_t seed = 1100;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(dtype_trace(d) + fmt::format(" V={} H={}", c.vocab, c.hidden));
      proto::Node node;
      node.set_name("embed");
      node.set_op("embedding");
      if (c.scale)
        node.mutable_embedding()->set_scale(*c.scale);
      else
        node.mutable_embedding();
      const Tensor table =
          round_through(testing::random_tensor({c.vocab, c.hidden}, ++seed), d.dtype);
      const Tensor ids = testing::i32_tensor(c.ids);
      DeviceOp op(node, {ids, table}, d.dtype);
      std::vector<Tensor> out = op.run({ids, table});
      ASSERT_EQ(out[0].shape(), (Shape{static_cast<int64_t>(c.ids.size()), c.hidden}));
      std::vector<float> ref(static_cast<size_t>(out[0].numel()));
      embedding_reference(ids.data<int32_t>(), ids.numel(), table.data<float>(), c.vocab, c.hidden,
                          c.scale.value_or(1.0f), ref.data());
      EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), ref), d.tolerance);
    }
  }
}

TEST(CudaOps, EmbeddingWritesNanRowsForIdsOutsideTheVocabulary) {
  MG_REQUIRE_GPU();
  proto::Node node;
  node.set_name("embed");
  node.set_op("embedding");
  node.mutable_embedding();
  const Tensor table = testing::random_tensor({50, 8}, 1);
  DeviceOp op(node, {testing::i32_tensor({1}), table}, DType::kBF16);
  std::vector<Tensor> out = op.run({testing::i32_tensor({3, 50, -7}), table});
  const float* y = out[0].data<float>();
  for (int64_t h = 0; h < 8; ++h) {
    EXPECT_TRUE(std::isfinite(y[h]));
    EXPECT_TRUE(std::isnan(y[8 + h]));
    EXPECT_TRUE(std::isnan(y[16 + h]));
  }
}

TEST(CudaOps, RmsNormMatchesReference) {
  MG_REQUIRE_GPU();
  struct Case {
    int64_t tokens, dim, group;
    bool weight;
  };
  const std::vector<Case> cases = {
      {1, 1, 0, true},      {1, 7, 0, true},       {5, 33, 0, true},   {3, 64, 16, true},
      {3, 64, 16, false},   {1, 4096, 0, true},    {17, 96, 32, true}, {4, 30, 3, false},
      {64, 257, 257, true}, {2, 1024, 128, false}, {3, 2048, 0, true}, {9, 8192, 1024, true},
  };
  uint32_t seed = 1200;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(dtype_trace(d) +
                   fmt::format(" T={} D={} G={} weight={}", c.tokens, c.dim, c.group, c.weight));
      const int64_t group = c.group == 0 ? c.dim : c.group;
      proto::Node node;
      node.set_name("norm");
      node.set_op("rms_norm");
      node.mutable_rms_norm()->set_eps(1e-5f);
      node.mutable_rms_norm()->set_group_size(c.group);
      node.mutable_rms_norm()->set_has_weight(c.weight);
      const Tensor x =
          round_through(testing::random_tensor({c.tokens, c.dim}, ++seed, -3, 2), d.dtype);
      const Tensor w =
          c.weight ? round_through(testing::random_tensor({group}, ++seed, 0.5f, 1.5f), d.dtype)
                   : Tensor();
      std::vector<Tensor> inputs = {x};
      if (c.weight) inputs.push_back(w);
      DeviceOp op(node, inputs, d.dtype);
      std::vector<Tensor> out = op.run(inputs);
      std::vector<float> ref(static_cast<size_t>(x.numel()));
      rms_norm_reference(x.data<float>(), c.tokens, c.dim, group,
                         c.weight ? w.data<float>() : nullptr, 1e-5f, ref.data());
      EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), ref), d.tolerance);
    }
  }
}

TEST(CudaOps, LinearMatchesReference) {
  MG_REQUIRE_GPU();
  struct Case {
    int64_t tokens, in, out;
    bool bias;
    std::optional<float> scale;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, false, std::nullopt},
      {1, 7, 5, true, std::nullopt},
      {1, 64, 257, false, std::nullopt},
      {1, 512, 1000, true, 0.25f},
      {3, 17, 33, true, 2.0f},
      {17, 130, 48, false, std::nullopt},
      {64, 96, 200, true, 0.5f},
      {129, 33, 15, false, 1.5f},
      {1, 4096, 1024, true, std::nullopt},
      {300, 1024, 768, false, std::nullopt},
  };
  uint32_t seed = 1300;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(dtype_trace(d) + fmt::format(" T={} in={} out={} bias={} scale={}", c.tokens,
                                                c.in, c.out, c.bias, c.scale.value_or(1.0f)));
      proto::Node node;
      node.set_name("proj");
      node.set_op("linear");
      node.mutable_linear()->set_has_bias(c.bias);
      if (c.scale) node.mutable_linear()->set_scale(*c.scale);
      const Tensor x = round_through(testing::random_tensor({c.tokens, c.in}, ++seed), d.dtype);
      const Tensor w = round_through(testing::random_tensor({c.out, c.in}, ++seed), d.dtype);
      const float scale = c.scale.value_or(1.0f);
      Tensor b =
          c.bias ? round_through(testing::random_tensor({c.out}, ++seed), d.dtype) : Tensor();
      std::vector<Tensor> inputs = {x, w};
      if (c.bias) inputs.push_back(b);
      DeviceOp op(node, inputs, d.dtype);
      std::vector<Tensor> y = op.run(inputs);
      ASSERT_EQ(y[0].shape(), (Shape{c.tokens, c.out}));
      std::vector<float> ref(static_cast<size_t>(c.tokens * c.out));
      linear_reference(x.data<float>(), c.tokens, c.in, w.data<float>(), c.out,
                       c.bias ? b.data<float>() : nullptr, scale, ref.data());
      EXPECT_LT(testing::normalized_error(testing::span_of(y[0]), ref), d.tolerance);
    }
  }
}

proto::RopeParams rope_params(int64_t heads, int64_t head_dim, proto::RopePairing pairing,
                              double theta = 10000.0) {
  proto::RopeParams p;
  p.set_num_heads(heads);
  p.set_head_dim(head_dim);
  p.set_pairing(pairing);
  p.set_theta(theta);
  return p;
}

// The configurations of the CPU rope test: both pairings, partial and offset rotary dims, and
// every scaling (LINEAR, YaRN as GPT-OSS and DeepSeek use it, Llama 3.1 and Llama 4).
std::vector<proto::RopeParams> rope_configs() {
  std::vector<proto::RopeParams> out;
  out.push_back(rope_params(1, 2, proto::HALF_SPLIT));
  out.push_back(rope_params(3, 8, proto::HALF_SPLIT));
  out.push_back(rope_params(5, 8, proto::INTERLEAVED, 500000.0));
  proto::RopeParams partial = rope_params(4, 24, proto::HALF_SPLIT);
  partial.set_rotary_dim(6);
  out.push_back(partial);
  proto::RopeParams tail = rope_params(2, 24, proto::HALF_SPLIT);
  tail.set_rotary_offset(8);
  tail.set_rotary_dim(16);
  out.push_back(tail);
  proto::RopeParams linear = rope_params(2, 16, proto::HALF_SPLIT);
  linear.mutable_scaling()->set_type(proto::RopeScaling::LINEAR);
  linear.mutable_scaling()->set_factor(4.0);
  out.push_back(linear);
  proto::RopeParams gpt_oss = rope_params(2, 64, proto::HALF_SPLIT, 150000.0);
  auto* y = gpt_oss.mutable_scaling();
  y->set_type(proto::RopeScaling::YARN);
  y->set_factor(32.0);
  y->set_original_max_position(4096);
  y->set_beta_fast(32.0);
  y->set_beta_slow(1.0);
  y->set_truncate(false);
  out.push_back(gpt_oss);
  proto::RopeParams deepseek = rope_params(3, 96, proto::INTERLEAVED, 10000.0);
  deepseek.set_rotary_offset(32);
  deepseek.set_rotary_dim(64);
  auto* ds = deepseek.mutable_scaling();
  ds->set_type(proto::RopeScaling::YARN);
  ds->set_factor(40.0);
  ds->set_original_max_position(4096);
  ds->set_mscale(0.707);
  ds->set_mscale_all_dim(1.0);
  out.push_back(deepseek);
  proto::RopeParams llama31 = rope_params(2, 128, proto::INTERLEAVED, 500000.0);
  auto* l3 = llama31.mutable_scaling();
  l3->set_type(proto::RopeScaling::LLAMA3);
  l3->set_factor(8.0);
  l3->set_original_max_position(8192);
  l3->set_low_freq_factor(1.0);
  l3->set_high_freq_factor(4.0);
  out.push_back(llama31);
  proto::RopeParams scout = llama31;
  scout.mutable_scaling()->set_factor(16.0);
  scout.mutable_scaling()->set_high_freq_factor(1.0);
  out.push_back(scout);
  out.push_back(rope_params(32, 128, proto::HALF_SPLIT, 500000.0));  // a real model's width
  return out;
}

TEST(CudaOps, RopeMatchesReferenceForEveryPairingAndScaling) {
  MG_REQUIRE_GPU();
  uint32_t seed = 1400;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const proto::RopeParams& p : rope_configs()) {
      for (int64_t tokens : {1, 7, 40}) {
        SCOPED_TRACE(dtype_trace(d) + " " + p.ShortDebugString() + fmt::format(" T={}", tokens));
        proto::Node node;
        node.set_name("rope");
        node.set_op("rope");
        *node.mutable_rope() = p;
        const Tensor x = round_through(
            testing::random_tensor({tokens, p.num_heads() * p.head_dim()}, ++seed), d.dtype);
        std::vector<int32_t> pos(static_cast<size_t>(tokens));
        // Decode-like, prefill-like and far positions (angles up to ~1e5 rad).
        for (int64_t t = 0; t < tokens; ++t) {
          pos[t] = static_cast<int32_t>((t * 7919 + seed) % 131072);
        }
        const Tensor positions = testing::i32_tensor(pos);
        DeviceOp op(node, {x, positions}, d.dtype);
        std::vector<Tensor> out = op.run({x, positions});
        std::vector<float> ref(static_cast<size_t>(x.numel()));
        rope_reference(p, x.data<float>(), pos.data(), tokens, ref.data());
        EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), ref), d.tolerance);
      }
    }
  }
}

TEST(CudaOps, AddMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 1500;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (auto [rows, cols, scale] :
         {std::tuple{7, 33, 0.5f}, std::tuple{1, 1, 1.0f}, std::tuple{300, 4096, -2.0f}}) {
      SCOPED_TRACE(dtype_trace(d) + fmt::format(" {}x{} scale {}", rows, cols, scale));
      proto::Node node;
      node.set_name("add0");
      node.set_op("add");
      node.mutable_add()->set_scale(scale);
      const Tensor a = round_through(testing::random_tensor({rows, cols}, ++seed), d.dtype);
      const Tensor b = round_through(testing::random_tensor({rows, cols}, ++seed), d.dtype);
      DeviceOp op(node, {a, b}, d.dtype);
      std::vector<Tensor> out = op.run({a, b});
      std::vector<float> ref(static_cast<size_t>(a.numel()));
      add_reference(a.data<float>(), b.data<float>(), scale, ref.data(), a.numel());
      EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), ref), d.tolerance);
    }
  }
}

TEST(CudaOps, GatedMlpMatchesReference) {
  MG_REQUIRE_GPU();
  struct Case {
    int64_t tokens, hidden, inter;
  };
  // The two larger cases keep fp16 well inside its range (|out| ~ 1e3).
  const std::vector<Case> cases = {{1, 1, 1},    {1, 16, 48},    {5, 33, 17},    {17, 64, 200},
                                   {70, 40, 96}, {1, 512, 1408}, {130, 256, 704}};
  uint32_t seed = 1600;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (proto::Activation act : {proto::SILU_GATED, proto::GELU_GATED, proto::GELU_TANH_GATED}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(dtype_trace(d) + " " + proto::Activation_Name(act) +
                     fmt::format(" T={} H={} I={}", c.tokens, c.hidden, c.inter));
        proto::Node node;
        node.set_name("mlp");
        node.set_op("gated_mlp");
        node.mutable_gated_mlp()->set_activation(act);
        const Tensor x =
            round_through(testing::random_tensor({c.tokens, c.hidden}, ++seed, -2, 2), d.dtype);
        const Tensor gate =
            round_through(testing::random_tensor({c.inter, c.hidden}, ++seed), d.dtype);
        const Tensor up =
            round_through(testing::random_tensor({c.inter, c.hidden}, ++seed), d.dtype);
        const Tensor down =
            round_through(testing::random_tensor({c.hidden, c.inter}, ++seed), d.dtype);
        DeviceOp op(node, {x, gate, up, down}, d.dtype);
        std::vector<Tensor> out = op.run({x, gate, up, down});
        std::vector<float> ref(static_cast<size_t>(x.numel()));
        gated_mlp_reference(act, x.data<float>(), c.tokens, c.hidden, c.inter, gate.data<float>(),
                            up.data<float>(), down.data<float>(), ref.data());
        // bf16/fp16 also round the intermediate h = act(g) * u before the down projection.
        EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), ref), 2 * d.tolerance);
      }
    }
  }
}

TEST(CudaOps, KernelsDescribeTheirDtype) {
  MG_REQUIRE_GPU();
  proto::Node node;
  node.set_name("proj");
  node.set_op("linear");
  node.mutable_linear();
  const Tensor x = testing::random_tensor({2, 16}, 1);
  const Tensor w = testing::random_tensor({8, 16}, 2);
  DeviceOp op(node, {x, w}, DType::kF16);
  EXPECT_EQ(op.kernel().describe(), "cuda cublasLt F16");
}

#endif  // MG_WITH_CUDA

TEST(CudaOps, ActivationDtypeIsCheckedPerDevice) {
  CompileOptions cpu;
  EXPECT_EQ(activation_dtype_of(cpu), DType::kF32);
  cpu.activation_dtype = DType::kBF16;
  testing::expect_error([&] { activation_dtype_of(cpu); },
                        {"activation dtype BF16 is not supported on cpu"});
  CompileOptions gpu;
  gpu.device = Device::cuda(0);
  EXPECT_EQ(activation_dtype_of(gpu), DType::kBF16);
  gpu.activation_dtype = DType::kF16;
  EXPECT_EQ(activation_dtype_of(gpu), DType::kF16);
  gpu.activation_dtype = DType::kF8E4M3;
  testing::expect_error(
      [&] { activation_dtype_of(gpu); },
      {"activation dtype F8_E4M3 is not supported on cuda:0", "BF16, F16 or F32"});
}

}  // namespace
}  // namespace mg
