#include "framework/io/safetensors.h"

#include <cstring>

#include <gtest/gtest.h>

#include "framework/io/mmap_file.h"
#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg {
namespace {

using testing::random_tensor;
using testing::safetensors_bytes;
using testing::span_of;
using testing::temp_dir;
using testing::throws_error_with;
using testing::write_bytes;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// A tensor of `dtype` whose bytes are 1, 2, 3, ... (mod 251).
Tensor byte_pattern_tensor(DType dtype, Shape shape) {
  Tensor t = Tensor::empty_cpu(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(1 + i % 251);
  return t;
}

TEST(MappedFileTest, MapsTheWholeFile) {
  const auto path = temp_dir("mmap") / "bytes.bin";
  write_bytes(path, "hello mmap");
  auto file = MappedFile::open(path);
  EXPECT_EQ(file->size(), 10u);
  EXPECT_EQ(file->text(), "hello mmap");
  EXPECT_EQ(file->path(), path);
}

TEST(MappedFileTest, RejectsMissingDirectoryAndEmpty) {
  const auto dir = temp_dir("mmap");
  EXPECT_TRUE(throws_error_with([&] { MappedFile::open(dir / "absent.bin"); },
                                {"absent.bin", "file not found"}));
  EXPECT_TRUE(throws_error_with([&] { MappedFile::open(dir); },
                                {dir.string(), "is a directory, not a regular file"}));
  write_bytes(dir / "empty.bin", "");
  EXPECT_TRUE(throws_error_with([&] { MappedFile::open(dir / "empty.bin"); },
                                {"empty.bin", "expected a non-empty file, found 0 bytes"}));
}

TEST(SafetensorsTest, RoundTripKeepsOrderBytesAndMetadata) {
  const auto path = temp_dir("st") / "weights.safetensors";
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"z.first", random_tensor({4, 8}, 1)},
      {"a.second", byte_pattern_tensor(DType::kI32, {3})},
      {"bf16", byte_pattern_tensor(DType::kBF16, {2, 3, 5})},
      {"scalar", byte_pattern_tensor(DType::kF64, {})},
      {"empty", Tensor::empty_cpu(DType::kF32, {0, 7})},
      {"bytes", byte_pattern_tensor(DType::kU8, {5})},
      {"fp8", byte_pattern_tensor(DType::kF8E4M3, {2, 2})},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "x"}};
  write_safetensors(path, tensors, metadata);

  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata(), metadata);
  EXPECT_EQ(file->data_offset() % 8, 0u) << "the header is padded so data starts 8-byte aligned";
  ASSERT_EQ(file->entries().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, expected] = tensors[i];
    const SafetensorsEntry& entry = file->entries()[i];
    EXPECT_EQ(entry.name, name) << "entries come in file order";
    EXPECT_EQ(entry.dtype, expected.dtype());
    EXPECT_EQ(entry.shape, expected.shape());
    EXPECT_EQ(entry.nbytes(), expected.nbytes());
    ASSERT_EQ(file->find(name), &entry);
    EXPECT_TRUE(same_bytes(file->tensor(name), expected)) << name;
  }
  EXPECT_EQ(file->find("absent"), nullptr);
  EXPECT_TRUE(throws_error_with([&] { file->tensor("absent"); },
                                {"weights.safetensors", "no tensor named 'absent'"}));
}

TEST(SafetensorsTest, TensorIsZeroCopyAndKeepsTheMappingAlive) {
  const auto path = temp_dir("st") / "w.safetensors";
  const Tensor expected = random_tensor({16, 16}, 7);
  write_safetensors(path, {{"w", expected}});

  Tensor view;
  size_t data_offset = 0;
  {
    auto file = SafetensorsFile::open(path);
    view = file->tensor("w");
    data_offset = file->data_offset();
  }
  // The view starts data_offset bytes into a page-aligned mapping, not in a fresh copy.
  const auto file_start = reinterpret_cast<uintptr_t>(view.raw()) - data_offset;
  EXPECT_EQ(file_start % 4096, 0u);
  EXPECT_EQ(view.buffer()->size(), expected.nbytes());
  // The file object is gone; the view still reads the mapped bytes.
  EXPECT_EQ(testing::max_abs_diff(span_of(view), span_of(expected)), 0.0);
}

