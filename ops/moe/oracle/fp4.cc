#include "ops/moe/oracle/fp4.h"

#include <algorithm>

#include "framework/core/fp4_scale_bytes.h"
#include "framework/device/allocator.h"
#include "ops/moe/experts/cpu_fp4_experts.h"
#include "ops/moe/oracle/unquantized.h"
#ifdef MG_WITH_CUDA
#include <cuda_runtime_api.h>

#include "framework/device/cuda/cuda_check.h"
#include "ops/moe/experts/cuda_fp8_experts.h"
#include "ops/moe/experts/cuda_wna16_experts.h"
#endif

namespace mg {

bool is_fp4_scheme(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
      return true;
    case QuantScheme::kUnquantized:
    case QuantScheme::kFp8PerTensor:
    case QuantScheme::kFp8Block:
    case QuantScheme::kFp8PerChannel:
    case QuantScheme::kInt8WeightOnly:
    case QuantScheme::kInt4WeightOnly:
      return false;
  }
  return false;
}

std::vector<const ExpertsBackend*> fp4_priority(Device device) {
  std::vector<const ExpertsBackend*> list;
  switch (device.type) {
    case DeviceType::kCPU:
      list = {&cpu_fp4_backend()};
      break;
    case DeviceType::kCUDA:
#ifdef MG_WITH_CUDA
      // cuda_fp4 reads the codes packed and dequantizes in registers; cuda_dequant (4x the
      // bytes in BF16) takes what it refuses.
      list = {&cuda_fp4_backend(), &cuda_dequant_backend()};
#endif
      break;
  }
  for (const ExpertsBackend* b : unquantized_priority(device)) list.push_back(b);
  return list;
}

MoEQuantConfig fp4_quant_config(const MoEConfig& config, const RawExpertWeights& raw,
                                DType activation_dtype) {
  const QuantScheme scheme = config.quant_scheme();
  MG_ASSERT(is_fp4_scheme(scheme), "fp4 oracle module for {}", quant_scheme_name(scheme));
  MG_CHECK(raw.w13_quant.defined() && raw.w2_quant.defined() && raw.w13.dtype() == DType::kU8 &&
               raw.w2.dtype() == DType::kU8,
           "quant scheme {} needs FP4_E2M1 w13 and w2", quant_scheme_name(scheme));
  const bool mx = scheme == QuantScheme::kMxfp4;
  const QuantKey weight(DType::kU8, mx ? DType::kU8 : DType::kF8E4M3, raw.w2_quant.group,
                        /*is_static=*/true);
  return MoEQuantConfig(scheme, weight, QuantKey::unquantized(activation_dtype));
}

namespace {

// Whether every scale of one matrix has a byte code (fp4_scale_byte), and the largest E8M0 code
// (MXFP4). Host F32 scales [E, R, G] are read; scales on a GPU are random weights, which are made
// on the byte grid (round_fp4_scale) from values O(1 / sqrt(K)), so they are taken as they are
// (cuda_fp4's repacking on the GPU checks them again).
ExpertWeightFacts::Matrix scale_facts(const WeightQuantization& q, bool e8m0) {
  ExpertWeightFacts::Matrix m{4, q.group.cols, false, true, 0};
  if (!q.scale.device().is_cpu() || q.scale.dtype() != DType::kF32) return m;
  const Tensor& scale = q.scale;
  const int64_t E = scale.dim(0), R = scale.dim(1), G = scale.numel() / (E * R);
  Tensor globals;
  if (!e8m0 && q.global_scale.defined()) globals = to_f32_cpu(to_host_tensor(q.global_scale));
  const int64_t S = globals.defined() ? globals.numel() / E : 1;
  const float* v = scale.data<float>();
  uint32_t code = 0;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < R; ++r) {
      const float global = globals.defined() ? globals.data<float>()[e * S + r / (R / S)] : 1.0f;
      for (int64_t g = 0; g < G; ++g) {
        if (!fp4_scale_byte(v[(e * R + r) * G + g], e8m0, global, &code)) {
          m.scales_have_bytes = false;
          return m;
        }
        if (e8m0) m.largest_e8m0_code = std::max(m.largest_e8m0_code, static_cast<int>(code));
      }
    }
  }
  return m;
}

}  // namespace

ExpertWeightFacts fp4_weight_facts(const RawExpertWeights& raw, QuantScheme scheme) {
  const bool e8m0 = scheme == QuantScheme::kMxfp4;
  ExpertWeightFacts f;
  f.w13 = scale_facts(raw.w13_quant, e8m0);
  f.w2 = scale_facts(raw.w2_quant, e8m0);
  return f;
}

