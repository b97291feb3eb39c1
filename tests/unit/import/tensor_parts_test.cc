// WeightStore: tensors assembled from several safetensors entries (TensorInfo.parts), the way
// the Hugging Face importer stacks per-expert weights into one [E, ...] tensor.
#include <gtest/gtest.h>

#include "framework/io/safetensors.h"
#include "framework/io/weight_store.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::random_tensor;
using testing::span_of;
using testing::temp_dir;

proto::TensorInfo assembled(const std::string& name, proto::DType dtype, const Shape& shape,
                            const std::string& file,
                            const std::vector<std::pair<std::string, std::string>>& parts) {
  proto::TensorInfo info;
  info.set_name(name);
  info.set_dtype(dtype);
  for (int64_t d : shape) info.add_shape(d);
  info.set_file(file);
  for (const auto& [part_file, key] : parts) {
    proto::TensorPart* p = info.add_parts();
    p->set_file(part_file);
    p->set_key(key);
  }
  return info;
}

// Expects `fn` to throw mg::Error whose message holds every fragment.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(what.find(f), std::string::npos) << "'" << f << "' not in: " << what;
    }
    EXPECT_EQ(what.find('\n'), std::string::npos) << "message spans several lines: " << what;
  }
}

class TensorPartsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("parts");
    // Two "shards", as in a sharded Hugging Face checkpoint.
    write_safetensors(dir_ / "a.safetensors",
                      {{"e0.w1", w1_[0]}, {"e0.w3", w3_[0]}, {"e1.w1", w1_[1]}});
    write_safetensors(dir_ / "b.safetensors",
                      {{"e1.w3", w3_[1]}, {"bf16", Tensor::empty_cpu(DType::kBF16, {3, 4})}});
  }

  std::filesystem::path dir_;
  const Tensor w1_[2] = {random_tensor({3, 4}, 1), random_tensor({3, 4}, 2)};
  const Tensor w3_[2] = {random_tensor({3, 4}, 3), random_tensor({3, 4}, 4)};
};

TEST_F(TensorPartsTest, ConcatenatesPartsInOrderAcrossFiles) {
  WeightStore store(dir_ / "model.pbtxt");
  // w13 [E=2, 2I=6, H=4] = w1_0, w3_0, w1_1, w3_1; parts without a file use TensorInfo.file.
  const Tensor w13 = store.load(assembled(
      "w13", proto::F32, {2, 6, 4}, "a.safetensors",
      {{"", "e0.w1"}, {"", "e0.w3"}, {"a.safetensors", "e1.w1"}, {"b.safetensors", "e1.w3"}}));
  ASSERT_EQ(w13.shape(), (Shape{2, 6, 4}));
  const float* got = w13.data<float>();
  const Tensor* order[] = {&w1_[0], &w3_[0], &w1_[1], &w3_[1]};
  for (int part = 0; part < 4; ++part) {
    const std::span<const float> expected = span_of(*order[part]);
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(got[part * 12 + static_cast<int>(i)], expected[i]) << "part " << part << " @" << i;
    }
  }
  EXPECT_EQ(store.num_open_files(), 2u);
}

TEST_F(TensorPartsTest, PartsMayHaveAnyShapeWhenSizesAddUp) {
  WeightStore store(dir_ / "model.pbtxt");
  const Tensor flat = store.load(
      assembled("flat", proto::F32, {24}, "a.safetensors", {{"", "e0.w1"}, {"", "e1.w1"}}));
  EXPECT_EQ(flat.data<float>()[12], span_of(w1_[1])[0]);
}

TEST_F(TensorPartsTest, RowRangesSplitAFusedTensor) {
  WeightStore store(dir_ / "model.pbtxt");
  // Rows [1, 3) of e0.w1 then row 0 of e1.w1: a [3, 4] tensor.
  proto::TensorInfo info =
      assembled("split", proto::F32, {3, 4}, "a.safetensors", {{"", "e0.w1"}, {"", "e1.w1"}});
  info.mutable_parts(0)->set_row_begin(1);
  info.mutable_parts(0)->set_row_end(3);
  info.mutable_parts(1)->set_row_begin(0);
  info.mutable_parts(1)->set_row_end(1);
  const Tensor split = store.load(info);
  const float* got = split.data<float>();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], span_of(w1_[0])[4 + i]) << i;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[8 + i], span_of(w1_[1])[i]) << i;

  info.mutable_parts(1)->set_row_begin(2);
  info.mutable_parts(1)->set_row_end(4);
  expect_error([&] { store.load(info); },
               {"tensor 'split': part 1 ('e1.w1'): rows [2, 4) are not a range inside 'e1.w1' "
                "F32[3, 4] (0 <= begin < end <= 3)"});
}

TEST_F(TensorPartsTest, MissingPartKeyNamesTensorPartAndFile) {
  WeightStore store(dir_ / "model.pbtxt");
  expect_error(
      [&] {
        store.load(assembled("layers.0.w13", proto::F32, {2, 6, 4}, "a.safetensors",
                             {{"", "e0.w1"}, {"", "e0.w3"}, {"", "e1.w1"}, {"", "e1.w3"}}));
      },
      {"model.pbtxt: tensor 'layers.0.w13': part 3 ('e1.w3'): key 'e1.w3' not found in weight "
       "file 'a.safetensors'"});
}

TEST_F(TensorPartsTest, PartDtypeMismatch) {
  WeightStore store(dir_ / "model.pbtxt");
  expect_error(
      [&] {
        store.load(assembled("w", proto::F32, {2, 3, 4}, "b.safetensors",
                             {{"a.safetensors", "e0.w1"}, {"", "bf16"}}));
      },
      {"tensor 'w': part 1 ('bf16'): dtype mismatch: the graph expects every part as F32 but "
       "'b.safetensors' holds 'bf16' as BF16[3, 4]"});
}

TEST_F(TensorPartsTest, SizesMustAddUp) {
  WeightStore store(dir_ / "model.pbtxt");
  expect_error(
      [&] {
        store.load(assembled("w", proto::F32, {2, 6, 4}, "a.safetensors",
                             {{"", "e0.w1"}, {"", "e0.w3"}, {"", "e1.w1"}}));
      },
      {"tensor 'w': the 3 parts hold 144 bytes but F32[2, 6, 4] needs 192 bytes"});
  expect_error(
      [&] {
        store.load(assembled("w", proto::F32, {2, 3, 4}, "a.safetensors",
                             {{"", "e0.w1"}, {"", "e0.w3"}, {"", "e1.w1"}}));
      },
      {"tensor 'w': the parts hold more than the 96 bytes of F32[2, 3, 4] (part 2 ends at byte "
       "144)"});
}

TEST_F(TensorPartsTest, BadPartDeclarations) {
  WeightStore store(dir_ / "model.pbtxt");
  expect_error(
      [&] {
        store.load(assembled("w", proto::F32, {12}, "a.safetensors", {{"", ""}}));
      },
      {"tensor 'w': part 0 names no key"});
  expect_error(
      [&] {
        store.load(
            assembled("w", proto::F32, {12}, "a.safetensors", {{"missing.safetensors", "x"}}));
      },
      {"tensor 'w': part 0 ('x'): weight file 'missing.safetensors' not found"});
  proto::TensorInfo with_key = assembled("w", proto::F32, {12}, "a.safetensors", {{"", "e0.w1"}});
  with_key.set_key("e0.w1");
  expect_error([&] { store.load(with_key); },
               {"tensor 'w': field 'key' ('e0.w1') must be empty when the tensor is assembled "
                "from 1 parts"});
}

}  // namespace
}  // namespace mg
