// The large-M path's dequantize kernel (wna16_experts_cuda.h, section 4): packed codes of a range
// of experts -> dense T [experts, parts * n, k], the unquantized grouped GEMM's weight layout.
// nvcc only; included by wna16_dequant_<dtype>.cu.
//
// One CTA dequantizes 64 packed rows (8 warps, one 8-row block each) of one 128-wide K step of
// one expert. Each lane loads its 16 (or 32) bytes of words and its row's group pairs or scale
// bytes exactly as the mma.sync kernel does, and turns them into its B fragments with the same
// Dequant policy (wna16_gemm.cuh): the values are bit for bit the mma path's B operands (NVFP4:
// times the part's global, see the header). The fragments (k = 32u + 16h + {2t, 2t + 1, 2t + 8,
// 2t + 9} of row g for lane 4g + t) go through shared memory so that the dense rows are written
// as whole 16-byte chunks, 256 contiguous bytes per row and step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/cuda/wna16/wna16_gemm.cuh"

namespace mg::cuda::wna16 {

inline constexpr int kDequantWarps = 8;
inline constexpr int kDequantRows = 8 * kDequantWarps;  // packed rows per CTA
// T elements per shared row: 128 + 8, so a row is 272 bytes (17 16-byte chunks) and the fragment
// stores of lane 4g + t fall in banks 4g + t + const: no conflicts.
inline constexpr int kDequantPitch = static_cast<int>(kWna16KStep) + 8;

// The packed pair of two T values as floats.
template <typename T>
__device__ __forceinline__ float2 unpack_pair(uint32_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
}

// wna16_scale_bytes_per_step(Codes) as a constant the device code can read (a host constexpr
// function cannot be called there without --expt-relaxed-constexpr).
template <Wna16Codes Codes>
struct DequantScaleBytes {
  static constexpr int value = static_cast<int>(wna16_scale_bytes_per_step(Codes));
};

template <typename T, int Bits, Wna16Codes Codes>
__global__ void __launch_bounds__(kDequantWarps * 32)
    wna16_dequant_kernel(const Wna16DequantArgs args) {
  constexpr bool kFp4 = Codes != Wna16Codes::kInteger;
  constexpr int kW = Bits == 4 ? 4 : 8;  // words per lane and step
  constexpr int kStepWords = 32 * kW;
  constexpr int kScaleBytes = DequantScaleBytes<Codes>::value;
  __shared__ __align__(16) T tile[kDequantRows * kDequantPitch];

  const int e_local = static_cast<int>(blockIdx.y);
  if (args.expert_offsets != nullptr &&
      __ldg(args.expert_offsets + e_local + 1) == __ldg(args.expert_offsets + e_local)) {
    return;  // no rows: its weights are never read
  }
  const int k_steps = static_cast<int>(args.w.k_steps);
  const int row_tile = static_cast<int>(blockIdx.x) / k_steps;
  const int step = static_cast<int>(blockIdx.x) % k_steps;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t e = args.expert_begin + e_local;
  const int64_t part_rows = args.w.part_rows;
  const int64_t rows_padded = args.w.parts * part_rows;
  const int64_t row_blocks = rows_padded / 8;
  const int64_t block = static_cast<int64_t>(row_tile) * kDequantWarps + warp;
  const int k0 = step * static_cast<int>(kWna16KStep);

  if (block < row_blocks) {
    const uint32_t* words = args.w.words + ((e * row_blocks + block) * k_steps + step) * kStepWords;
    uint32_t w[kW];
#pragma unroll
    for (int q = 0; q < kW / 4; ++q) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(words + q * 128 + lane * 4));
      w[4 * q + 0] = v.x;
      w[4 * q + 1] = v.y;
      w[4 * q + 2] = v.z;
      w[4 * q + 3] = v.w;
    }
    const int64_t prow = block * 8 + g;  // this lane's packed row
    float2 scale[4];
    if constexpr (kFp4) {
      const uint8_t* sb =
          args.w.scale_bytes + (((e * row_blocks + block) * k_steps + step) * 8 + g) * kScaleBytes;
      uint2 bytes;
      if constexpr (kScaleBytes == 4) {
        bytes = make_uint2(__ldg(reinterpret_cast<const uint32_t*>(sb)), 0u);
      } else {
        bytes = __ldg(reinterpret_cast<const uint2*>(sb));
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) scale[u] = fp4_unit_scales<Codes>(bytes, u);
    } else {
      // The pair of each unit's group, as the mma kernel picks it (a unit never straddles one).
      const int groups = static_cast<int>(args.w.groups);
      const int group_size = static_cast<int>(args.w.group_size);
      const float2* params =
          reinterpret_cast<const float2*>(args.w.params) + (e * rows_padded + prow) * groups;
#pragma unroll
      for (int u = 0; u < 4; ++u)
        scale[u] = __ldg(params + min((k0 + 32 * u) / group_size, groups - 1));
    }
    // NVFP4: the fragments hold 2·e2m1·e4m3 (exact in T); the real weight is that times global / 2.
    [[maybe_unused]] float global_half = 1.0f;
    if constexpr (Codes == Wna16Codes::kNvfp4) {
      global_half = 0.5f * __ldg(args.w.globals + e * args.w.parts + prow / part_rows);
    }
    T* row = tile + (warp * 8 + g) * kDequantPitch;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t bf[2];
        const uint32_t word = Bits == 4 ? w[u] : w[2 * u + h];
        Dequant<Bits, Codes>::template fragment<T>(word, h, scale[u], bf);
        if constexpr (Codes == Wna16Codes::kNvfp4) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const float2 v = unpack_pair<T>(bf[i]);
            bf[i] = pack_pair<T>(v.x * global_half, v.y * global_half);
          }
        }
        const int col = 32 * u + 16 * h + 2 * t;
        *reinterpret_cast<uint32_t*>(row + col) = bf[0];
        *reinterpret_cast<uint32_t*>(row + col + 8) = bf[1];
      }
    }
  }
  __syncthreads();

  // Out: 64 rows x 16 chunks of 8 values; padding rows (past n in their part) and columns past k
  // are not written. A packed row p is row p % part_rows of part p / part_rows, dense row
  // part * n + p % part_rows.
  const int64_t n = args.n, k = args.k;
  const int64_t dense_rows = args.w.parts * n;
  T* out = static_cast<T*>(args.out) + e_local * dense_rows * k;
  for (int i = tid; i < kDequantRows * 16; i += kDequantWarps * 32) {
    const int r = i >> 4, chunk = i & 15;
    const int64_t prow = static_cast<int64_t>(row_tile) * kDequantRows + r;
    const int64_t part = prow / part_rows, pr = prow % part_rows;
    const int64_t kc = k0 + chunk * 8;
    if (prow >= rows_padded || pr >= n || kc >= k) continue;
    *reinterpret_cast<uint4*>(out + (part * n + pr) * k + kc) =
        *reinterpret_cast<const uint4*>(tile + r * kDequantPitch + chunk * 8);
  }
  // The biases of the tile's rows, once (by the first K step's CTA).
  if (args.bias != nullptr && step == 0 && tid < kDequantRows) {
    const int64_t prow = static_cast<int64_t>(row_tile) * kDequantRows + tid;
    const int64_t part = prow / part_rows, pr = prow % part_rows;
    if (prow < rows_padded && pr < n) {
      static_cast<T*>(args.bias_out)[e_local * dense_rows + part * n + pr] =
          from_float<T>(__ldg(args.bias + e * dense_rows + part * n + pr));
    }
  }
}

