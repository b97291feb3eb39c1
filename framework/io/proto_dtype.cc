#include "framework/io/proto_dtype.h"

#include "framework/core/error.h"

namespace mg {

DType from_proto(proto::DType dtype, std::string_view context) {
  switch (dtype) {
    case proto::F32:
      return DType::kF32;
    case proto::F16:
      return DType::kF16;
    case proto::BF16:
      return DType::kBF16;
    case proto::F64:
      return DType::kF64;
    case proto::I64:
      return DType::kI64;
    case proto::I32:
      return DType::kI32;
    case proto::I16:
      return DType::kI16;
    case proto::I8:
      return DType::kI8;
    case proto::U8:
      return DType::kU8;
    case proto::BOOL:
      return DType::kBool;
    case proto::F8_E4M3:
      return DType::kF8E4M3;
    case proto::F8_E5M2:
      return DType::kF8E5M2;
    case proto::DTYPE_UNSPECIFIED:
      MG_FAIL(
          "{}: dtype is unspecified (expected one of F32, F16, BF16, F64, I64, I32, I16, I8, "
          "U8, BOOL, F8_E4M3, F8_E5M2)",
          context);
    // proto3 enums are open: a binary file from a newer writer can hold values we do not know.
    case proto::DType_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::DType_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  MG_FAIL("{}: unknown dtype value {} (written by a newer moegraph?)", context,
          static_cast<int>(dtype));
}

proto::DType to_proto(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return proto::F32;
    case DType::kF16:
      return proto::F16;
    case DType::kBF16:
      return proto::BF16;
    case DType::kF64:
      return proto::F64;
    case DType::kI64:
      return proto::I64;
    case DType::kI32:
      return proto::I32;
    case DType::kI16:
      return proto::I16;
    case DType::kI8:
      return proto::I8;
    case DType::kU8:
      return proto::U8;
    case DType::kBool:
      return proto::BOOL;
    case DType::kF8E4M3:
      return proto::F8_E4M3;
    case DType::kF8E5M2:
      return proto::F8_E5M2;
  }
  MG_ASSERT(false, "unknown DType {}", static_cast<int>(dtype));
  return proto::DTYPE_UNSPECIFIED;
}

}  // namespace mg
