// Core types: half-precision conversion, tensor views, the thread pool, device names.
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>

#include <gtest/gtest.h>

#include "framework/core/float_dtype.h"
#include "framework/core/half.h"
#include "framework/core/tensor.h"
#include "framework/core/thread_pool.h"
#include "framework/device/allocator.h"

namespace mg {
namespace {

TEST(Half, Fp16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = fp16_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f))));
      continue;
    }
    EXPECT_EQ(float_to_fp16(f), bits) << std::hex << h;
  }
}

TEST(Half, Fp16RoundsToNearestEven) {
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 1.0f / 2048)), 1.0f);  // halfway → even
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_EQ(fp16_to_float(float_to_fp16(65520.0f)), INFINITY);
  EXPECT_EQ(fp16_to_float(float_to_fp16(5.96046448e-8f)), 5.96046448e-8f);  // smallest subnormal
  EXPECT_EQ(fp16_to_float(float_to_fp16(2.0e-8f)), 0.0f);
}

TEST(Half, Bf16RoundTripsAndRounds) {
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), h);
    }
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // halfway → even
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(Tensor, ViewsShareTheBuffer) {
  Tensor t = Tensor::empty_cpu(DType::kF32, {4, 3});
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.data<float>()[0], 3.0f);
  Tensor flat = t.reshape({12});
  EXPECT_EQ(flat.data<float>()[11], 11.0f);
  EXPECT_THROW(t.data<int32_t>(), InternalError);
  Tensor u = t;
  u.set_rows(2);
  EXPECT_EQ(u.numel(), 6);
  EXPECT_THROW(u.set_rows(5), InternalError);
}

TEST(Tensor, ToF32ConvertsHalfTypes) {
  Tensor h = Tensor::empty_cpu(DType::kBF16, {3});
  auto* p = static_cast<uint16_t*>(h.raw());
  p[0] = float_to_bf16(1.5f);
  p[1] = float_to_bf16(-2.25f);
  p[2] = float_to_bf16(1e-3f);
  Tensor f = to_f32_cpu(h);
  EXPECT_EQ(f.data<float>()[0], 1.5f);
  EXPECT_EQ(f.data<float>()[1], -2.25f);
  EXPECT_NEAR(f.data<float>()[2], 1e-3f, 1e-5f);
  EXPECT_THROW(to_f32_cpu(Tensor::empty_cpu(DType::kI32, {2})), Error);
}

// One visitor serves every host loop over float data: each float dtype maps to a host type of its
// size whose conversions round-trip (F16 and BF16 through their bit patterns), others throw.
TEST(FloatDtype, VisitorMapsEachFloatDtypeToItsHostType) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const auto [size, back, bits] = visit_float_dtype(dtype, "x", [](auto tag) {
      using T = decltype(tag);
      const T x = from_float<T>(-2.75f);
      uint64_t raw = 0;
      std::memcpy(&raw, &x, sizeof x);
      return std::tuple{sizeof(T), to_float(x), raw};
    });
    EXPECT_EQ(size, dtype_size(dtype)) << dtype_name(dtype);
    EXPECT_EQ(back, -2.75f) << dtype_name(dtype);
    if (dtype == DType::kBF16) {
      EXPECT_EQ(bits, float_to_bf16(-2.75f));
    }
    if (dtype == DType::kF16) {
      EXPECT_EQ(bits, float_to_fp16(-2.75f));
    }
  }
  try {
    visit_float_dtype(DType::kI32, "the input", [](auto) {});
    ADD_FAILURE() << "I32 was visited";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the input must be F32, F16, BF16 or F64, got I32");
  }
}

TEST(ThreadPool, CoversTheRangeExactlyOnce) {
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000, 12345}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 3; ++rep) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 3) << threads << " " << n;
    }
  }
}

TEST(Device, ParsesAndRejects) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cuda").str(), "cuda:0");
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
  EXPECT_THROW(Device::parse("cuda:-1"), Error);
}

TEST(Device, CpuAllocatorAndCopy) {
  Tensor a = empty_tensor(Device::cpu(), DType::kF32, {5});
  Tensor b = empty_tensor(Device::cpu(), DType::kF32, {5});
  for (int i = 0; i < 5; ++i) a.data<float>()[i] = i * 0.5f;
  copy_tensor(b, a);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), 20), 0);
}

}  // namespace
}  // namespace mg
