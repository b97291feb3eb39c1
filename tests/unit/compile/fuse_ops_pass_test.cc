// The fuse-ops compile pass: every add that feeds a whole-row rms_norm becomes one add_rms_norm
// node (and only those), every layer's per-head q/k rms_norm -> rope chains one qk_norm_rope node
// (and only those), or where there are no such norms its q and k ropes one qk_norm_rope node, every
// layer's q/k/v projections (MLA's q_a / kv_a) one linear with output_features (and only siblings
// that agree on everything but their weights), and the fused graph gives the unfused graph's
// logits, bit for bit: the bundled models, the small test decoders and imported Hugging Face
// fixtures, prompt and decode steps.
#include <gtest/gtest.h>

#include <map>

#include "framework/compile/compiler.h"
#include "framework/compile/fuse_ops.h"
#include "framework/import/hf_importer.h"
#include "framework/io/graph_loader.h"
#include "framework/runtime/session.h"
#include "ops/nn/linear/linear.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/session_logits.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

std::map<std::string, int> op_counts(const ExecutionPlan& plan) {
  std::map<std::string, int> counts;
  for (const PlanNode& n : plan.nodes) ++counts[n.op];
  return counts;
}

std::shared_ptr<const ExecutionPlan> compile(const std::filesystem::path& model, bool fuse) {
  CompileOptions options;
  options.fuse_ops = fuse;
  options.max_tokens = 64;
  if (model.extension() == ".pbtxt") return compile_graph_file(model, options);
  HfImportResult imported = import_hf_checkpoint(model);  // a Hugging Face checkpoint folder
  return compile_model(std::move(imported.model), model / "model.pbtxt", options);
}

// Prompt logits, then three one-token decode steps, concatenated.
std::vector<float> logits_of(std::shared_ptr<const ExecutionPlan> plan) {
  SessionOptions so;
  so.threads = 2;
  Session s(std::move(plan), so);
  return testing::prompt_and_decode_logits(s);
}

std::vector<std::filesystem::path> models() {
  const std::filesystem::path src(MG_SOURCE_DIR);
  return {src / "models/tiny-llama/model.pbtxt", src / "models/tiny-moe/model.pbtxt",
          testing::write_model(testing::temp_dir("fuse"), testing::small_spec()),
          // make-model's Qwen3-MoE (what the 48-layer benchmark model is built as), 2 layers.
          testing::write_model(testing::temp_dir("fuse_qwen3"), testing::small_spec("qwen3_moe")),
          // make-model's DeepSeek-V3 (standard q/k/v attention), 2 layers.
          testing::write_model(testing::temp_dir("fuse_dsv3"), testing::small_spec("deepseek_v3")),
          src / "tests/fixtures/hf/qwen3_moe", src / "tests/fixtures/hf/qwen3_moe_odd",
          src / "tests/fixtures/hf/granitemoe", src / "tests/fixtures/hf/olmoe",
          src / "tests/fixtures/hf/mixtral", src / "tests/fixtures/hf/mixtral_odd",
          // q/k/v with biases.
          src / "tests/fixtures/hf/qwen2_moe",
          // MLA: q_a_proj (q_proj without a q LoRA) and kv_a_proj_with_mqa read the same x.
          src / "tests/fixtures/hf/deepseek_v2", src / "tests/fixtures/hf/deepseek_v2_lite",
          // Attention sinks, YaRN, q/k/v biases; Llama-4's ropes each read by an L2 norm and
          // its NoPE layers.
          src / "tests/fixtures/hf/gpt_oss", src / "tests/fixtures/hf/llama4",
          // FP8 block-quantized projections: left as written.
          src / "tests/fixtures/hf/qwen3_moe_fp8"};
}

// Layers of the model (its attention nodes).
int layers_of(const ExecutionPlan& plan) {
  return op_counts(plan)["attention"];
}

// The linear nodes with output_features, and how many outputs they have together.
std::pair<int, int> fused_linears(const ExecutionPlan& plan) {
  int nodes = 0, outputs = 0;
  for (const PlanNode& n : plan.nodes) {
    if (n.op != "linear" || n.outputs.size() < 2) continue;
    ++nodes;
    outputs += static_cast<int>(n.outputs.size());
  }
  return {nodes, outputs};
}

