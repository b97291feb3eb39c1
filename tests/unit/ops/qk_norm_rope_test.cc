// op qk_norm_rope on the CPU: its outputs equal rms_norm's then rope's CPU kernels bit for bit
// (it runs their loops) and match the fp64 reference, over odd head counts, GQA, head_dim 64, 80
// and 128, 1 and 37 tokens, both pairings, partial rotary, YaRN, with and without weights, and
// without norms (the rope op's outputs); the op's checks; and the graph rewrites on hand-made
// graphs (what they fuse and what they leave).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "ops/nn/qk_norm_rope/qk_norm_rope.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

struct Config {
  const char* name;
  int64_t q_heads, k_heads, head_dim, rotary_dim;
  proto::RopePairing pairing;
  bool yarn;
};

proto::QkNormRopeParams params_of(const Config& c, bool q_weight, bool k_weight) {
  proto::QkNormRopeParams p;
  proto::RopeParams* rope = p.mutable_rope();
  rope->set_num_heads(c.q_heads);
  rope->set_head_dim(c.head_dim);
  rope->set_rotary_dim(c.rotary_dim);
  rope->set_pairing(c.pairing);
  rope->set_theta(1e6);
  if (c.yarn) {
    proto::RopeScaling* s = rope->mutable_scaling();
    s->set_type(proto::RopeScaling::YARN);
    s->set_factor(4.0);
    s->set_original_max_position(4096);
  }
  p.set_num_kv_heads(c.k_heads);
  p.mutable_q_norm()->set_eps(1e-6f);
  p.mutable_q_norm()->set_group_size(c.head_dim);
  p.mutable_q_norm()->set_has_weight(q_weight);
  p.mutable_k_norm()->set_eps(1e-5f);
  p.mutable_k_norm()->set_group_size(c.head_dim);
  p.mutable_k_norm()->set_has_weight(k_weight);
  return p;
}

proto::Node fused_node(const proto::QkNormRopeParams& p) {
  proto::Node node;
  node.set_name("qk");
  node.set_op("qk_norm_rope");
  *node.mutable_qk_norm_rope() = p;
  return node;
}

// rms_norm then rope of one tensor, through the two ops' CPU kernels.
Tensor unfused(const proto::RmsNormParams& norm, const proto::RopeParams& rope, const Tensor& x,
               const Tensor& weight, const Tensor& positions) {
  proto::Node n;
  n.set_name("norm");
  n.set_op("rms_norm");
  *n.mutable_rms_norm() = norm;
  const Tensor normed = testing::run_cpu_op(n, {x, weight}).at(0);
  proto::Node r;
  r.set_name("rope");
  r.set_op("rope");
  *r.mutable_rope() = rope;
  return testing::run_cpu_op(r, {normed, positions}).at(0);
}

Tensor positions_of(int64_t tokens, int32_t first) {
  Tensor t = Tensor::empty_cpu(DType::kI32, {tokens});
  for (int64_t i = 0; i < tokens; ++i) {
    t.data<int32_t>()[i] = first + static_cast<int32_t>(i * 131 % 9973);
  }
  return t;
}

void expect_bitwise_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(got.numel()) * sizeof(float)),
            0);
}

TEST(QkNormRopeOp, EqualsRmsNormThenRopeAndMatchesTheReference) {
  const Config configs[] = {
      {"qwen3 gqa", 7, 1, 128, 0, proto::HALF_SPLIT, false},
      {"odd heads", 5, 3, 64, 0, proto::HALF_SPLIT, false},
      {"head80 partial", 3, 3, 80, 32, proto::HALF_SPLIT, false},
      {"interleaved yarn", 9, 3, 64, 0, proto::INTERLEAVED, true},
      {"head80 interleaved", 1, 1, 80, 0, proto::INTERLEAVED, false},
  };
  for (const Config& c : configs) {
    for (const int64_t tokens : {1, 37}) {
      for (const bool weights : {true, false}) {
        SCOPED_TRACE(::testing::Message() << c.name << " T=" << tokens << " weights " << weights);
        // k without a weight when q has one: the two norms are independent.
        const proto::QkNormRopeParams p = params_of(c, weights, false);
        const uint32_t seed = static_cast<uint32_t>(tokens * 1000 + c.q_heads * 10 + c.head_dim);
        const Tensor q = testing::random_tensor({tokens, c.q_heads * c.head_dim}, seed, -3, 2);
        const Tensor k = testing::random_tensor({tokens, c.k_heads * c.head_dim}, seed + 1);
        const Tensor qw = testing::random_tensor({c.head_dim}, seed + 2, 0.5f, 1.5f);
        const Tensor positions = positions_of(tokens, tokens == 1 ? 4000 : 0);
        const std::vector<Tensor> out = testing::run_cpu_op(
            fused_node(p), {q, k, positions, weights ? qw : Tensor(), Tensor()});
        ASSERT_EQ(out.size(), 2u);
        // The same loops in the same order: equal to the last bit.
        expect_bitwise_equal(out[0],
                             unfused(p.q_norm(), p.rope(), q, weights ? qw : Tensor(), positions));
        expect_bitwise_equal(out[1],
                             unfused(p.k_norm(), qk_norm_rope_k_rope(p), k, Tensor(), positions));
        std::vector<float> q_ref(static_cast<size_t>(q.numel())), k_ref(k.numel());
        qk_norm_rope_reference(p, q.data<float>(), k.data<float>(), positions.data<int32_t>(),
                               tokens, weights ? qw.data<float>() : nullptr, nullptr, q_ref.data(),
                               k_ref.data());
        EXPECT_LE(testing::normalized_error(testing::span_of(out[0]), q_ref), 1e-6);
        EXPECT_LE(testing::normalized_error(testing::span_of(out[1]), k_ref), 1e-6);
      }
    }
  }
}

