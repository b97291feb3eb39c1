// Random quantized weights for CompileOptions::random_weights (random_quantized_weights.h), made
// on the host's cores or on a GPU (framework/device/random_fill.h).
#include "framework/compile/random_quantized_weights.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "framework/core/fp4.h"
#include "framework/core/fp8.h"
#include "framework/core/function_ref.h"
#include "framework/core/int_quant.h"
#include "framework/core/thread_pool.h"
#include "framework/device/allocator.h"
#include "framework/device/random_fill.h"
#include "framework/device/random_uniform.h"
#include "framework/graph/tensor_quantization.h"

namespace mg {

namespace {

// Runs fn(begin, end) over chunks of [0, n) on the host's cores: random quantized weights are
// made on the host (the MoE backends repack codes on the host), and a 30B-parameter model's codes
// take minutes on one thread. Every element's value depends only on its index, so the result does
// not depend on the split.
void parallel_on_host(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::min<int64_t>(
      {cores, max_threads(), std::max<int64_t>(1, n / std::max<int64_t>(1, grain))});
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  ThreadPool pool(static_cast<int>(threads));
  pool.parallel_for(n, fn, grain);
}

// Element-wise host work is split in chunks of this many elements.
constexpr int64_t kHostChunk = int64_t{1} << 20;

// Scales [numel] = uniform in [0.5, 1.5) from `seed` (element i: uniform_at(seed, i, 1, 0.5), as
// fill_uniform makes it) times `base`.
Tensor random_group_scales(const Shape& shape, uint64_t seed, float base) {
  Tensor scale = Tensor::empty_cpu(DType::kF32, shape);
  float* sc = scale.data<float>();
  parallel_on_host(scale.numel(), kHostChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      sc[i] = uniform_at(seed, static_cast<uint64_t>(i), 1.0f, 0.5f);
      sc[i] *= base;
    }
  });
  return scale;
}

}  // namespace

std::pair<Tensor, WeightQuantization> random_fp8_weight(const proto::TensorInfo& info,
                                                        const GroupShape& group, uint64_t seed) {
  const Shape shape(info.shape().begin(), info.shape().end());
  Tensor codes = Tensor::empty_cpu(DType::kF8E4M3, shape);
  uint8_t* c = fp8_codes(codes);
  const uint64_t code_seed = mix64(seed ^ fnv1a(info.name()));
  parallel_on_host(codes.numel(), kHostChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      c[i] = float_to_fp8_e4m3(uniform_at(code_seed, static_cast<uint64_t>(i), 0.0f, kFp8E4M3Max));
    }
  });
  WeightQuantization q;
  q.group = group;
  q.scale = random_group_scales(scale_shape_for(shape, group),
                                mix64(seed ^ fnv1a(info.quantization().scale())),
                                1.0f / (kFp8E4M3Max * std::sqrt(static_cast<float>(shape.back()))));
  return {std::move(codes), std::move(q)};
}

