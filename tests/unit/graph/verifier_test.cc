// The verifier and shape inference reject every kind of broken graph with a message that names
// the file and the node or tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/graph/shape_inference.h"
#include "framework/graph/verifier.h"
#include "framework/io/graph_loader.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

class VerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("model");
    graph_file_ = testing::write_model(dir_, testing::small_spec());
  }

  // Verifies + infers the edited graph and returns the error message ("" if none).
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

  std::filesystem::path dir_;
  std::filesystem::path graph_file_;
};

TEST_F(VerifierTest, ValidGraphGetsATopologicalOrder) {
  Graph graph(load_graph(graph_file_), graph_file_);
  // Shuffle-proof: reverse the node list; the order must still respect dependencies.
  proto::Model reversed = graph.model();
  std::reverse(reversed.mutable_nodes()->begin(), reversed.mutable_nodes()->end());
  Graph g(reversed, graph_file_);
  verify_graph(g);
  infer_shapes(g);
  ASSERT_EQ(static_cast<int>(g.order().size()), g.num_nodes());
  std::set<std::string> produced = {"token_ids", "positions"};
  for (int i : g.order()) {
    for (const std::string& in : g.node(i).inputs()) {
      if (in.empty() || g.value(in).source == ValueSource::kWeight) continue;
      EXPECT_TRUE(produced.contains(in)) << g.node(i).name() << " reads " << in << " too early";
    }
    for (const std::string& out : g.node(i).outputs()) produced.insert(out);
  }
  EXPECT_EQ(value_type_str(*g.value("logits").type), "F32[T, 96]");

  // Typed for a BF16 compile, the float activations (the declared F32 logits included) are BF16.
  Graph bf16(graph.model(), graph_file_);
  verify_graph(bf16);
  infer_shapes(bf16, DType::kBF16);
  EXPECT_EQ(value_type_str(*bf16.value("logits").type), "BF16[T, 96]");
  EXPECT_EQ(value_type_str(*bf16.value("token_ids").type), "I32[T]");
}

TEST_F(VerifierTest, UnknownOp) {
  const std::string err =
      check([](proto::Model& m) { testing::find_node(m, "layers.0.mlp").set_op("fancy_mlp"); });
  EXPECT_THAT(err, HasSubstr("bad.pbtxt: node 'layers.0.mlp'"));
  EXPECT_THAT(err, HasSubstr("unknown op 'fancy_mlp'"));
}

TEST_F(VerifierTest, WrongParamsMessage) {
  const std::string err =
      check([](proto::Model& m) { testing::find_node(m, "layers.0.input_norm").mutable_linear(); });
  EXPECT_THAT(err, HasSubstr("node 'layers.0.input_norm'"));
  EXPECT_THAT(err, HasSubstr("expects 'rms_norm' parameters, got 'linear'"));
}

TEST_F(VerifierTest, InputNeitherDeclaredNorProduced) {
  const std::string err = check([](proto::Model& m) {
    testing::find_node(m, "layers.1.attn_residual").set_inputs(0, "nowhere");
  });
  EXPECT_THAT(err, HasSubstr("node 'layers.1.attn_residual'"));
  EXPECT_THAT(err, HasSubstr("input 'nowhere' is neither a graph input"));
}

TEST_F(VerifierTest, MissingTensorDeclaration) {
  const std::string err = check([](proto::Model& m) {
    auto* tensors = m.mutable_tensors();
    for (int i = 0; i < tensors->size(); ++i) {
      if (tensors->Get(i).name() == "layers.0.mlp.up_proj.weight") {
        tensors->DeleteSubrange(i, 1);
        break;
      }
    }
  });
  EXPECT_THAT(err, HasSubstr("input 'layers.0.mlp.up_proj.weight' is neither"));
}

TEST_F(VerifierTest, DuplicateNodeName) {
  const std::string err = check(
      [](proto::Model& m) { testing::find_node(m, "layers.1.mlp").set_name("layers.0.mlp"); });
  EXPECT_THAT(err, HasSubstr("node name 'layers.0.mlp' is used twice"));
}

TEST_F(VerifierTest, DuplicateOutput) {
  const std::string err = check([](proto::Model& m) {
    testing::find_node(m, "layers.1.mlp").set_outputs(0, "layers.0.mlp.out");
  });
  EXPECT_THAT(err,
              HasSubstr("output 'layers.0.mlp.out' is already produced by node 'layers.0.mlp'"));
}

TEST_F(VerifierTest, DuplicateTensor) {
  const std::string err = check([](proto::Model& m) { *m.add_tensors() = m.tensors(0); });
  EXPECT_THAT(err, HasSubstr("tensor 'embed_tokens.weight' is declared twice"));
}

