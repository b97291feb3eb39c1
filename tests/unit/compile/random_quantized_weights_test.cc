// The random quantized weights of CompileOptions::random_weights are made on the host's threads;
// they must be exactly the values the one-thread definitions give (random values of the unquantized
// generator, then the quantizer), so that models and tests that use random quantized weights keep
// their values. Each weight is large enough (2 Mi elements) to be split over threads.
#include "framework/compile/random_quantized_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/fp4.h"
#include "framework/core/fp8.h"
#include "framework/core/int_quant.h"
#include "framework/device/random_fill.h"
#include "framework/graph/tensor_quantization.h"

namespace mg {
namespace {

proto::TensorInfo info_of(const std::string& name, const Shape& shape) {
  proto::TensorInfo info;
  info.set_name(name);
  for (int64_t d : shape) info.add_shape(d);
  info.mutable_quantization()->set_scale(name + ".scale");
  return info;
}

void expect_same_bytes(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0) << what;
}

// The single-thread definition: uniform values scaled like the unquantized random weights.
Tensor scales_of(const Shape& shape, const std::string& scale_name, uint64_t seed, float base) {
  Tensor s = Tensor::empty_cpu(DType::kF32, shape);
  fill_uniform(s, mix64(seed ^ fnv1a(scale_name)), 1.0f, 0.5f, nullptr);
  for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] *= base;
  return s;
}

TEST(RandomQuantizedWeights, IntegerCodesAreQuantizeIntCpuOfTheRandomValues) {
  const Shape logical = {4, 2048, 256};
  for (const auto& [element, group] :
       {std::pair{QuantElement::kInt4, int64_t{128}}, std::pair{QuantElement::kUInt4, int64_t{32}},
        std::pair{QuantElement::kInt8, int64_t{-1}}}) {
    SCOPED_TRACE(quant_element_name(element));
    const proto::TensorInfo info = info_of("layers.0.mlp.experts.w13", logical);
    const auto [codes, q] = random_int_weight(info, logical, element, group, 11);
    Tensor values = Tensor::empty_cpu(DType::kF32, logical);
    fill_uniform(values, mix64(11 ^ fnv1a(info.name())), 0.0f, 1.0f / std::sqrt(256.0f), nullptr);
    const auto [want_codes, want_q] = quantize_int_cpu(values, element, group);
    expect_same_bytes(codes, want_codes, "codes");
    expect_same_bytes(q.scale, want_q.scale, "scales");
    EXPECT_EQ(q.zero_point.defined(), want_q.zero_point.defined());
    if (want_q.zero_point.defined()) expect_same_bytes(q.zero_point, want_q.zero_point, "zeros");
    EXPECT_EQ(q.element, element);
    EXPECT_EQ(q.logical_shape, logical);
    EXPECT_EQ(q.group.cols, group);
  }
}

TEST(RandomQuantizedWeights, Fp4BytesAndScalesFollowTheElementwiseDefinition) {
  const Shape stored = {2, 64, 16384};  // logical [2, 64, 32768]
  const proto::TensorInfo info = info_of("layers.1.mlp.experts.w2", stored);
  const GroupShape group{1, 32};
  const auto [codes, q] = random_fp4_weight(info, group, 3);
  Tensor values = Tensor::empty_cpu(DType::kF32, stored);
  fill_uniform(values, mix64(3 ^ fnv1a(info.name())), 128.0f, 128.0f, nullptr);
  Tensor want = Tensor::empty_cpu(DType::kU8, stored);
  for (int64_t i = 0; i < want.numel(); ++i) {
    static_cast<uint8_t*>(want.raw())[i] =
        static_cast<uint8_t>(std::clamp(std::floor(values.data<float>()[i]), 0.0f, 255.0f));
  }
  expect_same_bytes(codes, want, "codes");
  const Shape logical = fp4_logical_shape(stored);
  expect_same_bytes(q.scale,
                    scales_of(scale_shape_for(logical, group), info.quantization().scale(), 3,
                              1.0f / (kFp4E2M1Max * std::sqrt(32768.0f))),
                    "scales");
}

// The scales rounded to the checkpoint's bytes (so that cuda_fp4 keeps them as bytes): MXFP4's
// down to a power of two, NVFP4's to an E4M3 value times a power-of-two global (global_scale
// [2, 1]), each from the same F32 value as the plain scales.
TEST(RandomQuantizedWeights, Fp4ScalesOnTheE8m0AndE4m3Grids) {
  const Shape stored = {2, 16, 64};  // logical [2, 16, 128]
  const proto::TensorInfo info = info_of("layers.1.mlp.experts.w2", stored);
  const auto [codes_f32, plain] = random_fp4_weight(info, GroupShape{1, 16}, 3);
  EXPECT_FALSE(plain.global_scale.defined());
  const auto [codes_mx, mx] =
      random_fp4_weight(info, GroupShape{1, 16}, 3, Device::cpu(), Fp4ScaleGrid::kE8M0);
  const auto [codes_nv, nv] =
      random_fp4_weight(info, GroupShape{1, 16}, 3, Device::cpu(), Fp4ScaleGrid::kE4M3);
  expect_same_bytes(codes_mx, codes_f32, "codes");
  EXPECT_FALSE(mx.global_scale.defined());
  ASSERT_TRUE(nv.global_scale.defined());
  ASSERT_EQ(nv.global_scale.shape(), Shape({2, 1}));
  const float g = nv.global_scale.data<float>()[0];
  EXPECT_EQ(g, std::ldexp(1.0f, std::ilogb(1.0f / (kFp4E2M1Max * std::sqrt(128.0f)))));
  EXPECT_EQ(nv.global_scale.data<float>()[1], g);
  for (int64_t i = 0; i < plain.scale.numel(); ++i) {
    const float x = plain.scale.data<float>()[i];
    const float m = mx.scale.data<float>()[i], n = nv.scale.data<float>()[i];
    EXPECT_EQ(m, std::ldexp(1.0f, std::ilogb(x))) << i;  // the power of two <= x
    EXPECT_EQ(n, fp8_e4m3_to_float(float_to_fp8_e4m3(x / g)) * g) << i;
  }
}

TEST(RandomQuantizedWeights, Fp8CodesAndScalesFollowTheElementwiseDefinition) {
  const Shape shape = {8, 512, 512};
  const proto::TensorInfo info = info_of("layers.0.mlp.experts.w13", shape);
  const GroupShape group{128, 128};
  const auto [codes, q] = random_fp8_weight(info, group, 5);
  Tensor values = Tensor::empty_cpu(DType::kF32, shape);
  fill_uniform(values, mix64(5 ^ fnv1a(info.name())), 0.0f, kFp8E4M3Max, nullptr);
  Tensor want = Tensor::empty_cpu(DType::kF8E4M3, shape);
  for (int64_t i = 0; i < want.numel(); ++i) {
    fp8_codes(want)[i] = float_to_fp8_e4m3(values.data<float>()[i]);
  }
  expect_same_bytes(codes, want, "codes");
  expect_same_bytes(q.scale,
                    scales_of(scale_shape_for(shape, group), info.quantization().scale(), 5,
                              1.0f / (kFp8E4M3Max * std::sqrt(512.0f))),
                    "scales");
}

}  // namespace
}  // namespace mg
