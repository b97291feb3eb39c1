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

// The least work a prefill of one sequence of `tokens` prompt tokens does, from the graph:
//   bytes  every dense weight once, and per MoE layer the top_k experts that any token must read
//          (a token's k experts are distinct, so at least min(k, E) of them are touched whatever
//          the router does), at the bytes decode_weight_bytes counts (quantized tensors at their
//          stored bytes): a true lower bound;
//   bytes_uniform  the same with the experts expected to get at least one of the tokens x top_k
//          routed rows under uniform routing, E (1 - (1 - k/E)^tokens) of E: what a prefill
//          reads when the router spreads tokens as trained routers roughly do. It is not a bound:
//          a router that sends the prompt's tokens to few experts (random weights often do, as
//          `bench e2e --random-weights` on qwen3 at 512 tokens showed: 117% of it) reads less;
//   flops  2 x rows x the logical elements of every weight matrix a node multiplies by: all
//          tokens for linear, gated_mlp, the MoE router and shared experts; tokens x top_k / E
//          rows per routed expert; one row for a linear that writes a graph output (the logits:
//          generation needs the last row only); plus attention's 2 (d_qk + d_v) per head and
//          (query, visible key) pair, causal from position 0, within its sliding window or chunk.
// Norms, rope, activations and the embedding lookup are left out (a few flops per element).
struct PrefillWork {
  double bytes = 0;
  double bytes_uniform = 0;
  double flops = 0;
};
PrefillWork prefill_work(const proto::Model& model, DType activation_dtype, int64_t tokens);

// The device's measured ceilings for the floors: copy bandwidth (read + write bytes per second)
// and, on a GPU, the dense GEMM rate in the activation dtype's 16-bit tensor-core path (BF16
// 8192^3, as `bench moe` measures it); 0 where not measured (the CPU).
struct DeviceCeilings {
  double copy_bytes_per_s = 0;
  double gemm_flops_per_s = 0;
};
DeviceCeilings measure_device_ceilings(const Device& device);

// Bytes read + written per second by a large copy on `device`: a device-to-device copy on a GPU
// (as `bench moe` measures it), a host memcpy on the CPU. On a GPU it needs 2 GiB of free memory,
// so measure before the weights are placed.
double measure_copy_bandwidth(const Device& device);

}  // namespace mg
