// Element type conversions between the floating dtypes activations and weights use.
//
// cast_cpu converts on the host (weights at compile time, test inputs); convert_tensor converts on
// the tensors' own device (the session's logits, kept in the activation dtype on GPUs, are handed
// back as F32).
#pragma once

#include "framework/core/tensor.h"
#include "framework/device/stream.h"

namespace mg {

// A new host tensor holding `src` (host; F32, F16, BF16 or F64) as `dtype` (F32, F16 or BF16),
// rounded to nearest even. Returns a fresh copy also when the dtype does not change.
Tensor cast_cpu(const Tensor& src, DType dtype);

// dst = src converted elementwise; both on the same device with the same element count, each
// F32, F16 or BF16. Queued on `stream` on GPUs (no host synchronisation); with a null stream
// (compile time) done on return.
void convert_tensor(const Tensor& dst, const Tensor& src, Stream* stream);

}  // namespace mg
