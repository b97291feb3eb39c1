// The fuse-ops compile pass: every add that feeds a whole-row rms_norm becomes one add_rms_norm
// node (and only those), every layer's per-head q/k rms_norm -> rope chains one qk_norm_rope node
// (and only those), and the fused graph gives the unfused graph's logits: the bundled models, the
// small test decoder and imported Hugging Face fixtures, prompt and decode steps.
#include <gtest/gtest.h>

#include <map>

#include "framework/compile/compiler.h"
#include "framework/import/hf_importer.h"
#include "framework/runtime/session.h"
#include "tests/testing/model_fixture.h"
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
  const std::vector<int32_t> prompt = {5, 17, 3, 9, 42, 8, 6, 1, 33};
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& t = s.forward(prompt, pos);
  std::vector<float> out(t.data<float>(), t.data<float>() + t.numel());
  for (int step = 0; step < 3; ++step) {
    const int32_t id = prompt[static_cast<size_t>(step)] + 1;
    const int32_t p = static_cast<int32_t>(prompt.size()) + step;
    const Tensor& d = s.forward(std::span(&id, 1), std::span(&p, 1));
    out.insert(out.end(), d.data<float>(), d.data<float>() + d.numel());
  }
  return out;
}

std::vector<std::filesystem::path> models() {
  const std::filesystem::path src(MG_SOURCE_DIR);
  return {src / "models/tiny-llama/model.pbtxt", src / "models/tiny-moe/model.pbtxt",
          testing::write_model(testing::temp_dir("fuse"), testing::small_spec()),
          // make-model's Qwen3-MoE (what the 48-layer benchmark model is built as), 2 layers.
          testing::write_model(testing::temp_dir("fuse_qwen3"), testing::small_spec("qwen3_moe")),
          src / "tests/fixtures/hf/qwen3_moe", src / "tests/fixtures/hf/qwen3_moe_odd",
          src / "tests/fixtures/hf/granitemoe", src / "tests/fixtures/hf/olmoe"};
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
    const int qk = b["qk_norm_rope"];  // each replaces two rms_norm and two rope nodes
    EXPECT_EQ(on->nodes.size() + static_cast<size_t>(fused + 3 * qk), off->nodes.size());
    EXPECT_EQ(b["add"] + fused, a["add"]);
    EXPECT_EQ(b["rms_norm"] + fused + 2 * qk, a["rms_norm"]);
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

TEST(FuseOps, EveryPerHeadQkNormBeforeRopeIsFusedWithItsPartner) {
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
    } else {
      // No q/k norm (tiny-llama, tiny-moe, the small decoder, Granite), or OLMoE's norm over
      // the whole projection: nothing to fuse, every rope stays.
      EXPECT_EQ(b["qk_norm_rope"], 0);
      EXPECT_EQ(b["rope"], a["rope"]);
    }
  }
}

TEST(FuseOps, LogitsAreTheSameWithTheRewriteOnAndOff) {
  for (const auto& model : models()) {
    SCOPED_TRACE(model.string());
    const std::vector<float> off = logits_of(compile(model, false));
    const std::vector<float> on = logits_of(compile(model, true));
    ASSERT_EQ(on.size(), off.size());
    // The fused CPU kernels run the unfused ops' own loops (add, rms_norm_cpu, RopeCpu): the
    // same floats.
    EXPECT_LE(testing::normalized_error(on, off), 1e-7);
  }
}

}  // namespace
}  // namespace mg