namespace {

// Whole layers of FP4 codes on the GPU (random weights): w2 and a gate-then-up w13 are taken as
// they are, an interleaved w13 (GPT-OSS: gate rows even, up rows odd) is split into its gate and
// up halves there, rows and their scales (cuda_fp4 repacks them on the GPU).
QuantizedExpertWeights device_fp4_weights(const MoEConfig& config, const ExpertsShape& shape,
                                          const RawExpertWeights& raw) {
  MG_CHECK(is_whole_layer(config, shape),
           "FP4 expert weights on {} are taken whole (every expert on this rank, the full "
           "intermediate size); load them in host memory to split them",
           raw.w13.device().str());
  QuantizedExpertWeights out = codes_as_stored(raw);
  const bool gated = is_gated(config.activation().kind);
  if (gated && config.gate_up_interleaved()) {
#ifdef MG_WITH_CUDA
    const Device device = raw.w13.device();
    const int64_t E = shape.num_local_experts(), I = config.intermediate_size();
    // Row r < I of the result is stored row 2 r, row I + r stored row 2 r + 1: per expert and
    // half, I rows at twice the row pitch.
    const auto split = [&](const Tensor& stored) {
      Tensor src = stored;
      if (src.device() != device) {
        src = empty_tensor(device, stored.dtype(), stored.shape());
        copy_tensor(src, stored);
      }
      Tensor dst = empty_tensor(device, src.dtype(), src.shape());
      const size_t row = static_cast<size_t>(src.nbytes() / (E * 2 * I));
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t half = 0; half < 2; ++half) {
          const auto* from = static_cast<const uint8_t*>(src.raw()) + (e * 2 * I + half) * row;
          auto* to = static_cast<uint8_t*>(dst.raw()) + (e * 2 + half) * I * row;
          MG_CUDA_CHECK(cudaMemcpy2D(to, row, from, 2 * row, row, static_cast<size_t>(I),
                                     cudaMemcpyDeviceToDevice));
        }
      }
      // Complete on return (device-to-device copies are asynchronous to the host), and before
      // `src` can be freed.
      MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
      return dst;
    };
    out.w13 = split(raw.w13);
    out.w13_quant.scale = split(raw.w13_quant.scale);
#else
    MG_FAIL("FP4 expert weights on {}: this moegraph was built without CUDA",
            raw.w13.device().str());
#endif
  }
  // Biases as the unquantized conversion makes them (F32, canonical rows; whole layer).
  const int64_t E = shape.num_local_experts(), I = config.intermediate_size();
  const bool interleaved = gated && config.gate_up_interleaved();
  if (raw.w13_bias.defined()) {
    const Tensor full = to_f32_cpu(to_host_tensor(raw.w13_bias));
    const int64_t N1 = full.dim(1);
    out.w13_bias = Tensor::empty_cpu(DType::kF32, {E, N1});
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t r = 0; r < N1; ++r) {
        const int64_t src = interleaved ? (r < I ? 2 * r : 2 * (r - I) + 1) : r;
        out.w13_bias.data<float>()[e * N1 + r] = full.data<float>()[e * N1 + src];
      }
    }
  }
  if (raw.w2_bias.defined()) out.w2_bias = to_f32_cpu(to_host_tensor(raw.w2_bias));
  return out;
}

}  // namespace