// rope of one tensor through the rope op's CPU kernel.
Tensor rope_only(const proto::RopeParams& rope, const Tensor& x, const Tensor& positions) {
  proto::Node r;
  r.set_name("rope");
  r.set_op("rope");
  *r.mutable_rope() = rope;
  return testing::run_cpu_op(r, {x, positions}).at(0);
}

TEST(QkNormRopeOp, WithoutNormsEqualsTheRopeOpOnQAndK) {
  const Config configs[] = {
      {"gpt-oss gqa", 8, 1, 64, 0, proto::HALF_SPLIT, true},
      {"odd heads", 5, 3, 80, 32, proto::HALF_SPLIT, false},
      {"interleaved", 3, 3, 64, 0, proto::INTERLEAVED, false},
  };
  for (const Config& c : configs) {
    for (const int64_t tokens : {1, 37}) {
      SCOPED_TRACE(::testing::Message() << c.name << " T=" << tokens);
      proto::QkNormRopeParams p = params_of(c, false, false);
      p.clear_q_norm();
      p.clear_k_norm();
      const uint32_t seed = static_cast<uint32_t>(tokens * 100 + c.q_heads);
      const Tensor q = testing::random_tensor({tokens, c.q_heads * c.head_dim}, seed, -3, 2);
      const Tensor k = testing::random_tensor({tokens, c.k_heads * c.head_dim}, seed + 1);
      const Tensor positions = positions_of(tokens, tokens == 1 ? 4000 : 0);
      const std::vector<Tensor> out =
          testing::run_cpu_op(fused_node(p), {q, k, positions, Tensor(), Tensor()});
      ASSERT_EQ(out.size(), 2u);
      expect_bitwise_equal(out[0], rope_only(p.rope(), q, positions));
      expect_bitwise_equal(out[1], rope_only(qk_norm_rope_k_rope(p), k, positions));
      std::vector<float> q_ref(static_cast<size_t>(q.numel())), k_ref(k.numel());
      qk_norm_rope_reference(p, q.data<float>(), k.data<float>(), positions.data<int32_t>(), tokens,
                             nullptr, nullptr, q_ref.data(), k_ref.data());
      EXPECT_LE(testing::normalized_error(testing::span_of(out[0]), q_ref), 1e-6);
      EXPECT_LE(testing::normalized_error(testing::span_of(out[1]), k_ref), 1e-6);
    }
  }
}

