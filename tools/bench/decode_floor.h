// The weight-bandwidth floor of batch-1 decode (`bench e2e`): the weight bytes one decode step
// must read, from the graph, over the measured copy bandwidth of the device.
//
//   bytes = dense weights + Σ over MoE layers of top_k / E of the layer's routed-expert weights
//
// (under uniform routing a token reads k of the E experts). A tensor stored quantized (FP8, FP4,
// INT4/INT8 codes) counts its stored bytes, and so do the tensors its quantization names (scales,
// zero points, g_idx, global scales): the packed bytes plus the scales, what the format holds.
// Every other weight counts in the activation dtype it is placed in. Tensors read only by
// embedding lookups (a step reads one row) are left out. The KV cache is not counted.
#pragma once

#include "framework/core/dtype.h"
#include "framework/device/device.h"
#include "proto/model.pb.h"

namespace mg {

struct DecodeWeightBytes {
  double dense = 0;    // read whole every step (attention, norms, routers, shared experts, lm_head)
  double experts = 0;  // the routed experts' share: top_k / E of each MoE layer's expert weights
  double quantized = 0;  // of dense + experts: the bytes of quantized tensors and their scales
  double total() const { return dense + experts; }
};

DecodeWeightBytes decode_weight_bytes(const proto::Model& model, DType activation_dtype);

// Bytes read + written per second by a large copy on `device`: a device-to-device copy on a GPU
// (as `bench moe` measures it), a host memcpy on the CPU. On a GPU it needs 2 GiB of free memory,
// so measure before the weights are placed.
double measure_copy_bandwidth(const Device& device);

}  // namespace mg
