#include "framework/graph/tensor_quantization.h"

#include <fmt/format.h>

#include "framework/core/error.h"
#include "framework/io/proto_dtype.h"

namespace mg {

namespace {

int64_t checked_group_dim(int64_t v, std::string_view file, const std::string& tensor,
                          std::string_view field) {
  MG_CHECK(v == -1 || v >= 1,
           "{}: tensor '{}': quantization.{} is {} (expected -1 for the whole dimension or a size "
           ">= 1)",
           file, tensor, field, v);
  return v;
}

}  // namespace

GroupShape check_tensor_quantization(const proto::Model& model, const proto::TensorInfo& t,
                                     const proto::TensorInfo* scale, std::string_view file,
                                     const proto::TensorInfo* activation_scale) {
  const proto::TensorQuantization& q = t.quantization();
  const std::string& name = t.name();
  MG_CHECK(model.format_version() >= 2,
           "{}: tensor '{}' is quantized, which needs format_version 2 (the file declares {})",
           file, name, model.format_version());
  MG_CHECK(q.element() == proto::QUANT_ELEMENT_FROM_DTYPE,
           "{}: tensor '{}': quantized element {} is not supported yet (only F8_E4M3 codes)", file,
           name, proto::QuantElement_Name(q.element()));
  MG_CHECK(t.dtype() == proto::F8_E4M3,
           "{}: tensor '{}': quantized codes of dtype {} are not supported (only F8_E4M3)", file,
           name, proto::DType_Name(t.dtype()));
  MG_CHECK(t.shape_size() >= 2, "{}: tensor '{}': a quantized tensor needs rank >= 2, got {}", file,
           name, t.shape_size());
  MG_CHECK(q.zero_point().empty() && q.global_scale().empty(),
           "{}: tensor '{}': quantization zero points and global scales are not supported yet",
           file, name);
  const GroupShape group{checked_group_dim(q.group_rows(), file, name, "group_rows"),
                         checked_group_dim(q.group_cols(), file, name, "group_cols")};

  MG_CHECK(!q.scale().empty(), "{}: tensor '{}': quantization names no scale tensor", file, name);
  MG_CHECK(scale != nullptr, "{}: tensor '{}': scale tensor '{}' is not declared", file, name,
           q.scale());
  MG_CHECK(!scale->has_quantization(), "{}: tensor '{}': scale tensor '{}' is itself quantized",
           file, name, q.scale());
  MG_CHECK(
      scale->dtype() == proto::F32 || scale->dtype() == proto::BF16 || scale->dtype() == proto::F16,
      "{}: tensor '{}': scale tensor '{}' is {} (expected F32, BF16 or F16)", file, name, q.scale(),
      proto::DType_Name(scale->dtype()));
  const Shape codes(t.shape().begin(), t.shape().end());
  const Shape want = scale_shape_for(codes, group);
  const Shape got(scale->shape().begin(), scale->shape().end());
  MG_CHECK(got == want,
           "{}: tensor '{}': scale tensor '{}' has shape {}, but codes {} with groups {} need {}",
           file, name, q.scale(), shape_str(got), shape_str(codes), group.str(), shape_str(want));

  switch (q.activation()) {
    case proto::ACT_QUANT_NONE:
      break;
    case proto::ACT_QUANT_DYNAMIC:
      MG_CHECK(q.activation_group() == 128 || q.activation_group() == -1,
               "{}: tensor '{}': quantization.activation_group is {} (dynamic activation "
               "quantization takes 128 channels per scale, or -1 for one per token)",
               file, name, q.activation_group());
      break;
    case proto::ACT_QUANT_STATIC:
      MG_CHECK(!q.activation_scale().empty(),
               "{}: tensor '{}': static activation quantization (ACT_QUANT_STATIC) names no "
               "activation_scale tensor",
               file, name);
      MG_CHECK(activation_scale != nullptr,
               "{}: tensor '{}': activation scale tensor '{}' is not declared", file, name,
               q.activation_scale());
      MG_CHECK(
          !activation_scale->has_quantization() &&
              (activation_scale->dtype() == proto::F32 ||
               activation_scale->dtype() == proto::BF16 ||
               activation_scale->dtype() == proto::F16) &&
              activation_scale->shape_size() == 1 && activation_scale->shape(0) >= 1,
          "{}: tensor '{}': activation scale tensor '{}' must be an unquantized F32, BF16 or "
          "F16 tensor of shape [n] (n >= 1; the consumer uses the largest), got {} {}",
          file, name, q.activation_scale(), proto::DType_Name(activation_scale->dtype()),
          shape_str(Shape(activation_scale->shape().begin(), activation_scale->shape().end())));
      break;
    default:
      MG_FAIL("{}: tensor '{}': unknown quantization.activation {}", file, name,
              static_cast<int>(q.activation()));
  }
  return group;
}

ActivationQuant activation_quant_of(const proto::TensorQuantization& q) {
  switch (q.activation()) {
    case proto::ACT_QUANT_DYNAMIC:
      return ActivationQuant::kDynamic;
    case proto::ACT_QUANT_STATIC:
      return ActivationQuant::kStatic;
    default:
      return ActivationQuant::kNone;
  }
}

}  // namespace mg
