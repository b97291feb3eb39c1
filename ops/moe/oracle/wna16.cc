#include "ops/moe/oracle/wna16.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "framework/core/int_quant.h"
#include "ops/moe/experts/cpu_wna16_experts.h"
#include "ops/moe/oracle/unquantized.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/experts/cuda_fp8_experts.h"
#include "ops/moe/experts/cuda_wna16_experts.h"
#endif

namespace mg {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Per-expert permutation of the intermediate channels that makes w2's act-order groups
// contiguous: perm[j] is the full channel the permuted channel j comes from, and after it
// g_idx[perm[j]] == j / g for every j (what GPTQ's act-order quantizer produces). Empty when
// w2 has no g_idx or its groups are not of that form (then the g_idx is kept).
std::vector<std::vector<int64_t>> act_order_permutations(const WeightQuantization& q2,
                                                         const std::vector<int32_t>& experts,
                                                         int64_t I) {
  if (!q2.g_idx.defined() || q2.g_idx.dim(-2) != 1) return {};
  const int64_t g = q2.group.cols;
  std::vector<std::vector<int64_t>> perms;
  for (int32_t e : experts) {
    const int32_t* gi = q2.g_idx.data<int32_t>() + e * I;
    std::vector<int64_t> perm(static_cast<size_t>(I));
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return gi[a] < gi[b]; });
    for (int64_t j = 0; j < I; ++j) {
      if (gi[perm[j]] != j / g) return {};
    }
    perms.push_back(std::move(perm));
  }
  return perms;
}

}  // namespace

std::vector<const ExpertsBackend*> wna16_priority(Device device) {
  std::vector<const ExpertsBackend*> list;
  switch (device.type) {
    case DeviceType::kCPU:
      list = {&cpu_wna16_backend()};
      break;
    case DeviceType::kCUDA:
#ifdef MG_WITH_CUDA
      // cuda_wna16 streams the packed codes; what its weights check refuses (act-order w13,
      // partial or odd groups) runs on cuda_dequant, and inspect --plan says why.
      list = {&cuda_wna16_backend(), &cuda_dequant_backend()};
#endif
      break;
  }
  for (const ExpertsBackend* b : unquantized_priority(device)) list.push_back(b);
  return list;
}

ExpertWeightFacts wna16_weight_facts(const RawExpertWeights& raw) {
  const WeightQuantization& q13 = raw.w13_quant;
  const WeightQuantization& q2 = raw.w2_quant;
  ExpertWeightFacts f;
  f.w13 = {quant_element_bits(q13.element), q13.group.cols, q13.g_idx.defined()};
  // w2's g_idx is folded away when every expert's groups can be made contiguous (the test
  // convert_wna16_weights makes, here over all experts).
  bool w2_kept = false;
  if (q2.g_idx.defined()) {
    std::vector<int32_t> experts(static_cast<size_t>(q2.logical_shape.front()));
    std::iota(experts.begin(), experts.end(), 0);
    w2_kept = act_order_permutations(q2, experts, q2.logical_shape.back()).empty();
  }
  f.w2 = {quant_element_bits(q2.element), q2.group.cols, w2_kept};
  return f;
}

MoEQuantConfig wna16_quant_config(const MoEConfig& config, const RawExpertWeights& raw,
                                  DType activation_dtype) {
  const WeightQuantization& w13 = raw.w13_quant;
  const WeightQuantization& w2 = raw.w2_quant;
  MG_CHECK(w13.defined() && w2.defined() && w13.is_integer() && w2.is_integer(),
           "quant scheme {} needs w13 and w2 as integer codes",
           quant_scheme_name(config.quant_scheme()));
  MG_CHECK(quant_element_bits(w13.element) == quant_element_bits(w2.element),
           "w13 holds {} codes but w2 {}; one MoE layer takes one code width",
           quant_element_name(w13.element), quant_element_name(w2.element));
  // The weight key names w2's codes and group.
  const QuantKey weight =
      QuantKey::integer(w2.element, DType::kF32, w2.group, w2.zero_point.defined());
  return MoEQuantConfig(config.quant_scheme(), weight, QuantKey::unquantized(activation_dtype));
}

