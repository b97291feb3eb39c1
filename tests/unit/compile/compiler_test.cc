// Compilation: the arena plan never lets live values share bytes, and bad weight files are
// reported with the graph file, the tensor and what was expected.
#include <fstream>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/compile/pass.h"
#include "framework/io/graph_loader.h"
#include "framework/io/safetensors.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

std::string compile_error(const std::filesystem::path& graph, CompileOptions options = {}) {
  try {
    compile_graph_file(graph, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Compiler, ArenaNeverOverlapsLiveValuesAndReusesMemory) {
  const auto dir = testing::temp_dir("model");
  auto spec = testing::small_spec();
  spec.layers = 3;
  const auto plan = compile_graph_file(testing::write_model(dir, spec), CompileOptions{});
  size_t sum = 0;
  for (size_t a = 0; a < plan->values.size(); ++a) {
    const PlanValue& va = plan->values[a];
    if (va.source == ValueSource::kWeight) continue;
    sum += va.arena_bytes;
    EXPECT_LE(va.arena_offset + va.arena_bytes, plan->arena_bytes);
    EXPECT_EQ(va.arena_offset % 64, 0u);
    for (size_t b = a + 1; b < plan->values.size(); ++b) {
      const PlanValue& vb = plan->values[b];
      if (vb.source == ValueSource::kWeight) continue;
      const bool live_together = va.first_step <= vb.last_step && vb.first_step <= va.last_step;
      const bool share_bytes = va.arena_offset < vb.arena_offset + vb.arena_bytes &&
                               vb.arena_offset < va.arena_offset + va.arena_bytes;
      EXPECT_FALSE(live_together && share_bytes) << va.name << " and " << vb.name;
    }
  }
  // Liveness lets a 3-layer model reuse most of its activation memory.
  EXPECT_LT(plan->arena_bytes * 3, sum);
}

TEST(Compiler, EveryNodeHasAKernelAndWeightsAreF32) {
  const auto dir = testing::temp_dir("model");
  CompileOptions as_written;  // the graph's own 27 nodes (fuse_ops_pass_test: fused)
  as_written.fuse_ops = false;
  const auto plan =
      compile_graph_file(testing::write_model(dir, testing::small_spec()), as_written);
  EXPECT_EQ(plan->nodes.size(), 27u);
  for (const PlanNode& n : plan->nodes) EXPECT_NE(n.kernel, nullptr);
  for (const PlanValue& v : plan->values) {
    if (v.source == ValueSource::kWeight && v.weight.defined()) {
      EXPECT_EQ(v.weight.dtype(), DType::kF32) << v.name;
    }
  }
  EXPECT_THAT(plan->describe(), HasSubstr("layers.1.mlp"));
}

// The value types after the compile's verify and infer-shapes passes (no device is touched, so a
// CUDA compile's types are checked here without a GPU): name -> "BF16[T, 64]".
std::map<std::string, std::string> inferred_types(const std::filesystem::path& graph_file,
                                                  const CompileOptions& options) {
  CompileState state{Graph(load_graph(graph_file), graph_file), options, nullptr, nullptr};
  make_verify_pass()->run(state);
  make_infer_shapes_pass()->run(state);
  std::map<std::string, std::string> types;
  for (int i : state.graph.order()) {
    for (const std::string& out : state.graph.node(i).outputs()) {
      types[out] = value_type_str(*state.graph.value(out).type);
    }
  }
  types["token_ids"] = value_type_str(*state.graph.value("token_ids").type);
  return types;
}

// `inspect` and the kernels see the dtype that runs: float activations are typed in the compile's
// activation dtype (the ops infer F32; the CUDA default is BF16), integer values keep theirs.
TEST(Compiler, ShapeInferenceTypesActivationsInTheActivationDtype) {
  const auto dir = testing::temp_dir("model");
  const auto file = testing::write_model(dir, testing::small_spec());
  CompileOptions cuda;
  cuda.device = Device::cuda(0);
  CompileOptions cuda_f16 = cuda;
  cuda_f16.activation_dtype = DType::kF16;
  for (const auto& [options, dtype] :
       {std::pair{CompileOptions{}, std::string("F32")}, std::pair{cuda, std::string("BF16")},
        std::pair{cuda_f16, std::string("F16")}}) {
    const auto types = inferred_types(file, options);
    EXPECT_EQ(types.at("logits"), dtype + "[T, 96]") << options.device.str();
    EXPECT_EQ(types.at("token_ids"), "I32[T]");
    for (const auto& [name, type] : types) {
      if (name == "token_ids") continue;
      EXPECT_TRUE(type.starts_with(dtype + "["))
          << name << " is " << type << ", expected " << dtype;
    }
  }
  // The CPU kernels compute in F32 only: asking it for BF16 fails before anything is typed.
  CompileOptions cpu_bf16;
  cpu_bf16.activation_dtype = DType::kBF16;
  EXPECT_THAT(compile_error(file, cpu_bf16),
              HasSubstr("activation dtype BF16 is not supported on cpu"));
}

TEST(Compiler, MissingWeightFile) {
  const auto dir = testing::temp_dir("model");
  const auto graph = testing::write_model(dir, testing::small_spec());
  std::filesystem::remove(dir / "model.safetensors");
  const std::string err = compile_error(graph);
  EXPECT_THAT(err, HasSubstr("model.pbtxt"));
  EXPECT_THAT(err, HasSubstr("model.safetensors"));
  EXPECT_THAT(err, HasSubstr("not found"));
}

TEST(Compiler, TensorMissingFromWeightFile) {
  const auto dir = testing::temp_dir("model");
  const auto graph = testing::write_model(dir, testing::small_spec());
  const auto edited = testing::edit_graph(graph, [](proto::Model& m) {
    for (auto& t : *m.mutable_tensors()) {
      if (t.name() == "layers.1.mlp.down_proj.weight") t.set_key("layers.1.mlp.w2");
    }
  });
  const std::string err = compile_error(edited);
  EXPECT_THAT(err, HasSubstr("layers.1.mlp.w2"));
}

TEST(Compiler, DeclaredDtypeDisagreesWithFile) {
  const auto dir = testing::temp_dir("model");
  const auto graph = testing::write_model(dir, testing::small_spec());
  const auto edited = testing::edit_graph(graph, [](proto::Model& m) {
    for (auto& t : *m.mutable_tensors()) {
      if (t.name() == "final_norm.weight") t.set_dtype(proto::F16);
    }
  });
  const std::string err = compile_error(edited);
  EXPECT_THAT(err, HasSubstr("final_norm.weight"));
  EXPECT_THAT(err, HasSubstr("BF16"));
}

TEST(Compiler, CorruptSafetensorsHeader) {
  const auto dir = testing::temp_dir("model");
  const auto graph = testing::write_model(dir, testing::small_spec());
  {
    std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("!!!!", 4);
  }
  const std::string err = compile_error(graph);
  EXPECT_THAT(err, HasSubstr("model.safetensors"));
}

TEST(Compiler, RejectsMaxTokensOutOfRange) {
  const auto dir = testing::temp_dir("model");
  const auto graph = testing::write_model(dir, testing::small_spec());
  CompileOptions options;
  options.max_tokens = 0;
  EXPECT_THAT(compile_error(graph, options),
              HasSubstr("max_tokens (--max-tokens): 0 is out of range [1, 16777216]"));
  options.max_tokens = int64_t{1} << 57;  // once: wrapped sizes and an internal error
  EXPECT_THAT(compile_error(graph, options), HasSubstr("out of range [1, 16777216]"));
}

// Library callers get the checks the command's flags have: --max-seq-len's range, and the
// graph's own info.max_seq_len.
TEST(Compiler, RejectsMaxSeqLenOutOfRange) {
  const auto dir = testing::temp_dir("model");
  const auto graph = testing::write_model(dir, testing::small_spec());
  CompileOptions options;
  options.max_seq_len = int64_t{1} << 57;
  EXPECT_THAT(compile_error(graph, options),
              HasSubstr("max_seq_len (--max-seq-len): 144115188075855872 is out of range"));
  options.max_seq_len = -1;
  EXPECT_THAT(compile_error(graph, options), HasSubstr("out of range [0, 2147483647]"));
}

}  // namespace
}  // namespace mg