template <typename T, int Bits, Wna16Codes Codes>
void launch_dequant(const Wna16DequantArgs& args, cudaStream_t stream) {
  const int64_t row_blocks = args.w.parts * args.w.part_rows / 8;
  const int64_t row_tiles = (row_blocks + kDequantWarps - 1) / kDequantWarps;
  const int64_t blocks = row_tiles * args.w.k_steps;
  MG_CHECK(blocks <= INT32_MAX && args.expert_count <= 65535,
           "WNA16 dequantize: {} tiles x {} experts exceed the grid", blocks, args.expert_count);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(args.expert_count));
  wna16_dequant_kernel<T, Bits, Codes><<<grid, kDequantWarps * 32, 0, stream>>>(args);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda::wna16

namespace mg::cuda {

template <typename T>
void launch_wna16_dequantize(const Wna16DequantArgs& args, cudaStream_t stream) {
  const Wna16Weights& w = args.w;
  MG_CHECK(args.n > 0 && args.k > 0 && args.k % 8 == 0,
           "WNA16 dequantize: n {} and k {} must be positive, k a multiple of 8", args.n, args.k);
  MG_CHECK(w.part_rows >= args.n && w.part_rows % 8 == 0 && w.parts >= 1 &&
               w.k_steps == (args.k + kWna16KStep - 1) / kWna16KStep && w.groups >= 1 &&
               w.group_size > 0,
           "WNA16 dequantize: packed weights (part rows {}, K steps {}) do not fit n {} k {}",
           w.part_rows, w.k_steps, args.n, args.k);
  if (args.expert_count <= 0) return;
  MG_CHECK(w.words != nullptr && args.out != nullptr &&
               (args.bias == nullptr || args.bias_out != nullptr),
           "WNA16 dequantize: words and out (and bias_out with a bias) must be set");
  switch (w.codes) {
    case Wna16Codes::kInteger:
      MG_CHECK(w.params != nullptr, "WNA16 dequantize: integer codes need their F32 pairs");
      switch (w.bits) {
        case 4:
          return wna16::launch_dequant<T, 4, Wna16Codes::kInteger>(args, stream);
        case 8:
          return wna16::launch_dequant<T, 8, Wna16Codes::kInteger>(args, stream);
        default:
          MG_FAIL("WNA16 dequantize: {} bits (4 or 8 expected)", w.bits);
      }
    case Wna16Codes::kMxfp4:
      MG_CHECK(w.bits == 4 && w.scale_bytes != nullptr,
               "WNA16 dequantize: MXFP4 codes are 4 bits with E8M0 scale bytes");
      return wna16::launch_dequant<T, 4, Wna16Codes::kMxfp4>(args, stream);
    case Wna16Codes::kNvfp4:
      MG_CHECK(w.bits == 4 && w.scale_bytes != nullptr && w.globals != nullptr,
               "WNA16 dequantize: NVFP4 codes are 4 bits with E4M3 scale bytes and globals");
      return wna16::launch_dequant<T, 4, Wna16Codes::kNvfp4>(args, stream);
  }
  MG_FAIL("WNA16 dequantize: unknown codes {}", static_cast<int>(w.codes));
}

}  // namespace mg::cuda