QuantizedExpertWeights convert_wna16_weights(const MoEConfig& config,
                                             const ParallelConfig& parallel,
                                             const ExpertsShape& shape,
                                             const RawExpertWeights& raw) {
  if (!raw.w13.device().is_cpu() || !raw.w2.device().is_cpu()) {
    // Codes made on the GPU (random weights) stay there; cuda_wna16 repacks them in place.
    MG_CHECK(is_whole_layer(config, shape) && !raw.w13_quant.g_idx.defined() &&
                 !raw.w2_quant.g_idx.defined() && !raw.w13_bias.defined() && !raw.w2_bias.defined(),
             "integer expert weights on {} are taken whole (every expert on this rank, the full "
             "intermediate size, no act-order g_idx, no biases); load them in host memory to "
             "split or permute them",
             raw.w13.device().str());
    return codes_as_stored(raw);
  }
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t I = config.intermediate_size(), I_local = shape.intermediate_size;
  const int64_t N1 = config.w13_rows(), N1_local = shape.w13_rows();
  const bool gated = is_gated(config.activation().kind);
  const int64_t first = parallel.moe_tp_rank() * I_local;
  const bool whole = I_local == I;
  const std::vector<int32_t>& global = shape.expert_map.local_to_global;
  const WeightQuantization& q13 = raw.w13_quant;
  const WeightQuantization& q2 = raw.w2_quant;
  const int64_t g2 = q2.group.cols;

  const std::vector<std::vector<int64_t>> perms = act_order_permutations(q2, global, I);
  const bool keep_w2_gidx = q2.g_idx.defined() && perms.empty();
  const int64_t P13 = q13.g_idx.defined() ? q13.g_idx.dim(-2) : 1;
  if (!whole) {
    MG_CHECK(g2 < 0 || I_local % g2 == 0,
             "integer experts cannot be split this way ({}): w2 columns [{}, {}) of {} do not "
             "fall on its scale groups of {} (the intermediate size per rank must be a multiple "
             "of the group)",
             parallel.str(), first, first + I_local, I, g2);
    MG_CHECK(!keep_w2_gidx,
             "integer experts cannot be split this way ({}): w2's act-order groups (g_idx) are "
             "not of equal size, so they cannot be made contiguous",
             parallel.str());
    MG_CHECK(!q13.g_idx.defined() || P13 == 1 || (P13 == 2 && gated),
             "integer experts cannot be split this way ({}): w13's g_idx covers {} checkpoint "
             "matrices",
             parallel.str(), P13);
  }
  // Full channel of shard channel j of local expert l, and full w13 row of shard row r.
  auto channel = [&](int64_t l, int64_t j) {
    return perms.empty() ? first + j : perms[static_cast<size_t>(l)][first + j];
  };
  auto src_row = [&](int64_t l, int64_t r) {
    if (!gated) return channel(l, r);
    return r < I_local ? channel(l, r) : I + channel(l, r - I_local);
  };

  QuantizedExpertWeights out;
  // w13: whole rows (codes, scales, zero points) picked by src_row; g_idx per expert.
  {
    const int64_t G = q13.scale.dim(-1);
    const int64_t row_bytes = int_codes_row_bytes(q13.element, H);
    WeightQuantization& q = out.w13_quant;
    q = q13;
    q.logical_shape = {E, N1_local, H};
    out.w13 =
        Tensor::empty_cpu(int_codes_dtype(q.element), int_codes_shape(q.element, q.logical_shape));
    q.scale = Tensor::empty_cpu(DType::kF32, {E, N1_local, G});
    if (q13.zero_point.defined()) q.zero_point = Tensor::empty_cpu(DType::kF32, {E, N1_local, G});
    if (q13.g_idx.defined()) q.g_idx = Tensor::empty_cpu(DType::kI32, {E, P13, H});
    const auto* src = static_cast<const uint8_t*>(raw.w13.raw());
    auto* dst = static_cast<uint8_t*>(out.w13.raw());
    for (int64_t l = 0; l < E; ++l) {
      const int64_t e = global[l];
      for (int64_t r = 0; r < N1_local; ++r) {
        const int64_t s = e * N1 + src_row(l, r), d = l * N1_local + r;
        std::memcpy(dst + d * row_bytes, src + s * row_bytes, static_cast<size_t>(row_bytes));
        std::copy_n(q13.scale.data<float>() + s * G, G, q.scale.data<float>() + d * G);
        if (q.zero_point.defined()) {
          std::copy_n(q13.zero_point.data<float>() + s * G, G, q.zero_point.data<float>() + d * G);
        }
      }
      if (q.g_idx.defined()) {
        std::copy_n(q13.g_idx.data<int32_t>() + e * P13 * H, P13 * H,
                    q.g_idx.data<int32_t>() + l * P13 * H);
      }
    }
  }
  // w2: all H rows, shard channels in the (permuted) order; scale columns of the shard's groups.
  {
    const int64_t G_full = q2.scale.dim(-1);
    const int64_t G = g2 < 0 ? 1 : ceil_div(I_local, g2);
    const int64_t g_first = g2 < 0 ? 0 : first / g2;
    const int64_t full_bytes = int_codes_row_bytes(q2.element, I);
    const int64_t row_bytes = int_codes_row_bytes(q2.element, I_local);
    WeightQuantization& q = out.w2_quant;
    q = q2;
    q.logical_shape = {E, H, I_local};
    q.g_idx = Tensor();
    out.w2 =
        Tensor::empty_cpu(int_codes_dtype(q.element), int_codes_shape(q.element, q.logical_shape));
    q.scale = Tensor::empty_cpu(DType::kF32, {E, H, G});
    if (q2.zero_point.defined()) q.zero_point = Tensor::empty_cpu(DType::kF32, {E, H, G});
    if (keep_w2_gidx) {
      // Whole (checked above): the checkpoint's g_idx as it is.
      q.g_idx = Tensor::empty_cpu(DType::kI32, {E, 1, I});
      for (int64_t l = 0; l < E; ++l) {
        std::copy_n(q2.g_idx.data<int32_t>() + global[l] * I, I, q.g_idx.data<int32_t>() + l * I);
      }
    }
    std::vector<int32_t> row(static_cast<size_t>(I_local));
    const auto* src = static_cast<const uint8_t*>(raw.w2.raw());
    auto* dst = static_cast<uint8_t*>(out.w2.raw());
    for (int64_t l = 0; l < E; ++l) {
      const int64_t e = global[l];
      for (int64_t h = 0; h < H; ++h) {
        const uint8_t* full = src + (e * H + h) * full_bytes;
        for (int64_t j = 0; j < I_local; ++j) row[j] = int_code_at(full, q2.element, channel(l, j));
        pack_int_codes(row.data(), 1, I_local, q2.element, dst + (l * H + h) * row_bytes);
        const int64_t s = (e * H + h) * G_full, d = (l * H + h) * G;
        std::copy_n(q2.scale.data<float>() + s + g_first, G, q.scale.data<float>() + d);
        if (q.zero_point.defined()) {
          std::copy_n(q2.zero_point.data<float>() + s + g_first, G, q.zero_point.data<float>() + d);
        }
      }
    }
  }
  // Biases (F32, canonical rows in the permuted order, w2's on TP rank 0).
  auto f32_rows = [&](const Tensor& bias, int64_t rows, auto row_of) {
    Tensor t = Tensor::empty_cpu(DType::kF32, {E, rows});
    const Tensor full = to_f32_cpu(bias);
    const int64_t width = full.dim(1);
    for (int64_t l = 0; l < E; ++l) {
      for (int64_t r = 0; r < rows; ++r) {
        t.data<float>()[l * rows + r] = full.data<float>()[global[l] * width + row_of(l, r)];
      }
    }
    return t;
  };
  if (raw.w13_bias.defined()) out.w13_bias = f32_rows(raw.w13_bias, N1_local, src_row);
  if (raw.w2_bias.defined() && parallel.moe_tp_rank() == 0) {
    out.w2_bias = f32_rows(raw.w2_bias, H, [](int64_t, int64_t h) { return h; });
  }
  return out;
}

}  // namespace mg
