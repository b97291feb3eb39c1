#include "ops/moe/oracle/unquantized.h"

#include "framework/core/float_dtype.h"
#include "ops/moe/experts/cpu_batched_experts.h"
#include "ops/moe/experts/cpu_eigen_experts.h"
#include "ops/moe/experts/cpu_monolithic_experts.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/experts/cuda_experts.h"
#include "ops/moe/experts/cuda_padded_experts.h"
#endif

namespace mg {

namespace {

// Reads element i of a host float tensor of any float dtype as fp32; `fn(read)` is called once
// with a reader specialised for the tensor's dtype.
template <typename Fn>
void with_reader(const Tensor& t, Fn&& fn) {
  MG_CHECK(t.device().is_cpu(), "expert weight {} must be in host memory", t.str());
  visit_float_dtype(t.dtype(), fmt::format("unquantized expert weight {}", t.str()), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.raw());
    fn([p](int64_t i) { return to_float(p[i]); });
  });
}

// Source row (of the full N1 rows) of row r of this rank's w13 shard.
struct RowMap {
  int64_t I;        // full intermediate size
  int64_t I_local;  // this shard's
  int64_t first;    // first intermediate index of this shard
  bool gated;
  bool interleaved;

  int64_t operator()(int64_t r) const {
    if (!gated) return first + r;
    const bool up = r >= I_local;
    const int64_t i = first + (up ? r - I_local : r);
    if (interleaved) return 2 * i + (up ? 1 : 0);
    return up ? I + i : i;
  }
};

}  // namespace

std::vector<const ExpertsBackend*> unquantized_priority(Device device) {
  switch (device.type) {
    case DeviceType::kCPU:
      return {&cpu_eigen_backend(), &cpu_batched_backend(), &cpu_monolithic_backend()};
    case DeviceType::kCUDA:
#ifdef MG_WITH_CUDA
      // cuda_padded last: it runs any shape (cuda_padded_experts.h), so every MoE node the CPU
      // runs has a CUDA backend; the others need 16-byte rows and are faster when they fit.
      return {&cuda_moe_backend(), &cuda_grouped_backend(), &cuda_cublas_backend(),
              &cuda_padded_backend()};
#else
      return {};
#endif
  }
  return {};
}

CanonicalExpertWeights convert_unquantized_weights(const MoEConfig& config,
                                                   const ParallelConfig& parallel,
                                                   const ExpertsShape& shape,
                                                   const RawExpertWeights& raw) {
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t I = config.intermediate_size(), I_local = shape.intermediate_size;
  const int64_t N1 = config.w13_rows(), N1_local = shape.w13_rows();
  const bool transposed = config.layout() == ExpertLayout::kTransposed;
  const RowMap row_of{I, I_local, parallel.moe_tp_rank() * I_local,
                      is_gated(config.activation().kind), config.gate_up_interleaved()};
  const std::vector<int32_t>& global = shape.expert_map.local_to_global;

  if (!raw.w13.device().is_cpu()) {
    // Random weights generated on the GPU (CompileOptions::random_weights): adopted by the CUDA
    // backends as they are, which needs the canonical layout already, on a single rank.
    MG_CHECK(!transposed && !(row_of.gated && row_of.interleaved) && I_local == I &&
                 E == config.num_experts(),
             "expert weights on {} are used as they are, which needs the [E, 2I, H] / [E, H, I] "
             "layout (not transposed, gate/up not interleaved) and one rank holding every expert",
             raw.w13.device().str());
    for (const Tensor* t : {&raw.w2, &raw.w13_bias, &raw.w2_bias}) {
      MG_CHECK(!t->defined() || t->device() == raw.w13.device(),
               "expert weights: {} is not on {} with w13", t->str(), raw.w13.device().str());
    }
    return {raw.w13, raw.w13_bias, raw.w2, raw.w2_bias};
  }

  CanonicalExpertWeights out;
  out.w13 = Tensor::empty_cpu(DType::kF32, {E, N1_local, H});
  with_reader(raw.w13, [&](auto read) {
    float* dst = out.w13.data<float>();
    for (int64_t l = 0; l < E; ++l) {
      const int64_t g = global[l];
      for (int64_t r = 0; r < N1_local; ++r) {
        const int64_t src = row_of(r);
        for (int64_t h = 0; h < H; ++h) {
          dst[(l * N1_local + r) * H + h] =
              read(transposed ? (g * H + h) * N1 + src : (g * N1 + src) * H + h);
        }
      }
    }
  });
  out.w2 = Tensor::empty_cpu(DType::kF32, {E, H, I_local});
  with_reader(raw.w2, [&](auto read) {
    float* dst = out.w2.data<float>();
    const int64_t first = row_of.first;
    for (int64_t l = 0; l < E; ++l) {
      const int64_t g = global[l];
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < I_local; ++i) {
          const int64_t col = first + i;
          dst[(l * H + h) * I_local + i] =
              read(transposed ? (g * I + col) * H + h : (g * H + h) * I + col);
        }
      }
    }
  });
  if (raw.w13_bias.defined()) {
    out.w13_bias = Tensor::empty_cpu(DType::kF32, {E, N1_local});
    with_reader(raw.w13_bias, [&](auto read) {
      float* dst = out.w13_bias.data<float>();
      for (int64_t l = 0; l < E; ++l) {
        for (int64_t r = 0; r < N1_local; ++r)
          dst[l * N1_local + r] = read(global[l] * N1 + row_of(r));
      }
    });
  }
  if (raw.w2_bias.defined() && parallel.moe_tp_rank() == 0) {
    out.w2_bias = Tensor::empty_cpu(DType::kF32, {E, H});
    with_reader(raw.w2_bias, [&](auto read) {
      float* dst = out.w2_bias.data<float>();
      for (int64_t l = 0; l < E; ++l) {
        for (int64_t h = 0; h < H; ++h) dst[l * H + h] = read(global[l] * H + h);
      }
    });
  }
  return out;
}

}  // namespace mg
