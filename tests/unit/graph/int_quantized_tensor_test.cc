// Integer weight-only quantized tensors in the graph: a make-model W4A16 / W8A16 model verifies,
// types its expert weights as integer codes of their logical shape, compiles to cpu_wna16 and runs
// near the same model unquantized; every broken integer quantization is one message naming the
// tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/graph/shape_inference.h"
#include "framework/graph/verifier.h"
#include "framework/io/graph_loader.h"
#include "framework/runtime/session.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

DecoderSpec int_spec(proto::MoEQuantScheme quant, QuantElement element, int64_t group) {
  DecoderSpec spec = testing::small_spec("qwen3_moe");
  spec.hidden = 160;  // 5 groups of 32; one group of 128 and a partial one
  spec.moe_quant = quant;
  spec.moe_quant_element = element;
  spec.moe_quant_group = group;
  return spec;
}

std::vector<float> last_logits(const std::filesystem::path& graph) {
  SessionOptions so;
  so.threads = 2;
  const std::unique_ptr<Session> s = Session::open(graph, CompileOptions(), so);
  const std::vector<int32_t> ids = {3, 17, 42, 5, 90};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  const Tensor& logits = s->forward(ids, pos);
  return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
}

TEST(IntQuantizedTensors, ModelsVerifyCompileAndRunNearTheUnquantizedModel) {
  const std::filesystem::path dir = testing::temp_dir("wna16");
  const std::filesystem::path plain = testing::write_model(
      dir / "plain", int_spec(proto::MOE_QUANT_UNQUANTIZED, QuantElement::kFromDtype, -1));
  const std::vector<float> want = last_logits(plain);
  struct Case {
    const char* name;
    proto::MoEQuantScheme scheme;
    QuantElement element;
    int64_t group;
    const char* type;
    double bound;
  };
  const Case cases[] = {
      {"int4_g32", proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kInt4, 32,
       "U8[16, 64, 160] (int4 codes, scales [1, 32])", 0.2},
      {"uint4_g128", proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kUInt4, 128,
       "U8[16, 64, 160] (uint4 codes, scales [1, 128])", 0.2},
      {"int8_channel", proto::MOE_QUANT_INT8_WEIGHT_ONLY, QuantElement::kInt8, -1,
       "I8[16, 64, 160] (int8 codes, scales per row)", 0.02},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::filesystem::path file =
        testing::write_model(dir / c.name, int_spec(c.scheme, c.element, c.group));
    Graph graph(load_graph(file), file);
    EXPECT_EQ(graph.model().format_version(), 3u);
    verify_graph(graph);
    infer_shapes(graph);
    EXPECT_EQ(value_type_str(*graph.value("layers.0.moe.experts.w13").type), c.type);
    const std::unique_ptr<ExecutionPlan> plan = compile_graph_file(file, CompileOptions());
    EXPECT_THAT(plan->describe(), HasSubstr("cpu_wna16 (auto"));
    EXPECT_THAT(plan->describe(), HasSubstr("cpu_eigen: rejected, quant"));
    const std::vector<float> got = last_logits(file);
    EXPECT_LT(testing::normalized_error(got, want), c.bound);
    EXPECT_GT(testing::normalized_error(got, want), 1e-5);
  }
}

class IntQuantizedTensorErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("wna16bad");
    graph_file_ = testing::write_model(
        dir_, int_spec(proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kUInt4, 32));
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
  std::filesystem::path dir_;
  std::filesystem::path graph_file_;
};

TEST_F(IntQuantizedTensorErrors, EachNamesTheTensor) {
  const std::string w13 = "tensor 'layers.0.moe.experts.w13'";
  EXPECT_EQ(check([](proto::Model&) {}), "");
  const std::vector<std::pair<std::function<void(proto::Model&)>, std::vector<std::string>>> cases =
      {
          {[](proto::Model& m) { m.set_format_version(2); }, {w13, "need format_version 3"}},
          {[&](proto::Model& m) {
             tensor(m, "layers.0.moe.experts.w13").mutable_quantization()->clear_logical_shape();
           },
           {w13, "logical_shape"}},
          {[&](proto::Model& m) {
             tensor(m, "layers.0.moe.experts.w13").mutable_quantization()->set_group_rows(2);
           },
           {w13, "group_rows 1"}},
          {[&](proto::Model& m) { tensor(m, "layers.0.moe.experts.w13").set_shape(2, 81); },
           {w13, "are stored as [16, 64, 80], got [16, 64, 81]"}},
          {[&](proto::Model& m) {
             tensor(m, "layers.0.moe.experts.w13.zero_point").set_shape(2, 4);
           },
           {w13, "zero_point tensor 'layers.0.moe.experts.w13.zero_point' has shape [16, 64, 4]",
            "need [16, 64, 5]"}},
          {[&](proto::Model& m) {
             tensor(m, "layers.0.moe.experts.w13.scale").set_dtype(proto::I32);
           },
           {w13, "is I32 (expected F32, BF16 or F16)"}},
          {[&](proto::Model& m) {
             tensor(m, "layers.0.moe.experts.w13")
                 .mutable_quantization()
                 ->set_element(proto::QUANT_ELEMENT_INT4);
           },
           {w13, "signed int4 codes take no zero point"}},
          {[&](proto::Model& m) {
             tensor(m, "layers.0.moe.experts.w13")
                 .mutable_quantization()
                 ->set_packing(proto::QUANT_PACKING_GPTQ);
           },
           {w13, "GPTQ uint4 codes are stored as I32, got U8"}},
          {[&](proto::Model& m) {
             tensor(m, "layers.0.moe.experts.w13").mutable_quantization()->set_g_idx("nowhere");
           },
           {w13, "g_idx tensor 'nowhere' is not declared"}},
          {[&](proto::Model& m) {
             for (proto::Node& n : *m.mutable_nodes()) {
               if (n.op() == "moe")
                 n.mutable_moe()->set_quant_scheme(proto::MOE_QUANT_INT8_WEIGHT_ONLY);
             }
           },
           {"INT8 / UINT8 codes"}},
      };
  for (const auto& [edit, fragments] : cases) {
    const std::string msg = check(edit);
    for (const std::string& f : fragments) EXPECT_THAT(msg, HasSubstr(f));
  }
}

}  // namespace
}  // namespace mg