bool contains(const std::filesystem::path& model, std::string_view what) {
  return model.string().find(what) != std::string::npos;
}

TEST(FuseOps, EveryResidualAddBeforeAWholeRowNormIsFused) {
  for (const auto& model : models()) {
    SCOPED_TRACE(model.string());
    const auto off = compile(model, false);
    const auto on = compile(model, true);
    std::map<std::string, int> a = op_counts(*off), b = op_counts(*on);
    EXPECT_EQ(a["add_rms_norm"], 0);
    const int fused = b["add_rms_norm"];
    const int qk = b["qk_norm_rope"];  // each replaces two rope nodes
    // and, with q/k norms, two rms_norm nodes (qwen3's).
    const int qk_norms = contains(model, "qwen3") ? 2 * qk : 0;
    const auto [linears, outputs] = fused_linears(*on);  // each replaces `outputs` linears
    EXPECT_EQ(on->nodes.size() + static_cast<size_t>(fused + qk + qk_norms + outputs - linears),
              off->nodes.size());
    EXPECT_EQ(b["add"] + fused, a["add"]);
    EXPECT_EQ(b["rope"] + 2 * qk, a["rope"]);
    EXPECT_EQ(b["rms_norm"] + fused + qk_norms, a["rms_norm"]);
    if (contains(model, "granite")) {
      // Granite's residual adds carry residual_multiplier as a scale: never fused.
      EXPECT_EQ(fused, 0);
    } else {
      // A decoder's residual adds all feed a norm (the next layer's or the final one).
      EXPECT_GT(fused, 0);
      EXPECT_EQ(b["add"], 0);
    }
  }
}

TEST(FuseOps, EveryLayersQkRopePairIsFusedWithItsPerHeadNorms) {
  for (const auto& model : models()) {
    SCOPED_TRACE(model.string());
    const auto off = compile(model, false);
    const auto on = compile(model, true);
    std::map<std::string, int> a = op_counts(*off), b = op_counts(*on);
    EXPECT_EQ(a["qk_norm_rope"], 0);
    if (contains(model, "qwen3")) {
      // Qwen3-MoE (fixtures of 3 and 2 layers, make-model's of 2): per-head q_norm / k_norm
      // before RoPE in every layer. Every rope and every q/k norm go; the layers' other norms
      // stay (as rms_norm or add_rms_norm).
      const int layers = model.filename() == "qwen3_moe" ? 3 : 2;
      EXPECT_EQ(a["rope"], 2 * layers);
      EXPECT_EQ(b["qk_norm_rope"], layers);
      EXPECT_EQ(b["rope"], 0);
      EXPECT_EQ(b["rms_norm"] + b["add_rms_norm"], a["rms_norm"] - 2 * layers);
    } else if (contains(model, "llama4")) {
      // Llama-4: its RoPE layers' ropes are each read by an L2 norm (rope -> rms_norm), not by
      // attention, and its NoPE layers have none: every rope stays.
      EXPECT_GT(a["rope"], 0);
      EXPECT_EQ(b["qk_norm_rope"], 0);
      EXPECT_EQ(b["rope"], a["rope"]);
    } else if (contains(model, "deepseek_v2")) {
      // MLA: q's rope (on the tail of each head) and the shared key's (a head of the rope size)
      // differ in head_dim and have different readers: both stay ropes.
      EXPECT_EQ(b["qk_norm_rope"], 0);
      EXPECT_EQ(b["rope"], a["rope"]);
    } else {
      // No per-head q/k norm (tiny-llama, tiny-moe, the small decoder, DeepSeek-V3's q/k/v
      // attention, Granite, Mixtral, Qwen2-MoE), or OLMoE's norm over the whole projection: the
      // two ropes of every layer's attention become one qk_norm_rope without norms, and no
      // rms_norm goes.
      const int layers = layers_of(*off);
      EXPECT_GT(layers, 0);
      EXPECT_EQ(a["rope"], 2 * layers);
      EXPECT_EQ(b["qk_norm_rope"], layers);
      EXPECT_EQ(b["rope"], 0);
      EXPECT_EQ(b["rms_norm"] + b["add_rms_norm"], a["rms_norm"]);
    }
  }
}

