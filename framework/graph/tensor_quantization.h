// Checks of the quantized tensors a graph declares (TensorInfo.quantization, proto/model.proto),
// run by the verifier: the scale tensor exists, is a float tensor that is not itself quantized
// and has the shape the group implies; the codes are a type and rank that some op can take; the
// reserved fields (packed elements, zero points, global scales) are
// refused as not supported yet. Every message names the file and the tensor.
#pragma once

#include <string_view>

#include "framework/core/quant.h"
#include "proto/model.pb.h"

namespace mg {

// The scale group of quantized tensor `t` of `model`, after checking it as above. `scale` is the
// tensor t.quantization().scale names, or null when the model declares none of that name;
// `activation_scale` likewise for t.quantization().activation_scale (ACT_QUANT_STATIC: an
// unquantized float tensor of shape [1]).
GroupShape check_tensor_quantization(const proto::Model& model, const proto::TensorInfo& t,
                                     const proto::TensorInfo* scale, std::string_view file,
                                     const proto::TensorInfo* activation_scale = nullptr);

// (fp4) The global scale tensor of FP4 tensor `t` (`global`: the tensor
// t.quantization().global_scale names, or null), checked as proto/model.proto says; nothing when
// it names none.
void check_fp4_global_scale(const proto::TensorInfo& t, const proto::TensorInfo* global,
                            std::string_view file);

// (fp4) `q` declares packed FP4 E2M1 codes (U8 [..., R, C / 2]).
bool is_fp4_quantization(const proto::TensorQuantization& q);

// The activation handling `q` asks of the consumer (checked by check_tensor_quantization).
ActivationQuant activation_quant_of(const proto::TensorQuantization& q);

}  // namespace mg
