// Quantized tensors in the graph (TensorInfo.quantization): a make-model FP8 model verifies, types
// its expert weights as FP8 codes with their scale groups, compiles to cpu_fp8 and runs close to
// the same model unquantized; every broken quantization is one message naming the tensor or
// node.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/graph/shape_inference.h"
#include "framework/graph/verifier.h"
#include "framework/io/graph_loader.h"
#include "framework/runtime/session.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

DecoderSpec fp8_spec(proto::MoEQuantScheme quant) {
  DecoderSpec spec = testing::small_spec("qwen3_moe");
  spec.hidden = 160;  // one full 128-block and a partial one
  spec.moe_quant = quant;
  return spec;
}

std::vector<float> last_logits(const std::filesystem::path& graph, CompileOptions options) {
  SessionOptions so;
  so.threads = 2;
  const std::unique_ptr<Session> s = Session::open(graph, options, so);
  const std::vector<int32_t> ids = {3, 17, 42, 5, 90};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  const Tensor& logits = s->forward(ids, pos);
  return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
}

TEST(QuantizedTensors, Fp8ModelVerifiesCompilesAndRunsNearTheUnquantizedModel) {
  const std::filesystem::path dir = testing::temp_dir("fp8");
  const std::filesystem::path fp8 =
      testing::write_model(dir / "fp8", fp8_spec(proto::MOE_QUANT_FP8_BLOCK));
  const std::filesystem::path plain =
      testing::write_model(dir / "plain", fp8_spec(proto::MOE_QUANT_UNQUANTIZED));

  Graph graph(load_graph(fp8), fp8);
  verify_graph(graph);
  infer_shapes(graph);
  EXPECT_THAT(value_type_str(*graph.value("layers.0.moe.experts.w13").type),
              HasSubstr("F8_E4M3[16, 64, 160] (scales [128, 128])"));

  const std::unique_ptr<ExecutionPlan> plan = compile_graph_file(fp8, CompileOptions());
  EXPECT_THAT(plan->describe(), HasSubstr("cpu_fp8 (auto"));
  EXPECT_THAT(plan->describe(),
              HasSubstr("cpu_eigen: rejected, quant: supports unquantized F32 weights and "
                        "activations only, not fp8_block(weight F8_E4M3(scale F32 per [128, 128], "
                        "static), activation F8_E4M3(scale F32 per [1, 128], dynamic))"));
  CompileOptions forced;
  forced.moe_backend = "cpu_eigen";
  EXPECT_TRUE(testing::throws_error_with(
      [&] { compile_graph_file(fp8, forced); },
      {"MoE backend 'cpu_eigen' was requested but cannot run this node: quant:"}));

  CompileOptions w8a16;
  w8a16.quantize_activations = false;
  const std::vector<float> want = last_logits(plain, CompileOptions());
  const std::vector<float> got_w8a8 = last_logits(fp8, CompileOptions());
  const std::vector<float> got_w8a16 = last_logits(fp8, w8a16);
  // FP8 weights (and activations) are ~2^-4 relative per element: close, not equal.
  EXPECT_LT(testing::normalized_error(got_w8a16, want), 0.1);
  EXPECT_LT(testing::normalized_error(got_w8a8, want), 0.1);
  EXPECT_GT(testing::normalized_error(got_w8a16, want), 1e-4);
  EXPECT_GT(testing::normalized_error(got_w8a8, got_w8a16), 1e-5);
}

class QuantizedTensorErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("fp8bad");
    graph_file_ = testing::write_model(dir_, fp8_spec(proto::MOE_QUANT_FP8_BLOCK));
  }
  std::string check(const std::function<void(proto::Model&)>& edit) {
    proto::Model model = load_graph(graph_file_);
    edit(model);
    Graph graph(model, dir_ / "bad.pbtxt");
    try {
      verify_graph(graph);
      infer_shapes(graph);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  static proto::TensorInfo& tensor(proto::Model& m, const std::string& name) {
    for (proto::TensorInfo& t : *m.mutable_tensors()) {
      if (t.name() == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }
  static proto::TensorQuantization& w13_quant(proto::Model& m) {
    return *tensor(m, "layers.0.moe.experts.w13").mutable_quantization();
  }
  std::filesystem::path dir_;
  std::filesystem::path graph_file_;
};

TEST_F(QuantizedTensorErrors, EachNamesTheTensorOrNode) {
  const std::string w13 = "tensor 'layers.0.moe.experts.w13'";
  struct Case {
    std::function<void(proto::Model&)> edit;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {[](proto::Model& m) { m.set_format_version(1); },
       {"bad.pbtxt: " + w13, "needs format_version 2"}},
      {[](proto::Model& m) { w13_quant(m).set_scale("nope"); },
       {w13, "scale tensor 'nope' is not declared"}},
      {[](proto::Model& m) { w13_quant(m).clear_scale(); }, {w13, "names no scale tensor"}},
      {[](proto::Model& m) { tensor(m, "layers.0.moe.experts.w13.scale").set_shape(2, 1); },
       {w13, "has shape [16, 1, 1]", "need [16, 1, 2]"}},
      {[](proto::Model& m) { tensor(m, "layers.0.moe.experts.w13.scale").set_dtype(proto::I32); },
       {w13, "is I32 (expected F32, BF16 or F16)"}},
      {[](proto::Model& m) { w13_quant(m).set_group_rows(0); },
       {w13, "quantization.group_rows is 0"}},
      {[](proto::Model& m) { w13_quant(m).set_zero_point("z"); },
       {w13, "zero points and global scales are not supported yet"}},
      // Integer codes on an FP8 tensor: the integer checks run (and need the logical shape).
      {[](proto::Model& m) { w13_quant(m).set_element(proto::QUANT_ELEMENT_INT4); },
       {w13, "int4 codes need quantization.logical_shape"}},
      {[](proto::Model& m) { w13_quant(m).set_element(proto::QUANT_ELEMENT_FP4_E2M1); },
       {w13, "QUANT_ELEMENT_FP4_E2M1 is not supported yet"}},
      {[](proto::Model& m) { w13_quant(m).set_activation(proto::ACT_QUANT_STATIC); },
       {w13, "static activation scales (ACT_QUANT_STATIC) are not supported yet"}},
      {[](proto::Model& m) { w13_quant(m).set_activation_group(64); },
       {w13, "activation_group is 64"}},
      {[](proto::Model& m) { tensor(m, "layers.0.moe.experts.w13").set_dtype(proto::BF16); },
       {w13, "codes of dtype BF16 are not supported"}},
      // The node's scheme and its weights disagree.
      {[](proto::Model& m) {
         testing::find_node(m, "layers.0.moe")
             .mutable_moe()
             ->set_quant_scheme(proto::MOE_QUANT_UNQUANTIZED);
       },
       {"node 'layers.0.moe'", "input 4 (w13) is quantized", "quant_scheme is UNQUANTIZED"}},
      {[](proto::Model& m) {
         testing::find_node(m, "layers.0.moe")
             .mutable_moe()
             ->set_quant_scheme(proto::MOE_QUANT_FP8_PER_CHANNEL);
       },
       {"node 'layers.0.moe'", "input 4 (w13) has scales [128, 128]",
        "FP8_PER_CHANNEL needs one scale per row"}},
      {[](proto::Model& m) {
         tensor(m, "layers.0.moe.experts.w2").clear_quantization();
         tensor(m, "layers.0.moe.experts.w2").set_dtype(proto::F32);
       },
       {"node 'layers.0.moe'", "quant_scheme fp8_block needs input 6 (w2) quantized to F8_E4M3"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string err = check(cases[i].edit);
    for (const std::string& w : cases[i].want) EXPECT_THAT(err, HasSubstr(w));
  }
}

// Writes the small model twice: as made, and with `name` quantized to FP8 (`group`, `activation`);
// returns the two graph files.
std::pair<std::filesystem::path, std::filesystem::path> write_with_fp8_weight(
    const std::string& tag, const std::string& name, GroupShape group, ActivationQuant activation,
    int64_t activation_group) {
  const std::filesystem::path dir = testing::temp_dir(tag);
  const DecoderSpec spec = fp8_spec(proto::MOE_QUANT_UNQUANTIZED);
  GraphBuilder quantized = build_decoder(spec);
  quantized.quantize_fp8(name, group, activation, activation_group);
  quantized.write(dir / "fp8");
  build_decoder(spec).write(dir / "plain");
  return {dir / "fp8" / GraphBuilder::kGraphFile, dir / "plain" / GraphBuilder::kGraphFile};
}

TEST(QuantizedTensors, LinearTakesFp8WeightsAndQuantizesItsInputWhenAsked) {
  // lm_head with one scale per row and per-token activations (compressed-tensors' channel FP8).
  const auto [fp8, plain] = write_with_fp8_weight(
      "fp8_linear", "lm_head.weight", GroupShape::per_channel(), ActivationQuant::kDynamic, -1);
  Graph graph(load_graph(fp8), fp8);
  verify_graph(graph);
  infer_shapes(graph);
  EXPECT_EQ(value_type_str(*graph.value("lm_head.weight").type),
            "F8_E4M3[96, 160] (scales per row)");
  const CompileOptions w8a8;
  EXPECT_THAT(compile_graph_file(fp8, w8a8)->describe(),
              HasSubstr("cpu fp8 (weight scales per row, activations quantized per token: W8A8)"));
  // --activation-quant experts: dense ops keep their activations.
  CompileOptions experts_only;
  experts_only.quantize_dense_activations = false;
  EXPECT_THAT(compile_graph_file(fp8, experts_only)->describe(),
              HasSubstr("cpu fp8 (weight scales per row, activations not quantized: W8A16)"));
  CompileOptions w8a16;
  w8a16.quantize_activations = false;
  EXPECT_THAT(compile_graph_file(fp8, w8a16)->describe(),
              HasSubstr("cpu fp8 (weight scales per row, activations not quantized: W8A16)"));

  const std::vector<float> want = last_logits(plain, CompileOptions());
  const std::vector<float> got_w8a8 = last_logits(fp8, w8a8);
  const std::vector<float> got_w8a16 = last_logits(fp8, w8a16);
  EXPECT_LT(testing::normalized_error(got_w8a16, want), 0.1);
  EXPECT_LT(testing::normalized_error(got_w8a8, want), 0.1);
  EXPECT_GT(testing::normalized_error(got_w8a16, want), 1e-5);
  EXPECT_GT(testing::normalized_error(got_w8a8, got_w8a16), 1e-5);
}

TEST(QuantizedTensors, OpsWithoutQuantizedKernelsGetDequantizedWeights) {
  // An FP8 embedding table: embedding takes no codes, so the place-weights pass dequantizes it;
  // the model runs, close to the unquantized one.
  const auto [fp8, plain] = write_with_fp8_weight(
      "fp8_embed", "embed_tokens.weight", GroupShape::block(32, 32), ActivationQuant::kNone, -1);
  Graph graph(load_graph(fp8), fp8);
  verify_graph(graph);
  infer_shapes(graph);
  const InputSpec plain_input{"table", InputKind::kWeight};
  const ValueType codes = *graph.value("embed_tokens.weight").type;
  EXPECT_EQ(value_type_str(codes), "F8_E4M3[96, 160] (scales [32, 32])");
  EXPECT_EQ(value_type_str(input_view(codes, plain_input)), "F32[96, 160]");
  const std::vector<float> got = last_logits(fp8, CompileOptions());
  const std::vector<float> want = last_logits(plain, CompileOptions());
  EXPECT_LT(testing::normalized_error(got, want), 0.1);
  EXPECT_GT(testing::normalized_error(got, want), 1e-5);
}

}  // namespace
}  // namespace mg