TEST(FuseOps, SiblingProjectionsOfOneInputBecomeOneLinear) {
  for (const auto& model : models()) {
    SCOPED_TRACE(model.string());
    const auto off = compile(model, false);
    const auto on = compile(model, true);
    std::map<std::string, int> a = op_counts(*off), b = op_counts(*on);
    const int layers = layers_of(*on);
    const auto [linears, outputs] = fused_linears(*on);
    EXPECT_EQ(fused_linears(*off).first, 0);
    EXPECT_EQ(b["linear"], a["linear"] - outputs + linears);
    if (contains(model, "_odd") || contains(model, "fp8")) {
      // Rows of x not a multiple of 8 (odd hidden sizes), or quantized projections: unfused.
      EXPECT_EQ(linears, 0);
      EXPECT_EQ(b["linear"], a["linear"]);
    } else if (contains(model, "llama4")) {
      // Llama-4: its RoPE layers' ropes are each read by an L2 norm (rope -> rms_norm), not by
      // attention, and its NoPE layers have none: every rope stays.
      EXPECT_GT(a["rope"], 0);
      EXPECT_EQ(b["qk_norm_rope"], 0);
      EXPECT_EQ(b["rope"], a["rope"]);
    } else if (contains(model, "deepseek_v2")) {
      // MLA, per layer: the q (or q_a) projection with kv_a's two row ranges (the latent and the
      // shared rope key), which read the normed hidden state; and kv_b's k_nope and v, which
      // read the normed latent.
      EXPECT_EQ(linears, 2 * layers);
      EXPECT_EQ(outputs, 5 * layers);
    } else {
      // q, k and v of every layer: three nodes become one.
      EXPECT_EQ(linears, layers);
      EXPECT_EQ(outputs, 3 * layers);
    }
    for (const PlanNode& n : on->nodes) {
      if (n.op != "linear" || n.outputs.size() < 2) continue;
      // One weight [Σ out, in] (and bias) in place of the siblings': nothing holds the originals.
      EXPECT_NE(n.name.find('+'), std::string::npos) << n.name;
      EXPECT_NE(n.kernel->describe().find("outputs"), std::string::npos);
      if (contains(model, "qwen2_moe")) {
        ASSERT_EQ(n.inputs.size(), 3u);
        EXPECT_GE(n.inputs[2], 0) << n.name << ": the fused q/k/v bias";
      }
    }
  }
}

