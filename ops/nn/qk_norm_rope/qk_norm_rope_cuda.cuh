// CUDA q/k norm + RoPE kernel (included by the per-dtype qk_norm_rope_cuda_<dtype>.cu files).
//
// Grid (token row, group of heads): the q heads then the k heads of a row are cut into groups of
// heads_per_block (kQkNormRopeHeadsPerBlock unless forced), one block per group, so a decode
// token's 32 + 4 Qwen3 heads are 9 blocks on 9 SMs rather than one block doing all 36 (a chain of
// heads per warp). Each block first evaluates cos/sin of each frequency once (rope_cos_sin, fp64
// angles) into shared memory, before its pdl_wait (the position is a step input); then each warp
// takes a head of its group at a time: it sums the head's squares in rms_norm's warp order
// (rms_norm_sum_sq, warp_sum), writes the normed head rounded to T into its own shared slot
// (rms_norm_store) and rotates it from there (rope_slot, rope_rotate; a warp's first head is
// loaded into registers right after the wait). So the outputs equal the unfused rms_norm -> rope
// kernels' (which read the normed head back from memory as T), and they do not depend on the
// grouping: a head's arithmetic is the same whichever block and warp take it (a group of every
// head is the one-block-per-token layout of before; the CUDA test compares the two bit for bit).
// Without a norm (QkNormRopeArgs::q_norm / k_norm off) a head goes into its slot as it is and is
// rotated from there: the rope kernel's arithmetic on the same T values (the same bits).
#pragma once

#include <algorithm>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/qk_norm_rope/qk_norm_rope_cuda.h"
#include "ops/nn/rms_norm/rms_norm_cuda.cuh"
#include "ops/nn/rope/rope_cuda.cuh"

namespace mg::cuda {

// Warps per block at most (a group of more heads takes them in turns).
constexpr int kQkNormRopeMaxWarps = 16;
// Heads per block under the rule: a warp per head, and 4 warps are 128 threads, so that a
// rotary half of up to 128 frequencies is one sincos per thread; a Qwen3 decode token is 9
// blocks, a prefill of 512 tokens 4608 blocks of 128 threads.
constexpr int64_t kQkNormRopeHeadsPerBlock = 4;
// Elements of a head each lane holds in registers for the warp's first head (heads of up to 128
// elements: Qwen3's; wider ones are read from memory where they are used).
constexpr int kQkNormRopeRegsPerLane = 4;
// Dynamic shared memory without opting in to more.
constexpr size_t kQkNormRopeMaxShared = 48 * 1024;

// A head's RMSNorm from registers, for a warp that has other work while the head's loads are in
// flight (qk_norm_rope_kernel: the cos/sin): load_head_lanes puts elements lane, lane + 32, ... of
// a head (or weight) of d <= 32 * kPerLane elements into registers; qk_norm_head_lanes then sums
// and stores them into the warp's slot exactly as rms_norm_sum_sq, warp_sum and rms_norm_store do
// (the same order: the same bits), with the weight's registers when has_w; without the norm
// (`norm` false) it stores the head as it is.
template <typename T, int kPerLane>
__device__ __forceinline__ void load_head_lanes(const T* x, int64_t d, int lane,
                                                T (&regs)[kPerLane]) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t i = lane + 32 * j;
    if (i < d) regs[j] = x[i];
  }
}

template <typename T, int kPerLane>
__device__ __forceinline__ void qk_norm_head_lanes(const T (&x)[kPerLane], const T (&w)[kPerLane],
                                                   bool norm, bool has_w, float eps, int64_t d,
                                                   T* slot, int lane) {
  if (!norm) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (lane + 32 * j < d) slot[lane + 32 * j] = x[j];
    }
    return;
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (lane + 32 * j < d) {
      const float v = to_float(x[j]);
      sum_sq += v * v;
    }
  }
  const float inv_rms = rsqrtf(warp_sum(sum_sq) / static_cast<float>(d) + eps);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t i = lane + 32 * j;
    if (i < d) {
      float v = to_float(x[j]) * inv_rms;
      if (has_w) v *= to_float(w[j]);
      slot[i] = from_float<T>(v);
    }
  }
}

// Heads per block of a launch: args.heads_per_block, or the rule, at most every head of a row.
inline int64_t qk_norm_rope_heads_per_block(const QkNormRopeArgs& a) {
  const int64_t heads = a.q_heads + a.k_heads;
  const int64_t want = a.heads_per_block > 0 ? a.heads_per_block : kQkNormRopeHeadsPerBlock;
  return std::max<int64_t>(1, std::min(want, heads));
}