TEST(SafetensorsTest, MisalignedEntryIsCopiedWithTheRightValues) {
  // U8[3] at [0, 3) puts the F32 entry at data offset 3: legal, but not 4-byte aligned.
  const float values[2] = {1.5f, -2.25f};
  std::string data = "abc";
  data.append(reinterpret_cast<const char*>(values), sizeof(values));
  const std::string header = R"({"u":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                             R"("f":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  const auto path = temp_dir("st") / "odd.safetensors";
  write_bytes(path, safetensors_bytes(padded, data));

  auto file = SafetensorsFile::open(path);
  const Tensor f = file->tensor("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.raw()) % alignof(float), 0u);
  EXPECT_EQ(f.data<float>()[0], 1.5f);
  EXPECT_EQ(f.data<float>()[1], -2.25f);
  EXPECT_EQ(std::string(static_cast<const char*>(file->tensor("u").raw()), 3), "abc");
}

TEST(SafetensorsTest, ParseFromMemoryMatchesOpen) {
  const auto path = temp_dir("st") / "w.safetensors";
  write_safetensors(path, {{"a", random_tensor({3, 5}, 2)}, {"b", random_tensor({7}, 3)}});
  const std::string bytes = testing::read_bytes(path);
  auto file = SafetensorsFile::parse(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "in-memory");
  EXPECT_EQ(file->path(), "in-memory");
  ASSERT_EQ(file->entries().size(), 2u);
  EXPECT_TRUE(same_bytes(file->tensor("b"), SafetensorsFile::open(path)->tensor("b")));
}

TEST(SafetensorsTest, WriteRejectsBadNames) {
  const auto path = temp_dir("st") / "w.safetensors";
  const Tensor t = random_tensor({2}, 1);
  EXPECT_TRUE(throws_error_with(
      [&] {
        write_safetensors(path, {{"a", t}, {"a", t}});
      },
      {"w.safetensors", "tensor 'a' is listed twice"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        write_safetensors(path, {{"", t}});
      },
      {"w.safetensors", "empty name"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        write_safetensors(path, {{"__metadata__", t}});
      },
      {"w.safetensors", "reserved"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        write_safetensors(path, {{"u", Tensor()}});
      },
      {"w.safetensors", "tensor 'u' is undefined"}));
  EXPECT_FALSE(std::filesystem::exists(path)) << "nothing is written when the input is bad";
}

// ---- bad files --------------------------------------------------------------------------------

class SafetensorsBadInputTest : public ::testing::Test {
 protected:
  // Writes a file with `header` (padded to 8 bytes) and `data`, and expects open() to throw an
  // mg::Error naming the file and holding every part.
  void write(std::string header, std::string_view data) {
    header.append((8 - header.size() % 8) % 8, ' ');
    write_bytes(path_, safetensors_bytes(header, data));
  }
  ::testing::AssertionResult rejects(std::string header, std::string_view data,
                                     std::initializer_list<std::string_view> parts) {
    write(std::move(header), data);
    return throws_error_with([&] { SafetensorsFile::open(path_); }, parts);
  }
  ::testing::AssertionResult rejects_bytes(std::string_view bytes,
                                           std::initializer_list<std::string_view> parts) {
    write_bytes(path_, bytes);
    return throws_error_with([&] { SafetensorsFile::open(path_); }, parts);
  }

  const std::filesystem::path path_ = temp_dir("bad") / "weights.safetensors";
  const std::string data128_ = std::string(128, '\x01');
};

TEST_F(SafetensorsBadInputTest, FileShorterThanTheLengthField) {
  EXPECT_TRUE(rejects_bytes(std::string("\x10\x00\x00", 3),
                            {"weights.safetensors", "expected at least 8 bytes", "found 3"}));
}

TEST_F(SafetensorsBadInputTest, EveryTruncationOfAValidFileIsRejected) {
  write_safetensors(path_, {{"a", random_tensor({4, 4}, 1)}, {"b", random_tensor({3}, 2)}});
  const std::string full = testing::read_bytes(path_);
  ASSERT_NO_THROW(SafetensorsFile::open(path_));
  for (size_t n = 0; n < full.size(); ++n) {
    EXPECT_TRUE(rejects_bytes(full.substr(0, n), {"weights.safetensors"})) << "cut at " << n;
  }
}

TEST_F(SafetensorsBadInputTest, HeaderLengthPastEndOfFile) {
  std::string bytes = safetensors_bytes("{}", "");
  bytes[0] = '\xe8';  // claims 1000 header bytes; the file has 2
  bytes[1] = '\x03';
  EXPECT_TRUE(rejects_bytes(
      bytes, {"weights.safetensors", "header length 1000 runs past the end", "at most 2"}));
  bytes[7] = '\x80';  // 2^63 + 1000: must not wrap around
  EXPECT_TRUE(rejects_bytes(bytes, {"weights.safetensors", "runs past the end"}));
}

TEST_F(SafetensorsBadInputTest, HeaderLongerThanTheLimit) {
  // A sparse file large enough to hold the claimed header, so only the size limit can refuse it.
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  write_bytes(path_, bytes);
  std::filesystem::resize_file(path_, 8 + n);
  EXPECT_TRUE(throws_error_with([&] { SafetensorsFile::open(path_); },
                                {"weights.safetensors", "exceeds the limit of 100000000 bytes"}));
}

TEST_F(SafetensorsBadInputTest, GarbageJsonNamesTheBytePosition) {
  EXPECT_TRUE(rejects(R"({"a": {"dtype": F32}})", "",
                      {"weights.safetensors", "header is not valid JSON at byte 24 of the file"}));
  EXPECT_TRUE(
      rejects(std::string("\xff\xfe garbage", 10), "", {"weights.safetensors", "not valid JSON"}));
  EXPECT_TRUE(rejects("", "", {"weights.safetensors", "not valid JSON at byte 8"}));
}

TEST_F(SafetensorsBadInputTest, HeaderThatIsNotAnObject) {
  EXPECT_TRUE(rejects("[1, 2]", "",
                      {"weights.safetensors", "header must be a JSON object", "found an array"}));
}

TEST_F(SafetensorsBadInputTest, UnknownDtype) {
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})",
                      std::string(1, '\0'),
                      {"weights.safetensors: tensor 'w': unknown dtype \"F4\"", "known: F32"}));
  EXPECT_TRUE(rejects(R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})",
                      std::string(4, '\0'),
                      {"weights.safetensors: tensor 'w': dtype must be a string"}));
}