// The rewrite on graphs edited to break the conditions, one at a time (make-model's Qwen3-MoE,
// 2 layers, whose q/k/v all fuse as written).
TEST(FuseOps, SiblingLinearsThatDifferAreLeftAsWritten) {
  const auto graph =
      testing::write_model(testing::temp_dir("fuse_siblings"), testing::small_spec("qwen3_moe"));
  const proto::Model original = load_graph(graph);
  auto rewrites = [](proto::Model m) { return fuse_sibling_linears(m); };
  auto find_node = [](proto::Model& m, const std::string& name) -> proto::Node& {
    for (proto::Node& n : *m.mutable_nodes()) {
      if (n.name() == name) return n;
    }
    throw std::runtime_error("no node " + name);
  };
  EXPECT_EQ(rewrites(original), 2);  // one per layer

  {
    // k_proj of layer 0 reads another x: q and v still fuse, k stays.
    proto::Model m = original;
    find_node(m, "layers.0.attn.k_proj").set_inputs(0, "layers.0.attn_norm.out#other");
    proto::Model fused = m;
    EXPECT_EQ(fuse_sibling_linears(fused), 2);
    int k_alone = 0;
    for (const proto::Node& n : fused.nodes()) {
      if (n.name() == "layers.0.attn.k_proj") ++k_alone;
      if (n.name() == "layers.0.attn.q_proj+layers.0.attn.v_proj") {
        EXPECT_EQ(n.linear().output_features_size(), 2);
      }
    }
    EXPECT_EQ(k_alone, 1);
  }
  {
    // A scale on one projection: it differs from its siblings.
    proto::Model m = original;
    find_node(m, "layers.1.attn.v_proj").mutable_linear()->set_scale(0.5f);
    proto::Model fused = m;
    EXPECT_EQ(fuse_sibling_linears(fused), 2);
    for (const proto::Node& n : fused.nodes()) {
      if (n.op() == "linear" && n.name().find("layers.1.") == 0 && n.outputs_size() > 1) {
        EXPECT_EQ(n.name(), "layers.1.attn.q_proj+layers.1.attn.k_proj");
      }
    }
  }
  {
    // A weight another node reads too (tied): its linear stays, so the weight is held once.
    proto::Model m = original;
    proto::Node& extra = *m.add_nodes();
    extra = find_node(m, "layers.0.attn.q_proj");
    extra.set_name("extra");
    extra.set_outputs(0, "extra.out");
    proto::Model fused = m;
    EXPECT_EQ(fuse_sibling_linears(fused), 2);  // layer 0: k and v only
    for (const proto::Node& n : fused.nodes()) {
      if (n.name().find("layers.0.attn.k_proj") == 0 && n.outputs_size() > 1) {
        EXPECT_EQ(n.name(), "layers.0.attn.k_proj+layers.0.attn.v_proj");
      }
    }
  }
  {
    // The rewrite drops the originals and declares their concatenation, by parts in order.
    proto::Model fused = original;
    ASSERT_EQ(fuse_sibling_linears(fused), 2);
    int declared = 0;
    for (const proto::TensorInfo& t : fused.tensors()) {
      EXPECT_NE(t.name(), "layers.0.attn.q_proj.weight");
      if (t.name() !=
          "layers.0.attn.q_proj.weight+layers.0.attn.k_proj.weight+"
          "layers.0.attn.v_proj.weight") {
        continue;
      }
      ++declared;
      ASSERT_EQ(t.parts_size(), 3);
      EXPECT_EQ(t.parts(0).key(), "layers.0.attn.q_proj.weight");
      EXPECT_EQ(t.parts(2).key(), "layers.0.attn.v_proj.weight");
      ASSERT_EQ(t.shape_size(), 2);
      EXPECT_EQ(t.shape(0), 4 * 8 + 2 * 2 * 8);  // q: 4 heads x 8, k and v: 2 heads x 8
      EXPECT_EQ(t.shape(1), 32);
    }
    EXPECT_EQ(declared, 1);
  }
}

// The graph of `model` as written (a .pbtxt, or a Hugging Face checkpoint folder imported).
proto::Model model_of(const std::filesystem::path& model) {
  if (model.extension() == ".pbtxt") return load_graph(model);
  return import_hf_checkpoint(model).model;
}

std::filesystem::path graph_path_of(const std::filesystem::path& model) {
  return model.extension() == ".pbtxt" ? model : model / "model.pbtxt";
}

// The linear rewrite alone (the pass off for both graphs, the rewrite applied by hand to one):
// every output of a fused linear is the GEMM of its rows of the weight, as its own linear ran it.
TEST(FuseOps, FusedLinearsGiveTheUnfusedFloatsBitForBit) {
  for (const auto& model : models()) {
    SCOPED_TRACE(model.string());
    CompileOptions options;
    options.fuse_ops = false;
    options.max_tokens = 64;
    proto::Model fused = model_of(model);
    const int rewrites = fuse_sibling_linears(fused);
    if (contains(model, "_odd") || contains(model, "fp8")) {
      EXPECT_EQ(rewrites, 0);
      continue;
    }
    EXPECT_GT(rewrites, 0);
    const std::vector<float> off =
        logits_of(compile_model(model_of(model), graph_path_of(model), options));
    const std::vector<float> on = logits_of(compile_model(fused, graph_path_of(model), options));
    EXPECT_EQ(on, off);
  }
}

TEST(FuseOps, LogitsAreTheSameWithTheRewriteOnAndOff) {
  for (const auto& model : models()) {
    SCOPED_TRACE(model.string());
    const std::vector<float> off = logits_of(compile(model, false));
    const std::vector<float> on = logits_of(compile(model, true));
    ASSERT_EQ(on.size(), off.size());
    // The fused CPU kernels run the unfused ops' own loops (add, rms_norm_cpu, RopeCpu, one
    // cpu_gemm_xwt per output of a fused linear): the same floats.
    EXPECT_EQ(on, off);
  }
}

}  // namespace
}  // namespace mg
