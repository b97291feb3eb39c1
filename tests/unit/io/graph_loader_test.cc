#include "framework/io/graph_loader.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg {
namespace {

using testing::read_bytes;
using testing::temp_dir;
using testing::throws_error_with;
using testing::write_bytes;

// A small graph touching nested messages, oneof params, optional fields and enums.
proto::Model sample_model() {
  proto::Model m;
  m.set_name("tiny");
  m.set_format_version(kGraphFormatVersion);
  auto* in = m.add_inputs();
  in->set_name("token_ids");
  in->set_dtype(proto::I32);
  in->add_shape(-1);
  auto* out = m.add_outputs();
  out->set_name("logits");
  out->set_dtype(proto::F32);
  out->add_shape(-1);
  out->add_shape(32);
  auto* w = m.add_tensors();
  w->set_name("embed");
  w->set_dtype(proto::F32);
  w->add_shape(32);
  w->add_shape(8);
  w->set_file("weights.safetensors");
  auto* node = m.add_nodes();
  node->set_name("embed");
  node->set_op("embedding");
  node->add_inputs("token_ids");
  node->add_inputs("embed");
  node->add_outputs("h");
  node->mutable_embedding()->set_scale(2.0f);
  auto* rope = m.add_nodes();
  rope->set_name("rope");
  rope->set_op("rope");
  rope->mutable_rope()->set_pairing(proto::INTERLEAVED);
  rope->mutable_rope()->mutable_scaling()->set_type(proto::RopeScaling::YARN);
  rope->mutable_rope()->mutable_scaling()->set_beta_fast(32.0);
  m.mutable_info()->set_vocab_size(32);
  m.mutable_info()->set_eos_token_id(-1);
  return m;
}

bool same(const proto::Model& a, const proto::Model& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

class GraphLoaderTest : public ::testing::Test {
 protected:
  std::filesystem::path dir_ = temp_dir("graph");
};

TEST_F(GraphLoaderTest, TextRoundTrip) {
  const proto::Model model = sample_model();
  save_graph(dir_ / "model.pbtxt", model);
  EXPECT_NE(read_bytes(dir_ / "model.pbtxt").find("name: \"tiny\""), std::string::npos);
  EXPECT_TRUE(same(load_graph(dir_ / "model.pbtxt"), model));
}

TEST_F(GraphLoaderTest, BinaryRoundTrip) {
  const proto::Model model = sample_model();
  save_graph(dir_ / "model.pb", model);
  EXPECT_EQ(read_bytes(dir_ / "model.pb"), model.SerializeAsString());
  EXPECT_TRUE(same(load_graph(dir_ / "model.pb"), model));
}

TEST_F(GraphLoaderTest, TextWithCommentsLoads) {
  write_bytes(dir_ / "model.pbtxt", "# a comment\nformat_version: 1\nname: \"x\"\n");
  EXPECT_EQ(load_graph(dir_ / "model.pbtxt").name(), "x");
}

TEST_F(GraphLoaderTest, TruncatedTextNamesLineAndColumn) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(sample_model(), &text);
  const size_t cut = text.find("op: \"rope\"") + 6;  // inside the string literal
  write_bytes(dir_ / "model.pbtxt", text.substr(0, cut));
  const size_t line = 1 + std::count(text.begin(), text.begin() + cut, '\n');
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {fmt::format("model.pbtxt:{}:", line)}));
  // Cut between fields inside a message: the parser reports the missing '}'.
  write_bytes(dir_ / "model.pbtxt", "format_version: 1\nnodes {\n  name: \"a\"\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {"model.pbtxt:4:1: ", "Expected identifier"}));
}

TEST_F(GraphLoaderTest, UnknownFieldNamesLineAndColumn) {
  write_bytes(dir_ / "model.pbtxt",
              "format_version: 1\nnodes {\n  name: \"a\"\n    bogus_field: 3\n}\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {"model.pbtxt:4:", "no field named \"bogus_field\""}));
}

TEST_F(GraphLoaderTest, BadTokensNameLineAndColumn) {
  write_bytes(dir_ / "model.pbtxt", "format_version: 1\nname: tiny\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {"model.pbtxt:2:7: ", "Expected string"}));
  write_bytes(dir_ / "model.pbtxt", "format_version: -1\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {"model.pbtxt:1:17: ", "Expected integer"}));
  write_bytes(dir_ / "model.pbtxt", "format_version: 1\ntensors { dtype: F33 }\n");
  EXPECT_TRUE(
      throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); }, {"model.pbtxt:2:", "F33"}));
  write_bytes(dir_ / "model.pbtxt", std::string("format_version: 1 \x01\xff @@", 23));
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); }, {"model.pbtxt:1:"}));
}