std::pair<Tensor, WeightQuantization> random_fp4_weight(const proto::TensorInfo& info,
                                                        const GroupShape& group, uint64_t seed,
                                                        Device where, Fp4ScaleGrid grid) {
  const Shape stored(info.shape().begin(), info.shape().end());
  const Shape shape = fp4_logical_shape(stored);
  const float base = 1.0f / (kFp4E2M1Max * std::sqrt(static_cast<float>(shape.back())));
  // NVFP4: a power-of-two global near the scales, so that scale / global spans E4M3's normals.
  float global = 1.0f;
  Tensor global_scale;
  if (grid == Fp4ScaleGrid::kE4M3) {
    global = e8m0_scale_value(e8m0_floor_code(base));
    Shape lead(shape.begin(), shape.end() - 2);
    lead.push_back(1);
    global_scale = Tensor::empty_cpu(DType::kF32, lead);
    std::fill_n(global_scale.data<float>(), global_scale.numel(), global);
  }
  if (where.is_cuda()) {
    Tensor codes = empty_tensor(where, DType::kU8, stored);
    fill_random_bytes(codes, mix64(seed ^ fnv1a(info.name())), nullptr);
    WeightQuantization q;
    q.group = group;
    q.scale = empty_tensor(where, DType::kF32, scale_shape_for(shape, group));
    q.global_scale = global_scale;
    fill_random_scales(q.scale, mix64(seed ^ fnv1a(info.quantization().scale())), base, nullptr,
                       grid, global);
    return {std::move(codes), std::move(q)};
  }
  Tensor codes = Tensor::empty_cpu(DType::kU8, stored);
  uint8_t* c = static_cast<uint8_t*>(codes.raw());
  const uint64_t code_seed = mix64(seed ^ fnv1a(info.name()));
  parallel_on_host(codes.numel(), kHostChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = uniform_at(code_seed, static_cast<uint64_t>(i), 128.0f, 128.0f);
      c[i] = static_cast<uint8_t>(std::clamp(std::floor(v), 0.0f, 255.0f));
    }
  });
  WeightQuantization q;
  q.group = group;
  q.scale = random_group_scales(scale_shape_for(shape, group),
                                mix64(seed ^ fnv1a(info.quantization().scale())), base);
  if (grid != Fp4ScaleGrid::kF32) {
    float* sc = q.scale.data<float>();
    for (int64_t i = 0; i < q.scale.numel(); ++i) sc[i] = round_fp4_scale(sc[i], grid, global);
  }
  q.global_scale = global_scale;
  return {std::move(codes), std::move(q)};
}

std::pair<Tensor, WeightQuantization> random_int_weight(const proto::TensorInfo& info,
                                                        const Shape& logical, QuantElement element,
                                                        int64_t group_cols, uint64_t seed,
                                                        Device where) {
  const int64_t C = logical.back();
  const int64_t rows = shape_numel(logical) / C;
  const int64_t G = group_cols < 0 ? 1 : (C + group_cols - 1) / group_cols;
  WeightQuantization q;
  q.element = element;
  q.logical_shape = logical;
  q.group = GroupShape{1, group_cols};
  Shape scale_shape = logical;
  scale_shape.back() = G;
  q.scale = empty_tensor(where, DType::kF32, scale_shape);
  if (!quant_element_signed(element)) q.zero_point = empty_tensor(where, DType::kF32, scale_shape);
  Tensor codes = empty_tensor(where, int_codes_dtype(element), int_codes_shape(element, logical));
  const int64_t row_bytes = int_codes_row_bytes(element, C);
  const uint64_t value_seed = mix64(seed ^ fnv1a(info.name()));
  const float range = 1.0f / std::sqrt(static_cast<float>(C));
  if (where.is_cuda()) {
    fill_random_int_codes(codes, q.scale, q.zero_point, C, group_cols, quant_element_bits(element),
                          quant_element_signed(element), value_seed, range, nullptr);
    return {std::move(codes), std::move(q)};
  }
  auto* code_rows = static_cast<uint8_t*>(codes.raw());
  float* scale = q.scale.data<float>();
  float* zero = q.zero_point.defined() ? q.zero_point.data<float>() : nullptr;
  parallel_on_host(rows, std::max<int64_t>(1, kHostChunk / C), [&](int64_t begin, int64_t end) {
    constexpr int64_t kSliceRows = 64;
    std::vector<float> values(static_cast<size_t>(std::min(kSliceRows, end - begin) * C));
    for (int64_t r0 = begin; r0 < end; r0 += kSliceRows) {
      const int64_t n = std::min(kSliceRows, end - r0);
      for (int64_t i = 0; i < n * C; ++i) {
        values[static_cast<size_t>(i)] =
            uniform_at(value_seed, static_cast<uint64_t>(r0 * C + i), 0.0f, range);
      }
      quantize_int_rows(values.data(), n, C, element, group_cols, code_rows + r0 * row_bytes,
                        scale + r0 * G, zero == nullptr ? nullptr : zero + r0 * G);
    }
  });
  return {std::move(codes), std::move(q)};
}

}  // namespace mg
