// Quantized tensors in the graph (TensorInfo.quantization): a make-model FP8 model verifies, types
// its expert weights as FP8 codes with their scale groups, compiles to cpu_fp8 and runs close to
// the same model unquantized; every broken quantization is one message naming the tensor or
// node.
#include <map>

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

TEST(QuantizedTensors, Fp4ModelsVerifyCompileToCpuFp4AndRunNearTheUnquantizedModel) {
  // make-model --quant mxfp4 | nvfp4: Qwen3-MoE (gate rows before up rows) against the same model
  // unquantized; GPT-OSS (interleaved gate/up, biases, SwiGLU-OAI; canonical layout once FP4)
  // MXFP4 against NVFP4, two quantizations of the same weights.
  const std::filesystem::path dir = testing::temp_dir("fp4");
  for (const std::string family : {"qwen3_moe", "gpt_oss"}) {
    SCOPED_TRACE(family);
    std::map<proto::MoEQuantScheme, std::vector<float>> logits;
    for (const proto::MoEQuantScheme scheme :
         {proto::MOE_QUANT_UNQUANTIZED, proto::MOE_QUANT_MXFP4, proto::MOE_QUANT_NVFP4}) {
      DecoderSpec spec = testing::small_spec(family);
      spec.moe_quant = scheme;
      const std::filesystem::path file =
          testing::write_model(dir / fmt::format("{}_{}", family, static_cast<int>(scheme)), spec);
      if (scheme != proto::MOE_QUANT_UNQUANTIZED) {
        Graph graph(load_graph(file), file);
        verify_graph(graph);
        infer_shapes(graph);
        EXPECT_THAT(
            value_type_str(*graph.value("layers.0.moe.experts.w13").type),
            HasSubstr(scheme == proto::MOE_QUANT_MXFP4 ? "(fp4_e2m1 codes, scales [1, 32])"
                                                       : "(fp4_e2m1 codes, scales [1, 16])"));
        const std::string plan = compile_graph_file(file, CompileOptions())->describe();
        EXPECT_THAT(plan, HasSubstr("cpu_fp4 (auto"));
        EXPECT_THAT(plan, HasSubstr("cpu_eigen: rejected, quant: "));
      }
      logits[scheme] = last_logits(file, CompileOptions());
    }
    const auto& mx = logits[proto::MOE_QUANT_MXFP4];
    const auto& nv = logits[proto::MOE_QUANT_NVFP4];
    // E2M1 keeps about one significant bit: close, far from equal.
    EXPECT_LT(testing::normalized_error(mx, nv), 0.3);
    EXPECT_GT(testing::normalized_error(mx, nv), 1e-4);
    if (family == "qwen3_moe") {
      const auto& plain = logits[proto::MOE_QUANT_UNQUANTIZED];
      EXPECT_LT(testing::normalized_error(mx, plain), 0.3);
      EXPECT_LT(testing::normalized_error(nv, plain), 0.3);
      EXPECT_GT(testing::normalized_error(mx, plain), 1e-4);
    }
  }
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
  // w13 [16, 64, 160] declared as packed FP4 (U8 [16, 64, 80]) with E8M0 scales per 32 values.
  static void make_w13_fp4(proto::Model& m) {
    proto::TensorInfo& w = tensor(m, "layers.0.moe.experts.w13");
    w.set_dtype(proto::U8);
    w.set_shape(2, 80);
    w13_quant(m).set_element(proto::QUANT_ELEMENT_FP4_E2M1);
    w13_quant(m).set_group_rows(1);
    w13_quant(m).set_group_cols(32);
    w13_quant(m).set_activation(proto::ACT_QUANT_NONE);
    w13_quant(m).set_activation_group(0);
    proto::TensorInfo& s = tensor(m, "layers.0.moe.experts.w13.scale");
    s.set_dtype(proto::U8);
    s.set_shape(1, 64);
    s.set_shape(2, 5);
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
       {w13, "zero points are not supported yet"}},
      {[](proto::Model& m) { w13_quant(m).set_global_scale("g"); },
       {w13, "a global scale is only taken with FP4_E2M1 codes"}},
      {[](proto::Model& m) { w13_quant(m).set_global_scale_divides(true); },
       {w13, "global_scale_divides is set but no global_scale is named"}},
      // FP4: codes must be U8, scales per row, weight-only; a global scale must exist and fit.
      {[](proto::Model& m) { w13_quant(m).set_element(proto::QUANT_ELEMENT_FP4_E2M1); },
       {w13, "FP4_E2M1 codes are stored two per U8 byte, not as F8_E4M3"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         w13_quant(m).set_group_rows(128);
       },
       {w13, "FP4_E2M1 scales are per row (group_rows 1), not group_rows 128"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         w13_quant(m).set_activation(proto::ACT_QUANT_DYNAMIC);
       },
       {w13, "FP4_E2M1 weights are weight-only"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         tensor(m, "layers.0.moe.experts.w13.scale").set_shape(2, 4);
       },
       {w13, "has shape [16, 64, 4]", "codes [16, 64, 160] with groups [1, 32] need [16, 64, 5]"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         tensor(m, "layers.0.moe.experts.w13.scale").set_dtype(proto::I32);
       },
       {w13, "FP4_E2M1 takes U8 (E8M0), F8_E4M3, F32, BF16 or F16 scales"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         w13_quant(m).set_global_scale("nope");
       },
       {w13, "global scale tensor 'nope' is not declared"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         w13_quant(m).set_global_scale("layers.0.moe.experts.w13.scale");
       },
       {w13, "global scale tensor 'layers.0.moe.experts.w13.scale' must be F32"}},
      // An FP4 weight under an FP8 scheme, and the MXFP4 scheme over FP8 weights.
      {[](proto::Model& m) { make_w13_fp4(m); },
       {"node 'layers.0.moe'", "quant_scheme fp8_block needs input 4 (w13) quantized to F8_E4M3",
        "U8[16, 64, 160] (fp4_e2m1 codes, scales [1, 32])"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         testing::find_node(m, "layers.0.moe")
             .mutable_moe()
             ->set_quant_scheme(proto::MOE_QUANT_MXFP4);
       },
       {"node 'layers.0.moe'", "quant_scheme mxfp4 needs input 6 (w2) quantized to FP4_E2M1"}},
      {[](proto::Model& m) {
         make_w13_fp4(m);
         w13_quant(m).set_group_cols(16);
         tensor(m, "layers.0.moe.experts.w13.scale").set_shape(2, 10);
         testing::find_node(m, "layers.0.moe")
             .mutable_moe()
             ->set_quant_scheme(proto::MOE_QUANT_MXFP4);
       },
       {"node 'layers.0.moe'",
        "input 4 (w13) has scales [1, 16], but mxfp4 needs one scale per 32 "
        "values"}},
      // Integer codes on an FP8 tensor: the integer checks run (and need the logical shape).
      {[](proto::Model& m) { w13_quant(m).set_element(proto::QUANT_ELEMENT_INT4); },
       {w13, "int4 codes need quantization.logical_shape"}},
      {[](proto::Model& m) { w13_quant(m).set_activation(proto::ACT_QUANT_STATIC); },
       {w13, "ACT_QUANT_STATIC", "names no activation_scale tensor"}},
      {[](proto::Model& m) {
         w13_quant(m).set_activation(proto::ACT_QUANT_STATIC);
         w13_quant(m).set_activation_scale("nowhere");
       },
       {w13, "activation scale tensor 'nowhere' is not declared"}},
      {[](proto::Model& m) {
         w13_quant(m).set_activation(proto::ACT_QUANT_STATIC);
         w13_quant(m).set_activation_scale("layers.0.moe.experts.w13.scale");
       },
       {w13, "activation scale tensor 'layers.0.moe.experts.w13.scale' must be", "of shape [n]"}},
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