void expect_refused(const proto::QkNormRopeParams& p, const std::vector<Tensor>& inputs,
                    const std::string& message) {
  try {
    testing::run_cpu_op(fused_node(p), inputs);
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
}

TEST(QkNormRopeOp, RefusesGroupsOtherThanHeadsAndBadShapes) {
  const Config c{"small", 2, 1, 8, 0, proto::HALF_SPLIT, false};
  const Tensor q = testing::random_tensor({3, 16}, 1);
  const Tensor k = testing::random_tensor({3, 8}, 2);
  const Tensor positions = positions_of(3, 0);
  proto::QkNormRopeParams whole_row = params_of(c, false, false);
  whole_row.mutable_q_norm()->set_group_size(0);
  expect_refused(whole_row, {q, k, positions, Tensor(), Tensor()},
                 "q_norm.group_size must equal rope.head_dim 8");
  expect_refused(params_of(c, false, true), {q, k, positions, Tensor(), Tensor()},
                 "input 4 (k_weight) is absent but k_norm.has_weight is true");
  expect_refused(params_of(c, true, false),
                 {q, k, positions, testing::random_tensor({16}, 3), Tensor()},
                 "qk_norm_rope: q_weight");
  expect_refused(params_of(c, false, false), {q, q, positions, Tensor(), Tensor()},
                 "k must have num_kv_heads * head_dim = 1 * 8 = 8 features");
  proto::QkNormRopeParams no_norms = params_of(c, false, false);
  no_norms.clear_q_norm();
  no_norms.clear_k_norm();
  expect_refused(no_norms, {q, k, positions, testing::random_tensor({8}, 3), Tensor()},
                 "input 3 (q_weight) is present but q_norm is unset (no norm)");
  const Config big{"big", 1, 1, 2048, 0, proto::HALF_SPLIT, false};
  expect_refused(params_of(big, false, false),
                 {testing::random_tensor({1, 2048}, 4), testing::random_tensor({1, 2048}, 5),
                  positions_of(1, 0), Tensor(), Tensor()},
                 "head_dim 2048 exceeds 1024");
}

// ---- the graph rewrite ----------------------------------------------------------------------

proto::Node& add_node(proto::Model& m, const std::string& name, const std::string& op,
                      std::vector<std::string> inputs, std::vector<std::string> outputs) {
  proto::Node& n = *m.add_nodes();
  n.set_name(name);
  n.set_op(op);
  for (const std::string& i : inputs) n.add_inputs(i);
  for (const std::string& o : outputs) n.add_outputs(o);
  return n;
}

// q_proj-less attention block as the Qwen3 importer writes it: per-head q/k norms, RoPE of both,
// attention reading (q, k, v, positions).
proto::Model qk_graph(int64_t q_group = 16, int64_t k_group = 16) {
  proto::Model m;
  auto norm = [&](const std::string& name, const std::string& x, int64_t group) {
    proto::Node& n = add_node(m, name, "rms_norm", {x, name + ".w"}, {name + ".out"});
    n.mutable_rms_norm()->set_eps(1e-6f);
    n.mutable_rms_norm()->set_group_size(group);
    n.mutable_rms_norm()->set_has_weight(true);
  };
  auto rope = [&](const std::string& name, const std::string& x, int64_t heads) {
    proto::Node& n = add_node(m, name, "rope", {x, "positions"}, {name + ".out"});
    n.mutable_rope()->set_num_heads(heads);
    n.mutable_rope()->set_head_dim(16);
    n.mutable_rope()->set_pairing(proto::HALF_SPLIT);
    n.mutable_rope()->set_theta(1e6);
  };
  norm("q_norm", "q", q_group);
  norm("k_norm", "k", k_group);
  rope("q_rope", "q_norm.out", 4);
  rope("k_rope", "k_norm.out", 2);
  add_node(m, "attn", "attention", {"q_rope.out", "k_rope.out", "v", "positions", ""},
           {"attn.out"});
  return m;
}

TEST(QkNormRopeFusion, FusesThePairAttentionReads) {
  proto::Model m = qk_graph();
  ASSERT_EQ(fuse_qk_norm_rope(m), 1);
  ASSERT_EQ(m.nodes_size(), 2);
  const proto::Node& f = m.nodes(1);
  EXPECT_EQ(f.op(), "qk_norm_rope");
  EXPECT_THAT(std::vector<std::string>(f.inputs().begin(), f.inputs().end()),
              ::testing::ElementsAre("q", "k", "positions", "q_norm.w", "k_norm.w"));
  EXPECT_THAT(std::vector<std::string>(f.outputs().begin(), f.outputs().end()),
              ::testing::ElementsAre("q_rope.out", "k_rope.out"));
  EXPECT_EQ(f.qk_norm_rope().rope().num_heads(), 4);
  EXPECT_EQ(f.qk_norm_rope().num_kv_heads(), 2);
  EXPECT_EQ(f.qk_norm_rope().q_norm().group_size(), 16);
  EXPECT_TRUE(f.qk_norm_rope().k_norm().has_weight());
  EXPECT_EQ(fuse_qk_norm_rope(m), 0);  // nothing left
}

TEST(QkNormRopeFusion, LeavesWholeRowNormsSharedValuesAndMismatchedRopes) {
  {
    proto::Model m = qk_graph(/*q_group=*/0);  // OLMoE-style norm of the whole projection
    EXPECT_EQ(fuse_qk_norm_rope(m), 0);
  }
  {
    proto::Model m = qk_graph();
    add_node(m, "probe", "clamp", {"k_norm.out"}, {"probe.out"});  // the normed k read twice
    EXPECT_EQ(fuse_qk_norm_rope(m), 0);
  }
  {
    proto::Model m = qk_graph();
    m.add_outputs()->set_name("q_norm.out");  // a graph output
    EXPECT_EQ(fuse_qk_norm_rope(m), 0);
  }
  {
    proto::Model m = qk_graph();
    m.mutable_nodes(3)->mutable_rope()->set_theta(1e4);  // k rotated differently
    EXPECT_EQ(fuse_qk_norm_rope(m), 0);
  }
  {
    proto::Model m = qk_graph();
    m.mutable_nodes(3)->set_inputs(1, "other_positions");
    EXPECT_EQ(fuse_qk_norm_rope(m), 0);
  }
}

// The ropes of q and k with no norm before them (GPT-OSS, Mixtral, ...): attention reads both.
proto::Model rope_pair_graph() {
  proto::Model m = qk_graph();
  m.mutable_nodes()->DeleteSubrange(0, 2);  // no norms: the ropes read q and k
  m.mutable_nodes(0)->set_inputs(0, "q");
  m.mutable_nodes(1)->set_inputs(0, "k");
  return m;
}

TEST(QkNormRopeFusion, FusesTheRopePairAttentionReadsWhereThereIsNoNorm) {
  proto::Model m = rope_pair_graph();
  EXPECT_EQ(fuse_qk_norm_rope(m), 0);  // no norm chain
  ASSERT_EQ(fuse_qk_rope(m), 1);
  ASSERT_EQ(m.nodes_size(), 2);
  const proto::Node& f = m.nodes(1);
  EXPECT_EQ(f.op(), "qk_norm_rope");
  EXPECT_THAT(std::vector<std::string>(f.inputs().begin(), f.inputs().end()),
              ::testing::ElementsAre("q", "k", "positions"));
  EXPECT_THAT(std::vector<std::string>(f.outputs().begin(), f.outputs().end()),
              ::testing::ElementsAre("q_rope.out", "k_rope.out"));
  EXPECT_EQ(f.qk_norm_rope().rope().num_heads(), 4);
  EXPECT_EQ(f.qk_norm_rope().num_kv_heads(), 2);
  EXPECT_FALSE(f.qk_norm_rope().has_q_norm());
  EXPECT_FALSE(f.qk_norm_rope().has_k_norm());
  EXPECT_EQ(fuse_qk_rope(m), 0);  // nothing left

  // After the norm rewrite, nothing is left for it; OLMoE's whole-row norms stay and the ropes
  // after them fuse.
  proto::Model normed = qk_graph();
  ASSERT_EQ(fuse_qk_norm_rope(normed), 1);
  EXPECT_EQ(fuse_qk_rope(normed), 0);
  proto::Model whole_row = qk_graph(/*q_group=*/0, /*k_group=*/0);
  EXPECT_EQ(fuse_qk_norm_rope(whole_row), 0);
  EXPECT_EQ(fuse_qk_rope(whole_row), 1);
  EXPECT_EQ(whole_row.nodes_size(), 4);  // two norms, the fused ropes, attention
}

TEST(QkNormRopeFusion, LeavesRopePairsThatDifferOrHaveDifferentReaders) {
  {
    proto::Model m = rope_pair_graph();
    m.mutable_nodes(1)->mutable_rope()->set_theta(1e4);  // k rotated differently
    EXPECT_EQ(fuse_qk_rope(m), 0);
  }
  {
    proto::Model m = rope_pair_graph();
    m.mutable_nodes(1)->set_inputs(1, "other_positions");
    EXPECT_EQ(fuse_qk_rope(m), 0);
  }
  {
    // Llama-4: each rope read by its own norm, not by one node.
    proto::Model m = rope_pair_graph();
    add_node(m, "q_l2", "rms_norm", {"q_rope.out"}, {"q_l2.out"});
    add_node(m, "k_l2", "rms_norm", {"k_rope.out"}, {"k_l2.out"});
    m.mutable_nodes(2)->set_inputs(0, "q_l2.out");
    m.mutable_nodes(2)->set_inputs(1, "k_l2.out");
    EXPECT_EQ(fuse_qk_rope(m), 0);
  }
}

}  // namespace
}  // namespace mg