TEST_F(VerifierTest, Cycle) {
  const std::string err = check([](proto::Model& m) {
    // layer 0's input norm now reads layer 0's FFN output: a loop through the whole layer.
    testing::find_node(m, "layers.0.input_norm").set_inputs(0, "layers.0.ffn_residual.out");
  });
  EXPECT_THAT(err, HasSubstr("the graph has a cycle through nodes"));
  EXPECT_THAT(err, HasSubstr("'layers.0.input_norm'"));
}

TEST_F(VerifierTest, MissingRequiredInput) {
  const std::string err =
      check([](proto::Model& m) { testing::find_node(m, "layers.0.mlp").set_inputs(2, ""); });
  EXPECT_THAT(err, HasSubstr("required input 2 (up) is missing"));
}

TEST_F(VerifierTest, WeightWhereActivationExpected) {
  const std::string err = check([](proto::Model& m) {
    testing::find_node(m, "layers.0.mlp").set_inputs(0, "layers.0.mlp.up_proj.weight");
  });
  EXPECT_THAT(err,
              HasSubstr("must be an activation, but 'layers.0.mlp.up_proj.weight' is a weight"));
}

TEST_F(VerifierTest, WrongWeightShapeNamesNodeAndShape) {
  const std::string err = check([](proto::Model& m) {
    for (auto& t : *m.mutable_tensors()) {
      if (t.name() == "layers.1.attn.o_proj.weight") t.set_shape(1, 31);
    }
  });
  EXPECT_THAT(err, HasSubstr("node 'layers.1.attn.o_proj'"));
  EXPECT_THAT(err, HasSubstr("31"));
}

TEST_F(VerifierTest, WrongInputDtype) {
  const std::string err =
      check([](proto::Model& m) { m.mutable_inputs(0)->set_dtype(proto::F32); });
  EXPECT_THAT(err, HasSubstr("node 'embed' (op embedding)"));
}

TEST_F(VerifierTest, UnspecifiedDtype) {
  const std::string err =
      check([](proto::Model& m) { m.mutable_tensors(3)->set_dtype(proto::DTYPE_UNSPECIFIED); });
  EXPECT_THAT(err, HasSubstr("tensor '"));
}

TEST_F(VerifierTest, OutputDeclaredWithWrongShape) {
  const std::string err = check([](proto::Model& m) { m.mutable_outputs(0)->set_shape(1, 95); });
  EXPECT_THAT(err,
              HasSubstr("graph output 'logits' is declared as F32[T, 95] but computes F32[T, 96]"));
}

TEST_F(VerifierTest, OutputNotProduced) {
  const std::string err = check([](proto::Model& m) { m.mutable_outputs(0)->set_name("probs"); });
  EXPECT_THAT(err, HasSubstr("graph output 'probs' is not produced by any node"));
}

TEST_F(VerifierTest, TooManyInputs) {
  const std::string err = check([](proto::Model& m) {
    testing::find_node(m, "layers.0.attn_residual").add_inputs("embed.out");
  });
  EXPECT_THAT(err, HasSubstr("has 3 inputs, the op takes at most 2"));
}

// Issue 18: declared shapes hold -1 (T) or sizes; -5 used to be taken for T.
TEST_F(VerifierTest, NegativeDimensionOtherThanTokens) {
  std::string err = check([](proto::Model& m) { m.mutable_outputs(0)->set_shape(0, -5); });
  EXPECT_THAT(err, HasSubstr("bad.pbtxt: graph output 'logits' has dimension 0 = -5"));
  err = check([](proto::Model& m) { m.mutable_inputs(1)->add_shape(-7); });
  EXPECT_THAT(err, HasSubstr("graph input 'positions' has dimension 1 = -7"));
}

// Issue 18: info.vocab_size bounds the ids the runtime accepts; it must match the graph.
TEST_F(VerifierTest, VocabSizeMustMatchLogitsAndEmbedding) {
  std::string err = check([](proto::Model& m) { m.mutable_info()->set_vocab_size(100); });
  EXPECT_THAT(err, HasSubstr("info.vocab_size is 100 but graph output 'logits' has 96 columns"));
  // An embedding table with fewer rows than the vocabulary (the logits still match).
  err = check([](proto::Model& m) {
    for (proto::TensorInfo& t : *m.mutable_tensors()) {
      if (t.name() == "embed_tokens.weight") t.set_shape(0, 90);
    }
  });
  EXPECT_THAT(err, HasSubstr("info.vocab_size is 96 but embedding table 'embed_tokens.weight'"));
  EXPECT_THAT(err, HasSubstr("has 90 rows"));
}

}  // namespace
}  // namespace mg
