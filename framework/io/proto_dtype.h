// Conversions between the graph file's proto::DType and mg::DType.
#pragma once

#include <string_view>

#include "framework/core/dtype.h"
#include "proto/model.pb.h"

namespace mg {

// Throws mg::Error "<context>: dtype is unspecified ..." for DTYPE_UNSPECIFIED and for values this
// build does not know (a newer writer); `context` names the file and the value, e.g.
// "model.pbtxt: tensor 'w'".
DType from_proto(proto::DType dtype, std::string_view context);
proto::DType to_proto(DType dtype);

}  // namespace mg
