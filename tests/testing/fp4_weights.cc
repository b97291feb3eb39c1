#include "tests/testing/fp4_weights.h"

#include <cmath>

#include "framework/core/fp4.h"
#include "tests/testing/test_util.h"

namespace mg::testing {

double independent_e2m1(uint8_t code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return (code & 8) ? -mag : mag;
}

std::pair<Tensor, WeightQuantization> random_fp4(const Shape& shape, int64_t group_cols,
                                                 uint32_t seed) {
  Shape stored = shape;
  stored.back() /= 2;
  const Tensor v = random_tensor(stored, seed, 0.0f, 255.99f);
  Tensor codes = Tensor::empty_cpu(DType::kU8, stored);
  for (int64_t i = 0; i < v.numel(); ++i) {
    static_cast<uint8_t*>(codes.raw())[i] = static_cast<uint8_t>(v.data<float>()[i]);
  }
  WeightQuantization q;
  q.element = QuantElement::kFp4E2M1;
  q.group = {1, group_cols};
  const float base = 2.0f / (kFp4E2M1Max * std::sqrt(static_cast<float>(shape.back())));
  q.scale = random_tensor(scale_shape_for(shape, q.group), seed + 1, 0.5f * base, base);
  return {codes, q};
}

Tensor independent_dequantize(const Tensor& codes, const WeightQuantization& q) {
  const int64_t R = codes.dim(-2), Cb = codes.dim(-1), C = 2 * Cb;
  Shape shape = codes.shape();
  shape.back() = C;
  Tensor out = Tensor::empty_cpu(DType::kF32, shape);
  const int64_t matrices = codes.numel() / (R * Cb), sc = q.scale.dim(-1);
  const uint8_t* in = static_cast<const uint8_t*>(codes.raw());
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const uint8_t byte = in[(m * R + r) * Cb + c / 2];
        const uint8_t code = c % 2 == 0 ? byte & 0xF : byte >> 4;
        out.data<float>()[(m * R + r) * C + c] = static_cast<float>(
            independent_e2m1(code) * q.scale.data<float>()[(m * R + r) * sc + c / q.group.cols]);
      }
    }
  }
  return out;
}

}  // namespace mg::testing