TEST_F(SafetensorsBadInputTest, OffsetsOutsideTheFile) {
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "F32", "shape": [32], "data_offsets": [0, 128]}})",
                      std::string(64, '\0'),
                      {"weights.safetensors: tensor 'w': data_offsets [0, 128] run past the end "
                       "of the data section (64 bytes)"}));
  EXPECT_TRUE(
      rejects(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551615, 0]}})",
              std::string(8, '\0'), {"weights.safetensors: tensor 'w'", "data_offsets"}));
}

TEST_F(SafetensorsBadInputTest, BeginAfterEnd) {
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [64, 32]}})",
                      data128_,
                      {"weights.safetensors: tensor 'w': data_offsets [64, 32] begin after"}));
}

TEST_F(SafetensorsBadInputTest, WrongByteSize) {
  EXPECT_TRUE(rejects(
      R"({"layers.0.w": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 96]}})", data128_,
      {"weights.safetensors: tensor 'layers.0.w': data_offsets [0, 96] hold 96 bytes but "
       "F32[4, 8] needs 128"}));
}

TEST_F(SafetensorsBadInputTest, OverlappingEntries) {
  EXPECT_TRUE(rejects(R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},)"
                      R"( "b": {"dtype": "F32", "shape": [8], "data_offsets": [16, 48]}})",
                      data128_,
                      {"weights.safetensors: tensor 'b': data_offsets [16, 48] overlap those of "
                       "tensor 'a' [0, 32]"}));
  // A long entry covering two later ones: the second overlap is still found.
  EXPECT_TRUE(rejects(R"({"big": {"dtype": "U8", "shape": [100], "data_offsets": [0, 100]},)"
                      R"( "x": {"dtype": "U8", "shape": [4], "data_offsets": [100, 104]},)"
                      R"( "y": {"dtype": "U8", "shape": [4], "data_offsets": [50, 54]}})",
                      data128_, {"tensor 'y'", "overlap those of tensor 'big'"}));
  // Empty entries hold no bytes and may sit anywhere.
  write(R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},)"
        R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]}})",
        data128_);
  EXPECT_NO_THROW(SafetensorsFile::open(path_));
}

