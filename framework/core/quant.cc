#include "framework/core/quant.h"

#include <fmt/format.h>

#include "framework/core/error.h"
#include "framework/core/fp4.h"
#include "framework/core/fp8.h"
#include "framework/core/int_quant.h"

namespace mg {

std::string GroupShape::str() const {
  if (rows == -1 && cols == -1) return "per tensor";
  if (rows == 1 && cols == -1) return "per row";
  return fmt::format("[{}, {}]", rows, cols);
}

std::string_view quant_element_name(QuantElement element) {
  switch (element) {
    case QuantElement::kFromDtype:
      return "dtype";
    case QuantElement::kInt4:
      return "int4";
    case QuantElement::kUInt4:
      return "uint4";
    case QuantElement::kInt8:
      return "int8";
    case QuantElement::kUInt8:
      return "uint8";
    case QuantElement::kFp4E2M1:
      return "fp4_e2m1";
  }
  return "?";
}

uint8_t* fp8_codes(const Tensor& t) {
  MG_ASSERT(t.dtype() == DType::kF8E4M3, "tensor {} holds no F8_E4M3 codes", t.str());
  return static_cast<uint8_t*>(t.raw());
}

Shape scale_shape_for(const Shape& codes_shape, GroupShape group) {
  MG_ASSERT(codes_shape.size() >= 2, "quantised tensor of rank {}", codes_shape.size());
  Shape s(codes_shape.begin(), codes_shape.end() - 2);
  const int64_t R = codes_shape[codes_shape.size() - 2], C = codes_shape.back();
  const int64_t gr = group.rows_in(R), gc = group.cols_in(C);
  MG_ASSERT(gr > 0 && gc > 0, "group {}", group.str());
  s.push_back(R == 0 ? 0 : (R + gr - 1) / gr);
  s.push_back(C == 0 ? 0 : (C + gc - 1) / gc);
  return s;
}

namespace {

// dequantize_cpu for packed FP4 codes.
Tensor dequantize_fp4_cpu(const Tensor& codes, const WeightQuantization& q) {
  const Shape shape = fp4_logical_shape(codes.shape());
  MG_ASSERT(q.scale.shape() == scale_shape_for(shape, q.group),
            "dequantize FP4: codes {} scale {} group {}", codes.str(), q.scale.str(),
            q.group.str());
  Tensor out = Tensor::empty_cpu(DType::kF32, shape);
  const int64_t R = shape[shape.size() - 2], C = shape.back();
  const int64_t gr = q.group.rows_in(R), gc = q.group.cols_in(C);
  const int64_t sr = q.scale.dim(-2), sc = q.scale.dim(-1);
  const int64_t matrices = R * C == 0 ? 0 : out.numel() / (R * C);
  const uint8_t* in = static_cast<const uint8_t*>(codes.raw());
  const float* scale = q.scale.data<float>();
  float* dst = out.data<float>();
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < R; ++r) {
      const float* srow = scale + (m * sr + r / gr) * sc;
      const uint8_t* row = in + (m * R + r) * (C / 2);
      float* drow = dst + (m * R + r) * C;
      for (int64_t c = 0; c < C; ++c)
        drow[c] = fp4_e2m1_to_float(fp4_code_at(row, c)) * srow[c / gc];
    }
  }
  return out;
}

}  // namespace

Tensor dequantize_cpu(const Tensor& codes, const WeightQuantization& q) {
  switch (q.element) {
    case QuantElement::kFromDtype:
      break;
    case QuantElement::kInt4:
    case QuantElement::kUInt4:
    case QuantElement::kInt8:
    case QuantElement::kUInt8:
      return dequantize_int_cpu(codes, q);
    case QuantElement::kFp4E2M1:
      return dequantize_fp4_cpu(codes, q);  // framework/core/fp4.h
  }
  MG_ASSERT(codes.device().is_cpu() && codes.dtype() == DType::kF8E4M3 && q.defined() &&
                q.scale.device().is_cpu() && q.scale.dtype() == DType::kF32 &&
                q.scale.shape() == scale_shape_for(codes.shape(), q.group),
            "dequantize: codes {} scale {} group {}", codes.str(),
            q.scale.defined() ? q.scale.str() : "none", q.group.str());
  Tensor out = Tensor::empty_cpu(DType::kF32, codes.shape());
  const int64_t R = codes.dim(-2), C = codes.dim(-1);
  const int64_t gr = q.group.rows_in(R), gc = q.group.cols_in(C);
  const int64_t sr = q.scale.dim(-2), sc = q.scale.dim(-1);
  const int64_t matrices = R * C == 0 ? 0 : codes.numel() / (R * C);
  const uint8_t* in = fp8_codes(codes);
  const float* scale = q.scale.data<float>();
  float* dst = out.data<float>();
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < R; ++r) {
      const float* srow = scale + (m * sr + r / gr) * sc;
      const int64_t base = (m * R + r) * C;
      for (int64_t c = 0; c < C; ++c)
        dst[base + c] = fp8_e4m3_to_float(in[base + c]) * srow[c / gc];
    }
  }
  return out;
}

}  // namespace mg
