#include "framework/io/npy.h"

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg {
namespace {

using testing::read_bytes;
using testing::temp_dir;
using testing::throws_error_with;
using testing::write_bytes;

// np.save(f, np.arange(6, dtype='<i4').reshape(2, 3)) with numpy 2.x.
const std::string kNumpyArangeI4 = std::string(
    "\x93NUMPY\x01\x00v\x00{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }"
    "                                                          \n"
    "\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05\x00\x00"
    "\x00",
    128 + 24);

// A v1.0 npy file with the given dict (padded as numpy pads it) and data.
std::string npy_bytes(std::string dict, std::string_view data) {
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.resize(total - 10 - 1, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out += data;
  return out;
}

Tensor pattern_tensor(DType dtype, Shape shape) {
  Tensor t = Tensor::empty_cpu(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(3 + 7 * i);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  }
  return t;
}

TEST(NpyTest, RoundTripsEveryWritableTypeAndShape) {
  const auto dir = temp_dir("npy");
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kI64, DType::kI32, DType::kI16,
                      DType::kI8, DType::kU8, DType::kBool}) {
    for (const Shape& shape : {Shape{2, 3}, Shape{5}, Shape{}, Shape{0, 4}, Shape{2, 1, 3, 1}}) {
      const Tensor t = pattern_tensor(dtype, shape);
      const auto path = dir / "t.npy";
      write_npy(path, t);
      EXPECT_EQ(read_bytes(path).size() % 64, t.nbytes() % 64) << "data starts 64-byte aligned";
      const Tensor back = read_npy(path);
      EXPECT_EQ(back.dtype(), dtype);
      EXPECT_EQ(back.shape(), shape);
      ASSERT_EQ(back.nbytes(), t.nbytes());
      EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0) << t.str();
    }
  }
}

TEST(NpyTest, WritesExactlyWhatNumpyWrites) {
  Tensor t = Tensor::empty_cpu(DType::kI32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<int32_t>()[i] = i;
  const auto path = temp_dir("npy") / "arange.npy";
  write_npy(path, t);
  EXPECT_EQ(read_bytes(path), kNumpyArangeI4);
}

TEST(NpyTest, ReadsNumpyFilesOfVersionOneAndTwo) {
  const auto dir = temp_dir("npy");
  write_bytes(dir / "v1.npy", kNumpyArangeI4);
  const Tensor v1 = read_npy(dir / "v1.npy");
  ASSERT_EQ(v1.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v1.data<int32_t>()[i], i);

  // Version 2.0: a 4-byte header length; Python-2 style "L" suffixes on the dims.
  const double values[2] = {1.5, -2.0};
  std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }";
  dict.resize((12 + dict.size() + 1 + 63) / 64 * 64 - 12 - 1, ' ');
  dict += '\n';
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8);
  v2 += static_cast<char>(dict.size());
  v2 += std::string(3, '\0');
  v2 += dict;
  v2.append(reinterpret_cast<const char*>(values), sizeof(values));
  write_bytes(dir / "v2.npy", v2);
  const Tensor t = read_npy(dir / "v2.npy");
  ASSERT_EQ(t.dtype(), DType::kF64);
  ASSERT_EQ(t.shape(), (Shape{2}));
  EXPECT_EQ(t.data<double>()[0], 1.5);
  EXPECT_EQ(t.data<double>()[1], -2.0);
}