QuantizedExpertWeights convert_fp4_weights(const MoEConfig& config, const ParallelConfig& parallel,
                                           const ExpertsShape& shape, const RawExpertWeights& raw) {
  if (!raw.w13.device().is_cpu() || !raw.w2.device().is_cpu()) {
    // w2's bias is added once, on TP rank 0: a whole layer is TP rank 0's.
    return device_fp4_weights(config, shape, raw);
  }
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t I = config.intermediate_size(), I_local = shape.intermediate_size;
  const int64_t N1 = config.w13_rows(), N1_local = shape.w13_rows();
  const bool gated = is_gated(config.activation().kind);
  const bool interleaved = gated && config.gate_up_interleaved();
  const int64_t first = parallel.moe_tp_rank() * I_local;
  const std::vector<int32_t>& global = shape.expert_map.local_to_global;
  MG_ASSERT(raw.w13_quant.group.rows == 1 && raw.w2_quant.group.rows == 1,
            "FP4 groups w13 {} w2 {}", raw.w13_quant.group.str(), raw.w2_quant.group.str());
  const int64_t g2 = raw.w2_quant.group.cols_in(I);
  MG_CHECK(I_local == I || (first % g2 == 0 && (I_local % g2 == 0 || first + I_local == I)),
           "FP4 experts cannot be split this way ({}): w2's columns [{}, {}) of {} do not fall on "
           "its scale groups of {} (the intermediate size per rank must be a multiple of {})",
           parallel.str(), first, first + I_local, I, g2, g2);
  // Full row of shard row r of w13 (gate rows, then up rows).
  auto src_row = [&](int64_t r) {
    if (!gated) return first + r;
    const bool up = r >= I_local;
    const int64_t i = first + (up ? r - I_local : r);
    if (interleaved) return 2 * i + (up ? 1 : 0);
    return up ? I + i : i;
  };

  QuantizedExpertWeights out;
  out.w13_quant = raw.w13_quant;
  out.w2_quant = raw.w2_quant;
  // NVFP4's global scales [E, S] of this rank's experts (S: per matrix, or per gate / up part,
  // which the row order above keeps; interleaved rows would mix the parts).
  const auto local_globals = [&](const Tensor& stored, const char* what) {
    if (!stored.defined()) return Tensor();
    const Tensor g = to_f32_cpu(to_host_tensor(stored));
    const int64_t S = g.numel() / config.num_experts();
    MG_CHECK(g.numel() == config.num_experts() * S && (S == 1 || !interleaved),
             "FP4 {} global scales {}: one per expert (or per gate / up half of rows not "
             "interleaved) expected",
             what, shape_str(g.shape()));
    Tensor t = Tensor::empty_cpu(DType::kF32, {E, S});
    for (int64_t l = 0; l < E; ++l) {
      std::copy_n(g.data<float>() + global[l] * S, S, t.data<float>() + l * S);
    }
    return t;
  };
  out.w13_quant.global_scale = local_globals(raw.w13_quant.global_scale, "w13");
  out.w2_quant.global_scale = local_globals(raw.w2_quant.global_scale, "w2");
  // w13: whole packed rows by src_row, each with its row of scales.
  const int64_t Hb = H / 2, s13 = raw.w13_quant.scale.dim(2);
  out.w13 = Tensor::empty_cpu(DType::kU8, {E, N1_local, Hb});
  out.w13_quant.scale = Tensor::empty_cpu(DType::kF32, {E, N1_local, s13});
  {
    const uint8_t* src = static_cast<const uint8_t*>(raw.w13.raw());
    uint8_t* dst = static_cast<uint8_t*>(out.w13.raw());
    const float* ss = raw.w13_quant.scale.data<float>();
    float* ds = out.w13_quant.scale.data<float>();
    for (int64_t l = 0; l < E; ++l) {
      const int64_t g = global[l];
      for (int64_t r = 0; r < N1_local; ++r) {
        const int64_t sr = g * N1 + src_row(r), dr = l * N1_local + r;
        std::copy_n(src + sr * Hb, Hb, dst + dr * Hb);
        std::copy_n(ss + sr * s13, s13, ds + dr * s13);
      }
    }
  }
  // w2: all H rows, columns [first, first + I_local) (whole bytes and whole scale groups).
  const int64_t Ib = I / 2, Ib_local = I_local / 2, s2 = raw.w2_quant.scale.dim(2);
  const int64_t s2_local = (I_local + g2 - 1) / g2, s2_first = first / g2;
  out.w2 = Tensor::empty_cpu(DType::kU8, {E, H, Ib_local});
  out.w2_quant.scale = Tensor::empty_cpu(DType::kF32, {E, H, s2_local});
  {
    const uint8_t* src = static_cast<const uint8_t*>(raw.w2.raw());
    uint8_t* dst = static_cast<uint8_t*>(out.w2.raw());
    const float* ss = raw.w2_quant.scale.data<float>();
    float* ds = out.w2_quant.scale.data<float>();
    for (int64_t l = 0; l < E; ++l) {
      const int64_t g = global[l];
      for (int64_t h = 0; h < H; ++h) {
        std::copy_n(src + (g * H + h) * Ib + first / 2, Ib_local, dst + (l * H + h) * Ib_local);
        std::copy_n(ss + (g * H + h) * s2 + s2_first, s2_local, ds + (l * H + h) * s2_local);
      }
    }
  }
  // Biases as the unquantized conversion makes them (F32, canonical rows, w2's on TP rank 0).
  auto f32_rows = [&](const Tensor& bias, int64_t rows, auto row_of) {
    Tensor t = Tensor::empty_cpu(DType::kF32, {E, rows});
    const Tensor full = to_f32_cpu(bias);
    const int64_t width = full.dim(1);
    for (int64_t l = 0; l < E; ++l) {
      for (int64_t r = 0; r < rows; ++r) {
        t.data<float>()[l * rows + r] = full.data<float>()[global[l] * width + row_of(r)];
      }
    }
    return t;
  };
  if (raw.w13_bias.defined()) out.w13_bias = f32_rows(raw.w13_bias, N1_local, src_row);
  if (raw.w2_bias.defined() && parallel.moe_tp_rank() == 0) {
    out.w2_bias = f32_rows(raw.w2_bias, H, [](int64_t h) { return h; });
  }
  return out;
}

}  // namespace mg