TEST_F(GraphLoaderTest, TextStringsMustBeUtf8) {
  // Text escapes can spell any bytes; the binary format (and every name printer) needs UTF-8.
  write_bytes(dir_ / "model.pbtxt", "format_version: 1\nname: \"ok\\xff\"\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {"model.pbtxt:2:1: name is not valid UTF-8"}));
  write_bytes(dir_ / "model.pbtxt",
              "format_version: 1\nnodes {\n  inputs: \"a\"\n  inputs: \"\\355\\240\\200\"\n}\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {"model.pbtxt:4:3: nodes[0].inputs[1] is not valid UTF-8"}));
  write_bytes(dir_ / "model.pbtxt", "format_version: 1\nname: \"caf\\303\\251\"\n");
  EXPECT_EQ(load_graph(dir_ / "model.pbtxt").name(), "caf\u00e9");
}

TEST_F(GraphLoaderTest, TruncatedBinary) {
  const std::string bytes = sample_model().SerializeAsString();
  // The first field is the name "tiny": cutting inside it leaves a length past the end.
  write_bytes(dir_ / "model.pb", bytes.substr(0, 4));
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pb"); },
                                {"model.pb: not a valid binary moegraph graph (protobuf parse "
                                 "failed)"}));
  write_bytes(dir_ / "model.pb", bytes.substr(0, bytes.size() - 3));
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pb"); },
                                {"model.pb: not a valid binary moegraph graph"}));
}

TEST_F(GraphLoaderTest, GarbledBinary) {
  write_bytes(dir_ / "model.pb", "\xff\xff\xff\xff\xff\xff");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pb"); },
                                {"model.pb: not a valid binary moegraph graph (protobuf parse "
                                 "failed)"}));
  // Bytes that parse, but as fields the schema does not have: format_version 1, field 15 = 1,
  // and field 9 inside the first node.
  write_bytes(dir_ / "model.pb", std::string("\x10\x01\x78\x01\x32\x02\x48\x01", 8));
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pb"); },
                                {"model.pb: not a valid binary moegraph graph (fields unknown to "
                                 "format version 3: #15, nodes[0].#9)"}));
  // A text file saved as .pb is not mistaken for a graph.
  write_bytes(dir_ / "model.pb", "format_version: 1\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pb"); },
                                {"model.pb: not a valid binary moegraph graph"}));
}

TEST_F(GraphLoaderTest, FormatVersionMustBeKnown) {
  write_bytes(dir_ / "model.pbtxt", "name: \"x\"\n");
  EXPECT_TRUE(
      throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                        {"model.pbtxt: missing format_version (expected format_version: 3"}));
  write_bytes(dir_ / "model.pbtxt", "format_version: 4\n");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pbtxt"); },
                                {"model.pbtxt: format_version 4 was written by a newer moegraph "
                                 "(this build reads versions 1 to 3)"}));
  // Version-2 files (FP8 quantized tensors, before integer codes) load as they did.
  write_bytes(dir_ / "model.pbtxt", "format_version: 2\nname: \"v2\"\n");
  EXPECT_EQ(load_graph(dir_ / "model.pbtxt").name(), "v2");
  // Version-1 files (written before quantized tensors existed) still load.
  write_bytes(dir_ / "model.pbtxt", "format_version: 1\nname: \"old\"\n");
  EXPECT_EQ(load_graph(dir_ / "model.pbtxt").name(), "old");
  proto::Model newer = sample_model();
  newer.set_format_version(7);
  save_graph(dir_ / "model.pb", newer);
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pb"); },
                                {"model.pb: format_version 7 was written by a newer moegraph"}));
  proto::Model missing = sample_model();
  missing.clear_format_version();
  save_graph(dir_ / "model.pb", missing);
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.pb"); },
                                {"model.pb: missing format_version"}));
}

TEST_F(GraphLoaderTest, UnknownExtensionMissingFileAndDirectory) {
  write_bytes(dir_ / "model.json", "{}");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "model.json"); },
                                {"model.json: unknown graph file extension '.json' (expected "
                                 ".pbtxt for text or .pb for binary)"}));
  EXPECT_TRUE(throws_error_with([&] { save_graph(dir_ / "model", sample_model()); },
                                {"model: unknown graph file extension ''"}));
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "absent.pbtxt"); },
                                {"absent.pbtxt: file not found"}));
  std::filesystem::create_directories(dir_ / "dir.pb");
  EXPECT_TRUE(throws_error_with([&] { load_graph(dir_ / "dir.pb"); },
                                {"dir.pb: is a directory, not a regular file"}));
}

TEST_F(GraphLoaderTest, ParseFromMemoryMatchesLoad) {
  const proto::Model model = sample_model();
  std::string text;
  google::protobuf::TextFormat::PrintToString(model, &text);
  EXPECT_TRUE(same(parse_graph_text(text, "mem"), model));
  EXPECT_TRUE(same(parse_graph_binary(model.SerializeAsString(), "mem"), model));
  EXPECT_TRUE(
      throws_error_with([] { parse_graph_text("nodes {", "mem.pbtxt"); }, {"mem.pbtxt:1:8: "}));
}

}  // namespace
}  // namespace mg