TEST(NpyTest, NumpyReadsWhatWeWrite) {
  if (std::system("python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with numpy is not installed; the byte-exact test above still runs";
  }
  const auto dir = temp_dir("npy");
  Tensor t = Tensor::empty_cpu(DType::kF32, {3, 4});
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = 0.5f * static_cast<float>(i) - 2.0f;
  write_npy(dir / "f.npy", t);
  write_npy(dir / "u.npy", pattern_tensor(DType::kU8, {7}));
  const std::string cmd =
      "python3 -c \"import numpy as np, sys; d = sys.argv[1]; "
      "a = np.load(d + '/f.npy'); u = np.load(d + '/u.npy'); "
      "assert a.dtype == np.float32 and a.shape == (3, 4), a; "
      "assert (a.ravel() == np.arange(12) * 0.5 - 2).all(), a; "
      "assert u.dtype == np.uint8 and u.shape == (7,), u\" " +
      dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(NpyTest, WriteRejectsTypesNumpyLacks) {
  const auto path = temp_dir("npy") / "bf16.npy";
  EXPECT_TRUE(throws_error_with([&] { write_npy(path, Tensor::empty_cpu(DType::kBF16, {2})); },
                                {"bf16.npy", "numpy has no BF16 type"}));
  EXPECT_TRUE(
      throws_error_with([&] { write_npy(path, Tensor()); }, {"bf16.npy", "undefined tensor"}));
}

class NpyBadInputTest : public ::testing::Test {
 protected:
  ::testing::AssertionResult rejects(std::string_view bytes,
                                     std::initializer_list<std::string_view> parts) {
    write_bytes(path_, bytes);
    return throws_error_with([&] { read_npy(path_); }, parts);
  }
  const std::filesystem::path path_ = temp_dir("npy") / "bad.npy";
};

TEST_F(NpyBadInputTest, NotAnNpyFile) {
  EXPECT_TRUE(rejects("PK\x03\x04 a zip file", {"bad.npy: not an npy file"}));
  EXPECT_TRUE(rejects("\x93NUMP", {"bad.npy: not an npy file"}));
  EXPECT_TRUE(throws_error_with([&] { read_npy(path_.parent_path() / "absent.npy"); },
                                {"absent.npy: file not found"}));
}

TEST_F(NpyBadInputTest, EveryTruncationIsRejected) {
  for (size_t n = 1; n < kNumpyArangeI4.size(); ++n) {
    EXPECT_TRUE(rejects(kNumpyArangeI4.substr(0, n), {"bad.npy"})) << "cut at " << n;
  }
  EXPECT_TRUE(
      rejects(kNumpyArangeI4.substr(0, 140),
              {"bad.npy: npy file truncated: '<i4' (2, 3) needs 24 bytes of data, found 12"}));
}

TEST_F(NpyBadInputTest, TrailingBytes) {
  EXPECT_TRUE(rejects(kNumpyArangeI4 + "xx", {"bad.npy: 2 unexpected bytes after the data"}));
}

TEST_F(NpyBadInputTest, UnsupportedLayoutsAndTypes) {
  EXPECT_TRUE(rejects(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                                std::string(16, '\0')),
                      {"bad.npy: array is stored in Fortran order"}));
  EXPECT_TRUE(rejects(
      npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')),
      {"bad.npy: big-endian element type '>f4' is not supported"}));
  EXPECT_TRUE(rejects(
      npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')),
      {"bad.npy: unsupported element type '<c8' (supported: <f4"}));
  std::string v9 = kNumpyArangeI4;
  v9[6] = 9;
  EXPECT_TRUE(rejects(v9, {"bad.npy: npy format version 9.0 is not supported"}));
}

TEST_F(NpyBadInputTest, MalformedHeaders) {
  EXPECT_TRUE(
      rejects(npy_bytes("{'descr': '<f4', 'shape': (2,), }", std::string(8, '\0')),
              {"bad.npy: malformed npy header", "must hold descr, fortran_order and shape"}));
  EXPECT_TRUE(
      rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", ""),
              {"bad.npy: malformed npy header at byte", "expected a non-negative integer"}));
  EXPECT_TRUE(rejects(npy_bytes("{'descr': '<f4', 'fortran_order': Nope, 'shape': (2,), }", ""),
                      {"bad.npy: malformed npy header", "expected True or False"}));
  EXPECT_TRUE(rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
                                "'extra': 1, }",
                                ""),
                      {"bad.npy: malformed npy header", "unexpected key 'extra'"}));
  EXPECT_TRUE(rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                "(99999999999999999999,), }",
                                ""),
                      {"bad.npy: malformed npy header", "integer out of range"}));
  EXPECT_TRUE(rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                "(4294967296, 4294967296, 0), }",
                                ""),
                      {"bad.npy: shape (4294967296, 4294967296, 0) is too large to address"}));
  std::string long_header = kNumpyArangeI4;
  long_header[8] = '\xff';
  long_header[9] = '\x7f';
  EXPECT_TRUE(rejects(long_header, {"bad.npy: npy header length 32767 runs past the end"}));
}

}  // namespace
}  // namespace mg
