#include "framework/graph/int_tensor_quantization.h"

#include <algorithm>

#include <fmt/format.h>

#include "framework/core/error.h"
#include "framework/io/proto_dtype.h"

namespace mg {

bool is_integer_quant_element(proto::QuantElement element) {
  switch (element) {
    case proto::QUANT_ELEMENT_INT4:
    case proto::QUANT_ELEMENT_UINT4:
    case proto::QUANT_ELEMENT_INT8:
    case proto::QUANT_ELEMENT_UINT8:
      return true;
    default:
      return false;
  }
}

QuantElement quant_element_from_proto(proto::QuantElement element) {
  switch (element) {
    case proto::QUANT_ELEMENT_INT4:
      return QuantElement::kInt4;
    case proto::QUANT_ELEMENT_UINT4:
      return QuantElement::kUInt4;
    case proto::QUANT_ELEMENT_INT8:
      return QuantElement::kInt8;
    case proto::QUANT_ELEMENT_UINT8:
      return QuantElement::kUInt8;
    case proto::QUANT_ELEMENT_FP4_E2M1:
      return QuantElement::kFp4E2M1;
    default:
      return QuantElement::kFromDtype;
  }
}

IntPacking int_packing_from_proto(proto::QuantPacking packing) {
  switch (packing) {
    case proto::QUANT_PACKING_GPTQ:
      return IntPacking::kGptq;
    case proto::QUANT_PACKING_AWQ:
      return IntPacking::kAwq;
    case proto::QUANT_PACKING_COMPRESSED_TENSORS:
      return IntPacking::kCompressedTensors;
    default:
      return IntPacking::kNone;
  }
}

IntQuantizationInfo check_int_tensor_quantization(const proto::Model& model,
                                                  const proto::TensorInfo& t,
                                                  const TensorInfoLookup& lookup,
                                                  std::string_view file) {
  const proto::TensorQuantization& q = t.quantization();
  const std::string& name = t.name();
  const QuantElement element = quant_element_from_proto(q.element());
  const std::string_view el = quant_element_name(element);
  MG_CHECK(model.format_version() >= 3,
           "{}: tensor '{}' holds {} codes, which need format_version 3 (the file declares {})",
           file, name, el, model.format_version());
  MG_CHECK(proto::QuantPacking_IsValid(q.packing()),
           "{}: tensor '{}': unknown quantization.packing {}", file, name,
           static_cast<int>(q.packing()));
  const IntPacking packing = int_packing_from_proto(q.packing());
  const std::string_view pk = int_packing_name(packing);
  const int bits = quant_element_bits(element);

  MG_CHECK(q.logical_shape_size() >= 2,
           "{}: tensor '{}': {} codes need quantization.logical_shape [..., out, in] (rank >= 2), "
           "got rank {}",
           file, name, el, q.logical_shape_size());
  const Shape logical(q.logical_shape().begin(), q.logical_shape().end());
  for (int64_t d : logical) {
    MG_CHECK(d >= 1, "{}: tensor '{}': quantization.logical_shape {} has a dimension < 1", file,
             name, shape_str(logical));
  }
  MG_CHECK(q.global_scale().empty() && !q.global_scale_divides() && q.activation_scale().empty() &&
               q.activation() == proto::ACT_QUANT_NONE,
           "{}: tensor '{}': {} codes are weight-only (no global scale, no activation "
           "quantization)",
           file, name, el);
  MG_CHECK(packing == IntPacking::kNone || !quant_element_signed(element),
           "{}: tensor '{}': the {} packing stores unsigned codes (UINT4 / UINT8), not {}", file,
           name, pk, el);
  MG_CHECK(packing != IntPacking::kAwq || bits == 4,
           "{}: tensor '{}': the AWQ packing holds 4-bit codes, not {}", file, name, el);
  MG_CHECK(q.group_rows() == 1,
           "{}: tensor '{}': integer codes take one scale per output row per group of input "
           "columns (group_rows 1), got group_rows {}",
           file, name, q.group_rows());
  MG_CHECK(q.group_cols() == -1 || q.group_cols() >= 1,
           "{}: tensor '{}': quantization.group_cols is {} (expected -1 for channel-wise or a "
           "group size >= 1)",
           file, name, q.group_cols());
  MG_CHECK(q.zero_point_offset() == 0 || (q.zero_point_offset() == 1 && !q.zero_point().empty()),
           "{}: tensor '{}': quantization.zero_point_offset is {} (0, or 1 for GPTQ v1 zero "
           "points)",
           file, name, q.zero_point_offset());

  const proto::DType want_dtype = packing != IntPacking::kNone
                                      ? proto::I32
                                      : (element == QuantElement::kInt8 ? proto::I8 : proto::U8);
  MG_CHECK(t.dtype() == want_dtype, "{}: tensor '{}': {} {} codes are stored as {}, got {}", file,
           name, pk, el, proto::DType_Name(want_dtype), proto::DType_Name(t.dtype()));
  const Shape stored(t.shape().begin(), t.shape().end());
  const int64_t R = logical[logical.size() - 2];
  const int64_t P = int_stored_pieces(packing, logical, stored);
  MG_CHECK(P >= 1 && R % P == 0,
           "{}: tensor '{}': {} output rows do not split into {} checkpoint matrices", file, name,
           R, P);
  const IntStoredShapes want = int_stored_shapes(element, packing, logical, q.group_cols(), P);
  MG_CHECK(stored == want.codes,
           "{}: tensor '{}': {} {} codes of logical shape {} with {} per matrix are stored as "
           "{}, got {}",
           file, name, pk, el, shape_str(logical), P, shape_str(want.codes), shape_str(stored));

  auto find = [&](const std::string& ref, std::string_view field) {
    const proto::TensorInfo* info = lookup(ref);
    MG_CHECK(info != nullptr, "{}: tensor '{}': {} tensor '{}' is not declared", file, name, field,
             ref);
    MG_CHECK(!info->has_quantization(), "{}: tensor '{}': {} tensor '{}' is itself quantized", file,
             name, field, ref);
    return info;
  };
  auto check_shape = [&](const proto::TensorInfo& info, const Shape& shape,
                         std::string_view field) {
    const Shape got(info.shape().begin(), info.shape().end());
    MG_CHECK(got == shape,
             "{}: tensor '{}': {} tensor '{}' has shape {}, but {} codes of logical shape {} "
             "with group_cols {} need {}",
             file, name, field, info.name(), shape_str(got), pk, shape_str(logical), q.group_cols(),
             shape_str(shape));
  };

  MG_CHECK(!q.scale().empty(), "{}: tensor '{}': quantization names no scale tensor", file, name);
  const proto::TensorInfo* scale = find(q.scale(), "scale");
  MG_CHECK(
      scale->dtype() == proto::F32 || scale->dtype() == proto::BF16 || scale->dtype() == proto::F16,
      "{}: tensor '{}': scale tensor '{}' is {} (expected F32, BF16 or F16)", file, name, q.scale(),
      proto::DType_Name(scale->dtype()));
  check_shape(*scale, want.scale, "scale");

  if (!q.zero_point().empty()) {
    MG_CHECK(!quant_element_signed(element),
             "{}: tensor '{}': signed {} codes take no zero point (use UINT4 / UINT8)", file, name,
             el);
    const proto::TensorInfo* zp = find(q.zero_point(), "zero_point");
    const bool ok = packing != IntPacking::kNone
                        ? zp->dtype() == proto::I32
                        : (zp->dtype() == proto::U8 || zp->dtype() == proto::F32 ||
                           zp->dtype() == proto::BF16 || zp->dtype() == proto::F16);
    MG_CHECK(ok, "{}: tensor '{}': zero_point tensor '{}' is {} (expected {})", file, name,
             q.zero_point(), proto::DType_Name(zp->dtype()),
             packing != IntPacking::kNone ? "I32, packed" : "U8, F32, BF16 or F16");
    check_shape(*zp, want.zero_point, "zero_point");
  }
  if (!q.g_idx().empty()) {
    MG_CHECK(q.group_cols() >= 1,
             "{}: tensor '{}': g_idx needs group-wise scales (group_cols >= 1), got {}", file, name,
             q.group_cols());
    const proto::TensorInfo* g = find(q.g_idx(), "g_idx");
    MG_CHECK(g->dtype() == proto::I32, "{}: tensor '{}': g_idx tensor '{}' is {} (expected I32)",
             file, name, q.g_idx(), proto::DType_Name(g->dtype()));
    // [lead..., C], or [lead..., Pg, C]: one g_idx per checkpoint matrix.
    const Shape got(g->shape().begin(), g->shape().end());
    const int64_t C = logical.back();
    Shape one(logical.begin(), logical.end() - 2);
    one.push_back(C);
    const bool per_piece = got.size() == logical.size() && got.back() == C &&
                           std::equal(one.begin(), one.end() - 1, got.begin()) &&
                           got[got.size() - 2] >= 1 && R % got[got.size() - 2] == 0;
    if (!per_piece) check_shape(*g, one, "g_idx");
  }
  return {GroupShape{1, q.group_cols()}, element, logical};
}

}  // namespace mg