// Block (token t = blockIdx.x, group blockIdx.y): heads [group * heads_per_block, +
// heads_per_block) of the row's q heads then k heads, a warp per head in turns.
template <typename T>
__global__ void qk_norm_rope_kernel(QkNormRopeArgs a, int64_t heads_per_block) {
  extern __shared__ float smem[];  // cos [half], sin [half], then each warp's head [head_dim] T
  const int64_t half = a.rotary_dim / 2;
  float* cos_f = smem;
  float* sin_f = smem + half;
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x & 31);
  T* head = reinterpret_cast<T*>(smem + a.rotary_dim) + warp * a.head_dim;
  const int64_t t = blockIdx.x;
  const int64_t group_begin = static_cast<int64_t>(blockIdx.y) * heads_per_block;
  const int64_t heads = a.q_heads + a.k_heads;
  const int64_t group_end =
      group_begin + heads_per_block < heads ? group_begin + heads_per_block : heads;
  // The warp's first head (a launch under the rule gives each warp one: kQkNormRopeHeadsPerBlock
  // heads, a warp each) goes into registers right after pdl_wait, and its norm weight before it
  // (weights never change while graphs run: pdl.cuh's rule 1). Heads over kQkNormRopeRegsPerLane *
  // 32 elements, and a warp's later heads, are read where they are used. The same arithmetic either
  // way (the same bits).
  const int64_t d = a.head_dim;
  const bool in_regs = d <= 32 * kQkNormRopeRegsPerLane;
  const int64_t first = group_begin + warp;
  const bool first_is_q = first < a.q_heads;
  const T* first_w = static_cast<const T*>(first_is_q ? a.q_weight : a.k_weight);
  T x_regs[kQkNormRopeRegsPerLane], w_regs[kQkNormRopeRegsPerLane];
  if (in_regs && first < group_end && first_w != nullptr) {
    load_head_lanes(first_w, d, lane, w_regs);
  }
  // The position is a step input the host copied before the step's first kernel, so the cos/sin
  // (the fp64 sincos) are evaluated before the wait too, while the q/k/v projection still runs
  // (pdl.cuh, rule 1's exception).
  rope_cos_sin(a.positions[t], a.inv_freq, half, a.attention_factor, cos_f, sin_f);
  pdl_wait();  // q and k come from before (launch_pdl, pdl.cuh)
  pdl_launch_dependents();
  if (in_regs && first < group_end) {
    const int64_t row =
        t * (first_is_q ? a.q_heads : a.k_heads) + (first_is_q ? first : first - a.q_heads);
    load_head_lanes(static_cast<const T*>(first_is_q ? a.q : a.k) + row * d, d, lane, x_regs);
  }
  __syncthreads();

  for (int64_t h = first; h < group_end; h += warps) {
    const bool is_q = h < a.q_heads;
    const int64_t row = t * (is_q ? a.q_heads : a.k_heads) + (is_q ? h : h - a.q_heads);
    const T* x = static_cast<const T*>(is_q ? a.q : a.k) + row * d;
    T* out = static_cast<T*>(is_q ? a.q_out : a.k_out) + row * d;
    const T* w = static_cast<const T*>(is_q ? a.q_weight : a.k_weight);
    const float eps = is_q ? a.q_eps : a.k_eps;
    const bool norm = is_q ? a.q_norm : a.k_norm;
    if (in_regs && h == first) {
      qk_norm_head_lanes(x_regs, w_regs, norm, w != nullptr, eps, d, head, lane);
    } else if (!norm) {
      for (int64_t i = lane; i < d; i += 32) head[i] = x[i];
    } else {
      const float sum_sq = warp_sum(rms_norm_sum_sq(x, d, lane, 32));
      rms_norm_store(x, w, head, d, rsqrtf(sum_sq / static_cast<float>(d) + eps), lane, 32);
    }
    __syncwarp();
    for (int64_t i = lane; i < d; i += 32) {
      const int64_t rel = i - a.rotary_offset;
      if (rel < 0 || rel >= a.rotary_dim) {
        out[i] = head[i];
        continue;
      }
      const RopeSlot slot = rope_slot(rel, half, a.interleaved);
      out[i] = from_float<T>(rope_rotate(to_float(head[i]), to_float(head[i + slot.partner_offset]),
                                         cos_f[slot.freq], sin_f[slot.freq], slot.first));
    }
    __syncwarp();  // the slot is rewritten by the warp's next head
  }
}

template <typename T>
void launch_qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (a.tokens <= 0) return;
  MG_ASSERT(a.tokens <= INT32_MAX, "qk_norm_rope: {} token rows", a.tokens);
  const int64_t heads_per_block = qk_norm_rope_heads_per_block(a);
  const int64_t groups = (a.q_heads + a.k_heads + heads_per_block - 1) / heads_per_block;
  MG_ASSERT(groups <= 65535, "qk_norm_rope: {} head groups per row", groups);
  const size_t table = static_cast<size_t>(a.rotary_dim) * sizeof(float);
  const size_t per_warp = static_cast<size_t>(a.head_dim) * sizeof(T);
  const int64_t fit = static_cast<int64_t>((kQkNormRopeMaxShared - table) / per_warp);
  const int warps = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({kQkNormRopeMaxWarps, heads_per_block, fit})));
  const size_t shared = table + static_cast<size_t>(warps) * per_warp;
  launch_pdl(qk_norm_rope_kernel<T>,
             dim3(static_cast<unsigned>(a.tokens), static_cast<unsigned>(groups)), dim3(warps * 32),
             shared, stream, a, heads_per_block);
}

}  // namespace mg::cuda