TEST_F(SafetensorsBadInputTest, ShapeMustBeNonNegativeIntegers) {
  for (const char* shape : {"[4, 8.5]", "[\"4\"]", "[-1]", "4", "[true]", "null"}) {
    EXPECT_TRUE(rejects(fmt::format(R"({{"w": {{"dtype": "U8", "shape": {}, )"
                                    R"("data_offsets": [0, 4]}}}})",
                                    shape),
                        std::string(8, '\0'),
                        {"weights.safetensors: tensor 'w': shape must be an array of non-negative "
                         "integers"}))
        << shape;
  }
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "U8", "shape": [[4]], "data_offsets": [0, 4]}})",
                      std::string(8, '\0'),
                      {"weights.safetensors: tensor 'w': 'shape' holds a nested array"}));
}

TEST_F(SafetensorsBadInputTest, ShapeTooLargeToAddress) {
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], )"
                      R"("data_offsets": [0, 0]}})",
                      "",
                      {"weights.safetensors: tensor 'w': F32[4294967296, 4294967296, 0] is "
                       "too large to address"}));
}

TEST_F(SafetensorsBadInputTest, MalformedEntries) {
  EXPECT_TRUE(rejects(R"({"w": [1, 2]})", "",
                      {"weights.safetensors: tensor 'w': expected an object with dtype, shape and "
                       "data_offsets, found an array"}));
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "U8", "shape": [1]}})", "",
                      {"weights.safetensors: tensor 'w': missing field 'data_offsets'"}));
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1}})",
                      std::string(8, '\0'),
                      {"weights.safetensors: tensor 'w': unknown field 'x'"}));
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", "",
                      {"weights.safetensors: tensor 'w': data_offsets must be [begin, end]"}));
  EXPECT_TRUE(rejects(R"({"": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})", "",
                      {"weights.safetensors", "empty name"}));
}

TEST_F(SafetensorsBadInputTest, DuplicateKeys) {
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]},)"
                      R"( "w": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})",
                      "", {"weights.safetensors: header lists tensor 'w' twice"}));
  EXPECT_TRUE(rejects(R"({"w": {"dtype": "U8", "dtype": "F32", "shape": [0], )"
                      R"("data_offsets": [0, 0]}})",
                      "", {"weights.safetensors: tensor 'w': key 'dtype' appears twice"}));
}

TEST_F(SafetensorsBadInputTest, MetadataMustBeAnObjectOfStrings) {
  EXPECT_TRUE(rejects(R"({"__metadata__": {"format": 1}})", "",
                      {"weights.safetensors: __metadata__ key 'format': expected a string, found "
                       "an integer"}));
  EXPECT_TRUE(rejects(R"({"__metadata__": "pt"})", "",
                      {"weights.safetensors: __metadata__ must be an object of strings"}));
}

TEST_F(SafetensorsBadInputTest, DeepNestingIsRefusedWhileParsing) {
  EXPECT_TRUE(rejects(std::string(100000, '[') + std::string(100000, ']'), "",
                      {"weights.safetensors", "nests arrays or objects deeper"}));
}

}  // namespace
}  // namespace mg
