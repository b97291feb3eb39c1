#include "framework/io/weight_store.h"

#include <gtest/gtest.h>

#include "framework/io/proto_dtype.h"
#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg {
namespace {

using testing::random_tensor;
using testing::span_of;
using testing::temp_dir;
using testing::throws_error_with;

proto::TensorInfo tensor_info(std::string name, proto::DType dtype, Shape shape, std::string file,
                              std::string key = "") {
  proto::TensorInfo info;
  info.set_name(std::move(name));
  info.set_dtype(dtype);
  for (int64_t d : shape) info.add_shape(d);
  info.set_file(std::move(file));
  info.set_key(std::move(key));
  return info;
}

class WeightStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("model");
    std::filesystem::create_directories(dir_ / "shards");
    write_safetensors(dir_ / "w.safetensors", {{"embed", embed_}, {"norm", norm_}});
    write_safetensors(dir_ / "shards" / "s1.safetensors", {{"lm_head", head_}});
  }

  std::filesystem::path dir_;
  const Tensor embed_ = random_tensor({16, 8}, 1);
  const Tensor norm_ = random_tensor({8}, 2);
  const Tensor head_ = random_tensor({16, 8}, 3);
};

TEST_F(WeightStoreTest, LoadsByNameOrKeyAndOpensEachFileOnce) {
  WeightStore store(dir_ / "model.pbtxt");
  const Tensor embed = store.load(tensor_info("embed", proto::F32, {16, 8}, "w.safetensors"));
  const Tensor norm =
      store.load(tensor_info("final_norm", proto::F32, {8}, "w.safetensors", "norm"));
  const Tensor head =
      store.load(tensor_info("head", proto::F32, {16, 8}, "shards/s1.safetensors", "lm_head"));
  // A second spelling of the same file shares the open file.
  store.load(tensor_info("embed2", proto::F32, {16, 8}, "shards/../w.safetensors", "embed"));
  EXPECT_EQ(store.num_open_files(), 2u);
  EXPECT_EQ(testing::max_abs_diff(span_of(embed), span_of(embed_)), 0.0);
  EXPECT_EQ(testing::max_abs_diff(span_of(norm), span_of(norm_)), 0.0);
  EXPECT_EQ(testing::max_abs_diff(span_of(head), span_of(head_)), 0.0);
}

TEST_F(WeightStoreTest, MissingWeightFile) {
  WeightStore store(dir_ / "model.pbtxt");
  EXPECT_TRUE(throws_error_with(
      [&] { store.load(tensor_info("x", proto::F32, {8}, "absent.safetensors")); },
      {"model.pbtxt: tensor 'x': weight file 'absent.safetensors' not found (looked in " +
       dir_.string() + ")"}));
}

TEST_F(WeightStoreTest, MissingKey) {
  WeightStore store(dir_ / "model.pbtxt");
  EXPECT_TRUE(throws_error_with(
      [&] { store.load(tensor_info("x", proto::F32, {8}, "w.safetensors", "nrm")); },
      {"model.pbtxt: tensor 'x': key 'nrm' not found in weight file 'w.safetensors'",
       "embed, norm"}));
}

TEST_F(WeightStoreTest, DtypeMismatch) {
  WeightStore store(dir_ / "model.pbtxt");
  EXPECT_TRUE(throws_error_with(
      [&] { store.load(tensor_info("norm", proto::BF16, {8}, "w.safetensors")); },
      {"model.pbtxt: tensor 'norm': dtype mismatch: the graph expects BF16[8] but "
       "'w.safetensors' holds 'norm' as F32[8]"}));
}

TEST_F(WeightStoreTest, ShapeMismatch) {
  WeightStore store(dir_ / "model.pbtxt");
  EXPECT_TRUE(throws_error_with(
      [&] {
        store.load(tensor_info("embed", proto::F32, {8, 16}, "w.safetensors"));
      },
      {"model.pbtxt: tensor 'embed': shape mismatch: the graph expects F32[8, 16] but "
       "'w.safetensors' holds 'embed' as F32[16, 8]"}));
}

TEST_F(WeightStoreTest, BadTensorInfo) {
  WeightStore store(dir_ / "model.pbtxt");
  EXPECT_TRUE(throws_error_with(
      [&] { store.load(tensor_info("x", proto::DTYPE_UNSPECIFIED, {8}, "w.safetensors")); },
      {"model.pbtxt: tensor 'x': dtype is unspecified"}));
  EXPECT_TRUE(throws_error_with([&] { store.load(tensor_info("x", proto::F32, {8}, "")); },
                                {"model.pbtxt: tensor 'x': no weight file given"}));
  EXPECT_TRUE(throws_error_with(
      [&] { store.load(tensor_info("x", proto::F32, {8}, (dir_ / "w.safetensors").string())); },
      {"model.pbtxt: tensor 'x'", "must be a path relative to the graph file's directory"}));
  EXPECT_TRUE(throws_error_with([&] { store.load(tensor_info("", proto::F32, {8}, "w.st")); },
                                {"model.pbtxt: a weight tensor has an empty name"}));
}

TEST_F(WeightStoreTest, InvalidWeightFileNamesGraphTensorAndFile) {
  testing::write_bytes(dir_ / "bad.safetensors", "not a safetensors file");
  WeightStore store(dir_ / "model.pbtxt");
  EXPECT_TRUE(throws_error_with(
      [&] { store.load(tensor_info("x", proto::F32, {8}, "bad.safetensors")); },
      {"model.pbtxt: tensor 'x': cannot use weight file 'bad.safetensors'", "bad.safetensors: "}));
}

TEST(ProtoDTypeTest, RoundTripsEveryDType) {
  for (int i = 0; i <= static_cast<int>(DType::kF8E5M2); ++i) {
    const auto dtype = static_cast<DType>(i);
    EXPECT_EQ(from_proto(to_proto(dtype), "ctx"), dtype) << dtype_name(dtype);
    // The proto enum spells each type as safetensors does.
    EXPECT_EQ(proto::DType_Name(to_proto(dtype)), dtype_name(dtype));
  }
}

TEST(ProtoDTypeTest, UnspecifiedAndUnknownValuesNameTheContext) {
  EXPECT_TRUE(throws_error_with([] { from_proto(proto::DTYPE_UNSPECIFIED, "g.pbtxt: input 'x'"); },
                                {"g.pbtxt: input 'x': dtype is unspecified (expected one of F32"}));
  EXPECT_TRUE(
      throws_error_with([] { from_proto(static_cast<proto::DType>(99), "g.pb: tensor 'w'"); },
                        {"g.pb: tensor 'w': unknown dtype value 99"}));
}

}  // namespace
}  // namespace mg
