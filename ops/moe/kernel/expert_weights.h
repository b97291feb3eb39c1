// Expert weights of one rank in the canonical unquantized layout: what the unquantized oracle
// module produces from a node's raw inputs (any float dtype, transposed or interleaved, all
// experts, full width) and what each backend then converts to its own layout. The CUDA backends
// also adopt tensors that are already on their GPU in the activation dtype (the MoE benchmark's
// layers, generated on the device).
#pragma once

#include "framework/core/quant.h"
#include "framework/core/tensor.h"

namespace mg {

struct CanonicalExpertWeights {
  // [E_local, N1, H] F32, N1 = 2 I_local (gate rows, then up rows) or I_local (not gated).
  Tensor w13;
  // [E_local, N1] F32 or undefined.
  Tensor w13_bias;
  // [E_local, H, I_local] F32.
  Tensor w2;
  // [E_local, H] F32 or undefined. Only the moe_tp_rank 0 shard carries it, so that summing the
  // TP shards adds it once.
  Tensor w2_bias;
};

// Quantized expert weights of one rank in the canonical layout (what a quantized scheme's oracle
// module produces): the checkpoint's codes with their scales, sliced to this rank's experts and
// intermediate shard, gate rows before up rows. Biases are F32 as in CanonicalExpertWeights.
struct QuantizedExpertWeights {
  // [E_local, N1, H] codes; scales [E_local, ceil(N1 / rows), ceil(H / cols)] F32.
  Tensor w13;
  WeightQuantization w13_quant;
  // [E_local, H, I_local] codes; scales [E_local, ceil(H / rows), ceil(I_local / cols)] F32.
  Tensor w2;
  WeightQuantization w2_quant;
  Tensor w13_bias;
  Tensor w2_bias;
};

}  // namespace mg
