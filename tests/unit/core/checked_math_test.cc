// Property test of framework/core/checked_math.h: over boundary values and a million random ones,
// the checked operations never wrap and agree exactly with __int128 arithmetic (a result exactly
// when it fits the type, nullopt exactly when it does not).
#include "framework/core/checked_math.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "framework/core/host_memory.h"

namespace mg {
namespace {

using i128 = __int128;

template <typename T>
bool fits(i128 v) {
  return v >= static_cast<i128>(std::numeric_limits<T>::min()) &&
         v <= static_cast<i128>(std::numeric_limits<T>::max());
}

// Edges of T and of the sizes the CLI takes (2^24, 2^31, 2^40, 2^57 = 144115188075855872).
template <typename T>
std::vector<T> boundary_values() {
  std::vector<T> out;
  const T max = std::numeric_limits<T>::max();
  const T min = std::numeric_limits<T>::min();
  for (T v : {T(0), T(1), T(2), T(3), max, T(max - 1), T(max / 2), T(max / 2 + 1), min, T(min + 1),
              T(min / 2)}) {
    out.push_back(v);
  }
  for (int bit : {7, 8, 15, 16, 24, 31, 32, 40, 57, 62, 63}) {
    if (bit >= std::numeric_limits<T>::digits) continue;
    const T p = T(T(1) << bit);
    for (T v : {p, T(p - 1), T(p + 1)}) {
      out.push_back(v);
      if constexpr (std::is_signed_v<T>) out.push_back(T(-v));
    }
  }
  return out;
}

template <typename T>
void expect_matches_int128(T a, T b) {
  // Two 64-bit unsigned maxima overflow even __int128 (UBSan reported it): such a product fits
  // no T either.
  i128 product = 0;
  const bool beyond_i128 =
      __builtin_mul_overflow(static_cast<i128>(a), static_cast<i128>(b), &product);
  const i128 sum = static_cast<i128>(a) + static_cast<i128>(b);
  const std::optional<T> mul = checked_mul(a, b);
  const std::optional<T> add = checked_add(a, b);
  ASSERT_EQ(mul.has_value(), !beyond_i128 && fits<T>(product)) << +a << " * " << +b;
  if (mul) {
    ASSERT_TRUE(static_cast<i128>(*mul) == product) << +a << " * " << +b;
  }
  ASSERT_EQ(add.has_value(), fits<T>(sum)) << +a << " + " << +b;
  if (add) {
    ASSERT_TRUE(static_cast<i128>(*add) == sum) << +a << " + " << +b;
  }
}

// Random values spread over all magnitudes: a random bit width, then a random value of it.
template <typename T>
T random_value(std::mt19937_64& rng) {
  const int bits = static_cast<int>(rng() % (std::numeric_limits<T>::digits + 1));
  uint64_t v = bits == 0 ? 0 : rng() >> (64 - bits);
  T out = static_cast<T>(v);
  if constexpr (std::is_signed_v<T>) {
    if (rng() & 1) out = static_cast<T>(-out);
  }
  return out;
}

template <typename T>
void check_type() {
  const std::vector<T> edges = boundary_values<T>();
  for (T a : edges) {
    for (T b : edges) expect_matches_int128(a, b);
  }
  std::mt19937_64 rng(18);
  for (int i = 0; i < 250000; ++i) {
    expect_matches_int128(random_value<T>(rng), random_value<T>(rng));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CheckedMath, MulAndAddMatchInt128ForEveryWidth) {
  check_type<int64_t>();
  check_type<uint64_t>();
  check_type<int32_t>();
  check_type<size_t>();
}

// checked_numel: the exact product of a shape when it fits int64, else nullopt; negative
// dimensions are refused; a zero anywhere gives 0 but the other dimensions must still fit.
TEST(CheckedMath, NumelMatchesInt128) {
  std::mt19937_64 rng(7);
  const std::vector<int64_t> edges = boundary_values<int64_t>();
  for (int i = 0; i < 200000; ++i) {
    Shape shape(1 + rng() % 5);
    for (int64_t& d : shape) {
      d = (rng() % 4 == 0) ? edges[rng() % edges.size()] : random_value<int64_t>(rng);
      if (rng() % 3 != 0) d = d < 0 ? -(d / 2) : d;  // mostly non-negative
    }
    bool negative = false, zero = false, overflow = false;
    i128 product = 1;
    for (int64_t d : shape) {
      if (d < 0) negative = true;
      if (d == 0) zero = true;
      if (d > 0 && !overflow) {
        product *= d;
        if (!fits<int64_t>(product)) overflow = true;
      }
    }
    const std::optional<int64_t> numel = checked_numel(shape);
    if (negative || overflow) {
      ASSERT_FALSE(numel.has_value()) << shape_str(shape);
    } else {
      ASSERT_TRUE(numel.has_value()) << shape_str(shape);
      ASSERT_EQ(*numel, zero ? 0 : static_cast<int64_t>(product)) << shape_str(shape);
      // A shape that passes multiplies out without overflow in shape_numel's order too.
      ASSERT_EQ(shape_numel(shape), *numel) << shape_str(shape);
    }
  }
}

TEST(CheckedMath, NbytesAndRoundUpNeverWrap) {
  // 2^57 rows of 16 F32 values are 2^63 bytes, which size_t holds; rows of 32 are 2^64 bytes,
  // which it does not (and which once wrapped to 0).
  EXPECT_EQ(checked_nbytes({int64_t{1} << 57, 16}, DType::kF32), size_t{1} << 63);
  EXPECT_EQ(checked_nbytes({int64_t{1} << 57, 32}, DType::kF32), std::nullopt);
  EXPECT_EQ(checked_nbytes({int64_t{1} << 57, 2}, DType::kF32), size_t{1} << 60);
  EXPECT_EQ(checked_nbytes({3, -1}, DType::kF32), std::nullopt);
  EXPECT_EQ(checked_nbytes({0, int64_t{1} << 62, 4}, DType::kF64), std::nullopt);
  EXPECT_EQ(checked_nbytes({0, 5}, DType::kF64), size_t{0});
  EXPECT_EQ(checked_round_up(0, 64), size_t{0});
  EXPECT_EQ(checked_round_up(65, 64), size_t{128});
  EXPECT_EQ(checked_round_up(SIZE_MAX - 10, 64), std::nullopt);
  EXPECT_EQ(checked_round_up(SIZE_MAX / 64 * 64, 64), SIZE_MAX / 64 * 64);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const size_t bytes = random_value<size_t>(rng);
    const size_t align = 1 + rng() % 4096;
    const i128 exact = (static_cast<i128>(bytes) + align - 1) / align * align;
    const std::optional<size_t> r = checked_round_up(bytes, align);
    if (static_cast<i128>(bytes) + align - 1 > static_cast<i128>(SIZE_MAX)) {
      ASSERT_FALSE(r.has_value()) << bytes << " " << align;
    } else {
      ASSERT_TRUE(static_cast<i128>(*r) == exact) << bytes << " " << align;
    }
  }
}

TEST(CheckedMath, AllocationsBeyondTheLimitAreUserErrors) {
  EXPECT_EQ(allocation_bytes({1024, 1024}, DType::kF32, "t"), size_t{4} << 20);
  EXPECT_EQ(allocation_bytes({int64_t{1} << 38}, DType::kF32, "t"), kMaxAllocationBytes);
  try {
    allocation_bytes({int64_t{1} << 38, 2}, DType::kF32, "KV cache");
    FAIL() << "2 TiB allocated";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "KV cache: F32[274877906944, 2] needs 2.0 TiB, more than the 1.0 TiB one "
                 "allocation may take");
  }
  EXPECT_THROW(allocation_bytes({int64_t{1} << 57, 64}, DType::kF32, "t"), Error);
  EXPECT_THROW(allocation_bytes({-1}, DType::kF32, "t"), Error);
  // The wrapped size of issue 18 (a 64-byte KV cache) is refused, not allocated.
  EXPECT_THROW(Tensor::empty_cpu(DType::kF32, {int64_t{1} << 57, 2, 16, 4}), Error);
  EXPECT_THROW(allocate_host_buffer(kMaxAllocationBytes + 1, "t"), Error);
  if (host_memory_bytes() > 0 && host_memory_bytes() < kMaxAllocationBytes) {
    // Within one allocation's limit but beyond the machine: refused before the system is asked.
    EXPECT_THROW(allocate_host_buffer(host_memory_bytes() + 4096, "t"), Error);
  }
}

TEST(CheckedMath, ByteSizesPrintReadably) {
  EXPECT_EQ(byte_size_str(0), "0 B");
  EXPECT_EQ(byte_size_str(1023), "1023 B");
  EXPECT_EQ(byte_size_str(1536), "1.5 KiB");
  EXPECT_EQ(byte_size_str(kMaxAllocationBytes), "1.0 TiB");
  EXPECT_EQ(byte_size_str(UINT64_MAX), "16.0 EiB");
}

}  // namespace
}  // namespace mg
