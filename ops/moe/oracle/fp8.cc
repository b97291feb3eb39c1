#include "ops/moe/oracle/fp8.h"

#include "ops/moe/experts/cpu_fp8_experts.h"
#include "ops/moe/oracle/unquantized.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/experts/cuda_cublaslt_fp8_experts.h"
#include "ops/moe/experts/cuda_fp8_experts.h"
#endif

namespace mg {

namespace {

// How the rank's shard of a quantized matrix picks rows (or columns) of the full one: shard
// index j comes from full index src(j), and the shard's scale group along that dimension is
// `group` (-1: whole dimension) with shard scale index j / group taken from full scale index
// src(j) / full_group. Valid when every shard group maps onto one full group.
struct ScaleMap {
  int64_t full_group;   // -1 or >= 1, along the full dimension
  int64_t shard_group;  // -1 or >= 1, along the shard dimension
};

// Scale group of a shard that takes [first, first + len) of segments of `segment` elements (one
// segment: w2's columns; two: w13's gate and up rows), or "" in `why` when it cannot.
ScaleMap shard_scale_map(int64_t full_group, int64_t segment, int64_t first, int64_t len,
                         bool whole, std::string& why, std::string_view what) {
  if (whole || full_group == -1) return {full_group, full_group};
  if (full_group == segment) return {full_group, len};  // one scale per segment (projection)
  if (first % full_group != 0 || (len % full_group != 0 && first + len != segment) ||
      (segment % full_group != 0 && first + len != segment)) {
    why = fmt::format(
        "{}: the shard [{}, {}) of {} does not fall on the scale groups of {} (the intermediate "
        "size per rank must be a multiple of the group)",
        what, first, first + len, segment, full_group);
  }
  return {full_group, full_group};
}

}  // namespace

std::vector<const ExpertsBackend*> fp8_priority(Device device) {
  std::vector<const ExpertsBackend*> list;
  switch (device.type) {
    case DeviceType::kCPU:
      list = {&cpu_fp8_backend()};
      break;
    case DeviceType::kCUDA:
#ifdef MG_WITH_CUDA
      // cuda_cublaslt_fp8 takes a subset of cuda_fp8's cases: it runs when forced (a cross-check
      // and second choice), never in place of cuda_fp8.
      list = {&cuda_fp8_backend(), &cuda_cublaslt_fp8_backend(), &cuda_dequant_backend()};
#endif
      break;
  }
  // The unquantized backends follow, so that `inspect --plan` and a forced request say why they
  // do not take FP8 weights instead of calling them unknown.
  for (const ExpertsBackend* b : unquantized_priority(device)) list.push_back(b);
  return list;
}

MoEQuantConfig fp8_quant_config(const MoEConfig& config, const RawExpertWeights& raw,
                                DType activation_dtype, bool quantize_activations) {
  const WeightQuantization& w13 = raw.w13_quant;
  const WeightQuantization& w2 = raw.w2_quant;
  MG_CHECK(w13.defined() && w2.defined(), "quant scheme {} needs quantized w13 and w2",
           quant_scheme_name(config.quant_scheme()));
  MG_CHECK(w13.activation == w2.activation && w13.activation_group == w2.activation_group,
           "w13 and w2 quantize activations differently (activation {} vs {}, group {} vs {}); "
           "one MoE layer takes one activation scheme",
           static_cast<int>(w13.activation), static_cast<int>(w2.activation), w13.activation_group,
           w2.activation_group);
  // The weight key names w2's group: w13's differs only for per-projection per-tensor scales.
  const QuantKey weight(DType::kF8E4M3, DType::kF32, w2.group, /*is_static=*/true);
  if (w13.activation == ActivationQuant::kNone || !quantize_activations) {
    return MoEQuantConfig(config.quant_scheme(), weight, QuantKey::unquantized(activation_dtype));
  }
  // Static: one fixed scale per GEMM input (w13's and w2's activation_scale), per token in
  // layout; dynamic: per token per activation_group channels.
  const bool is_static = w13.activation == ActivationQuant::kStatic;
  const QuantKey activation(
      DType::kF8E4M3, DType::kF32,
      is_static ? GroupShape::per_token() : GroupShape{1, w13.activation_group}, is_static);
  return MoEQuantConfig(config.quant_scheme(), weight, activation);
}

QuantizedExpertWeights convert_fp8_weights(const MoEConfig& config, const ParallelConfig& parallel,
                                           const ExpertsShape& shape, const RawExpertWeights& raw) {
  MG_CHECK(raw.w13.device().is_cpu() && raw.w2.device().is_cpu(),
           "FP8 expert weights must be loaded in host memory");
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t I = config.intermediate_size(), I_local = shape.intermediate_size;
  const int64_t N1 = config.w13_rows(), N1_local = shape.w13_rows();
  const bool gated = is_gated(config.activation().kind);
  const int64_t first = parallel.moe_tp_rank() * I_local;
  const bool whole = I_local == I;
  const std::vector<int32_t>& global = shape.expert_map.local_to_global;
  const GroupShape g13 = raw.w13_quant.group, g2 = raw.w2_quant.group;

  std::string why;
  const ScaleMap rows13 = shard_scale_map(g13.rows, I, first, I_local, whole, why, "w13 rows");
  const ScaleMap cols2 = shard_scale_map(g2.cols, I, first, I_local, whole, why, "w2 columns");
  MG_CHECK(why.empty(), "FP8 experts cannot be split this way ({}): {}", parallel.str(), why);
  // Full and shard row of w13 row r (gate rows, then up rows).
  auto src_row = [&](int64_t r) {
    if (!gated) return first + r;
    return r < I_local ? first + r : I + first + (r - I_local);
  };

  QuantizedExpertWeights out;
  out.w13_quant = raw.w13_quant;
  out.w13_quant.group = GroupShape{rows13.shard_group, g13.cols};
  out.w2_quant = raw.w2_quant;
  out.w2_quant.group = GroupShape{g2.rows, cols2.shard_group};

  // w13 codes and scales: rows by src_row, all H columns.
  out.w13 = Tensor::empty_cpu(DType::kF8E4M3, {E, N1_local, H});
  out.w13_quant.scale =
      Tensor::empty_cpu(DType::kF32, scale_shape_for(out.w13.shape(), out.w13_quant.group));
  {
    const uint8_t* src = fp8_codes(raw.w13);
    uint8_t* dst = fp8_codes(out.w13);
    const Tensor& s_full = raw.w13_quant.scale;
    const int64_t s_rows = s_full.dim(1), s_cols = s_full.dim(2);
    const int64_t d_rows = out.w13_quant.scale.dim(1);
    const float* ss = s_full.data<float>();
    float* ds = out.w13_quant.scale.data<float>();
    const int64_t shard_group = out.w13_quant.group.rows_in(N1_local);
    const int64_t full_group = g13.rows_in(N1);
    for (int64_t l = 0; l < E; ++l) {
      const int64_t g = global[l];
      for (int64_t r = 0; r < N1_local; ++r) {
        std::copy_n(src + (g * N1 + src_row(r)) * H, H, dst + (l * N1_local + r) * H);
      }
      for (int64_t b = 0; b < d_rows; ++b) {
        const int64_t full_block = src_row(b * shard_group) / full_group;
        std::copy_n(ss + (g * s_rows + full_block) * s_cols, s_cols,
                    ds + (l * d_rows + b) * s_cols);
      }
    }
  }
  // w2 codes and scales: all H rows, columns [first, first + I_local).
  out.w2 = Tensor::empty_cpu(DType::kF8E4M3, {E, H, I_local});
  out.w2_quant.scale =
      Tensor::empty_cpu(DType::kF32, scale_shape_for(out.w2.shape(), out.w2_quant.group));
  {
    const uint8_t* src = fp8_codes(raw.w2);
    uint8_t* dst = fp8_codes(out.w2);
    const Tensor& s_full = raw.w2_quant.scale;
    const int64_t s_rows = s_full.dim(1), s_cols = s_full.dim(2);
    const int64_t d_cols = out.w2_quant.scale.dim(2);
    const float* ss = s_full.data<float>();
    float* ds = out.w2_quant.scale.data<float>();
    const int64_t shard_group = out.w2_quant.group.cols_in(I_local);
    const int64_t full_group = g2.cols_in(I);
    for (int64_t l = 0; l < E; ++l) {
      const int64_t g = global[l];
      for (int64_t h = 0; h < H; ++h) {
        std::copy_n(src + (g * H + h) * I + first, I_local, dst + (l * H + h) * I_local);
      }
      for (int64_t r = 0; r < s_rows; ++r) {
        for (int64_t c = 0; c < d_cols; ++c) {
          ds[(l * s_rows + r) * d_cols + c] =
              ss[(g * s_rows + r) * s_cols + (first + c * shard_group) / full_group];
        }
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
