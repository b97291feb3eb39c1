// Checks of integer weight-only quantized tensors (TensorQuantization with element INT4 / UINT4 /
// INT8 / UINT8, proto/model.proto), run by the verifier: the logical shape, the packing and the
// stored shapes it implies for the codes, scales, zero points and g_idx, their dtypes, and the
// fields integer codes do not take. Every message names the file and the tensor.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "framework/core/int_quant.h"
#include "proto/model.pb.h"

namespace mg {

bool is_integer_quant_element(proto::QuantElement element);
QuantElement quant_element_from_proto(proto::QuantElement element);
IntPacking int_packing_from_proto(proto::QuantPacking packing);

struct IntQuantizationInfo {
  GroupShape group;  // {1, group_cols}
  QuantElement element;
  Shape logical_shape;
};

// A declared weight tensor of the model by name, or null.
using TensorInfoLookup = std::function<const proto::TensorInfo*(const std::string&)>;

IntQuantizationInfo check_int_tensor_quantization(const proto::Model& model,
                                                  const proto::TensorInfo& t,
                                                  const TensorInfoLookup& lookup,
                                                  std::string_view file);

}  // namespace mg
