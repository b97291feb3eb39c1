#include "framework/graph/tensor_quantization.h"

#include <fmt/format.h>

#include <algorithm>

#include "framework/core/error.h"
#include "framework/core/fp4.h"
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
  const bool fp4 = q.element() == proto::QUANT_ELEMENT_FP4_E2M1;
  MG_CHECK(q.element() == proto::QUANT_ELEMENT_FROM_DTYPE || fp4,
           "{}: tensor '{}': quantized element {} is not supported yet (only F8_E4M3 codes and "
           "FP4_E2M1)",
           file, name, proto::QuantElement_Name(q.element()));
  if (fp4) {
    MG_CHECK(t.dtype() == proto::U8,
             "{}: tensor '{}': FP4_E2M1 codes are stored two per U8 byte, not as {}", file, name,
             proto::DType_Name(t.dtype()));
  } else {
    MG_CHECK(t.dtype() == proto::F8_E4M3,
             "{}: tensor '{}': quantized codes of dtype {} are not supported (only F8_E4M3)", file,
             name, proto::DType_Name(t.dtype()));
  }
  MG_CHECK(t.shape_size() >= 2, "{}: tensor '{}': a quantized tensor needs rank >= 2, got {}", file,
           name, t.shape_size());
  MG_CHECK(q.zero_point().empty(),
           "{}: tensor '{}': quantization zero points are not supported yet", file, name);
  MG_CHECK(fp4 || q.global_scale().empty(),
           "{}: tensor '{}': a global scale is only taken with FP4_E2M1 codes (NVFP4)", file, name);
  MG_CHECK(!q.global_scale_divides() || !q.global_scale().empty(),
           "{}: tensor '{}': global_scale_divides is set but no global_scale is named", file, name);
  const GroupShape group{checked_group_dim(q.group_rows(), file, name, "group_rows"),
                         checked_group_dim(q.group_cols(), file, name, "group_cols")};
  if (fp4) {
    MG_CHECK(group.rows == 1,
             "{}: tensor '{}': FP4_E2M1 scales are per row (group_rows 1), not group_rows {}", file,
             name, group.rows);
    MG_CHECK(q.activation() == proto::ACT_QUANT_NONE,
             "{}: tensor '{}': FP4_E2M1 weights are weight-only (activation ACT_QUANT_NONE), not "
             "{}",
             file, name, proto::ActivationQuantization_Name(q.activation()));
  }

  MG_CHECK(!q.scale().empty(), "{}: tensor '{}': quantization names no scale tensor", file, name);
  MG_CHECK(scale != nullptr, "{}: tensor '{}': scale tensor '{}' is not declared", file, name,
           q.scale());
  MG_CHECK(!scale->has_quantization(), "{}: tensor '{}': scale tensor '{}' is itself quantized",
           file, name, q.scale());
  const bool float_scale =
      scale->dtype() == proto::F32 || scale->dtype() == proto::BF16 || scale->dtype() == proto::F16;
  if (fp4) {
    MG_CHECK(float_scale || scale->dtype() == proto::U8 || scale->dtype() == proto::F8_E4M3,
             "{}: tensor '{}': scale tensor '{}' is {} (FP4_E2M1 takes U8 (E8M0), F8_E4M3, F32, "
             "BF16 or F16 scales)",
             file, name, q.scale(), proto::DType_Name(scale->dtype()));
  } else {
    MG_CHECK(float_scale, "{}: tensor '{}': scale tensor '{}' is {} (expected F32, BF16 or F16)",
             file, name, q.scale(), proto::DType_Name(scale->dtype()));
  }
  const Shape stored(t.shape().begin(), t.shape().end());
  const Shape codes = fp4 ? fp4_logical_shape(stored) : stored;
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

void check_fp4_global_scale(const proto::TensorInfo& t, const proto::TensorInfo* global,
                            std::string_view file) {
  const proto::TensorQuantization& q = t.quantization();
  if (q.global_scale().empty()) return;
  const std::string& name = t.name();
  MG_CHECK(global != nullptr, "{}: tensor '{}': global scale tensor '{}' is not declared", file,
           name, q.global_scale());
  MG_CHECK(!global->has_quantization() && global->dtype() == proto::F32,
           "{}: tensor '{}': global scale tensor '{}' must be F32 and not quantized, got {}", file,
           name, q.global_scale(), proto::DType_Name(global->dtype()));
  const Shape got(global->shape().begin(), global->shape().end());
  const int64_t rank = t.shape_size();
  const int64_t R = t.shape(rank - 2);
  const Shape lead(t.shape().begin(), t.shape().end() - 2);
  const bool lead_matches = static_cast<int64_t>(got.size()) == rank - 1 &&
                            std::equal(lead.begin(), lead.end(), got.begin());
  const int64_t S = got.empty() ? 0 : got.back();
  MG_CHECK(lead_matches && S >= 1 && R % S == 0,
           "{}: tensor '{}': global scale tensor '{}' has shape {}, but codes of {} rows need "
           "{} followed by a count S of row segments that divides {}",
           file, name, q.global_scale(), shape_str(got), R, shape_str(lead), R);
}

bool is_fp4_quantization(const proto::TensorQuantization& q) {
  return q.element() == proto::QUANT_ELEMENT_FP4_E2M1;
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
