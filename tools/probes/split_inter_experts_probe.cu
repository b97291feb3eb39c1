// One token's MoE experts as ONE kernel split over the intermediate dimension, timed against the
// floor (docs/performance.md, issue 15, session 34's probes). A block takes
// kS act columns [i0, i0 + kS) of one routed expert e (grid: I / kS x top-k):
//   part 1  its 2 kS gate and up rows of W13[e] (row-major [2I, H]) dotted with x -> act[kS]
//           (SiLU-gated, rounded to BF16 as the two-kernel path's act buffer is);
//   part 2  the columns [i0, i0 + kS) of every row of W2[e] (row-major [H, I]) dotted with act,
//           times the routing weight, added into an F32 output with red.add.v4.f32; the last
//           block to arrive (an acq_rel counter) writes the BF16 output and zeroes the F32 one.
// So no second launch, and W2 is read while other blocks still read W13. The catch it measures:
// part 2 reads W2 in kS x 2-byte pieces of every 1536-byte row (the checkpoint's layout).
// Shape: Qwen3-30B-A3B (H 2048, I 768, E 128, top-8), BF16, 48 launches with different routes
// in one CUDA graph (programmatic dependent launch between them), µs per launch; the output of
// the first launch is checked against an F32 reference computed on the GPU.
// Built with the CUDA tree as build/probes/split_inter_experts_probe (tools/probes/README.md);
// run it on the GPU machine. Alone, from the repository root:
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. tools/probes/split_inter_experts_probe.cu -o /tmp/probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tools/probes/probe_check.h"

namespace {

constexpr int H = 2048, I = 768, E = 128, K = 8;
constexpr int kLaunches = 48;
constexpr int kThreads = 256;
constexpr double kFloorMb = 3.0 * K * H * I * 2 / 1e6;  // 75.5 MB a launch

// Which parts a launch runs (the parts alone show where the time goes).
enum Parts { kBoth, kUpOnly, kDownOnly };

__device__ __forceinline__ uint4 load_weights(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void bf16x8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float silu(float g) {
  return g / (1.0f + __expf(-g));
}

template <int kS, Parts kParts>
__global__ void __launch_bounds__(kThreads, 3)
    split_inter_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w13,
                       const __nv_bfloat16* __restrict__ w2, const int* __restrict__ ids,
                       const float* __restrict__ route_weights, float* out_f32, __nv_bfloat16* out,
                       unsigned* arrivals) {
  static_assert(kS % 8 == 0 && (2 * kS) % (kThreads / 32) == 0, "kS");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i0 = blockIdx.x * kS;
  const int e = __ldg(ids + blockIdx.y);
  const float route_weight = __ldg(route_weights + blockIdx.y);
  __shared__ float gate_up[2 * kS];
  __shared__ float act[kS];
  __shared__ bool last;
  // Part 1: a warp's rows one at a time, each lane 8 x 16 bytes of a 4 KB row.
  constexpr int kRowsPerWarp = 2 * kS / (kThreads / 32);
  if (kParts != kDownOnly) {
    uint4 xv[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) xv[c] = __ldg(reinterpret_cast<const uint4*>(x) + lane + 32 * c);
    const __nv_bfloat16* base = w13 + static_cast<size_t>(e) * 2 * I * H;
#pragma unroll 1
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int part_row = warp * kRowsPerWarp + r;  // gate rows, then up rows
      const int row = part_row < kS ? i0 + part_row : I + i0 + part_row - kS;
      const uint4* p = reinterpret_cast<const uint4*>(base + static_cast<size_t>(row) * H);
      uint4 wv[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) wv[c] = load_weights(p + lane + 32 * c);
      float acc = 0.0f;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        float wf[8], xf[8];
        bf16x8(wv[c], wf);
        bf16x8(xv[c], xf);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc = fmaf(wf[q], xf[q], acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) gate_up[part_row] = acc;
    }
  }
  __syncthreads();
  if (threadIdx.x < kS) {
    const float a = kParts == kDownOnly ? 0.01f * threadIdx.x
                                        : silu(gate_up[threadIdx.x]) * gate_up[kS + threadIdx.x];
    act[threadIdx.x] = __bfloat162float(__float2bfloat16(a));
  }
  __syncthreads();
  // Part 2: thread t takes rows 8t .. 8t + 7 of W2[e], kS / 8 16-byte pieces each.
  float partial[8] = {};
  if (kParts != kUpOnly) {
    const __nv_bfloat16* base = w2 + static_cast<size_t>(e) * H * I + i0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint4* row =
          reinterpret_cast<const uint4*>(base + static_cast<size_t>(threadIdx.x * 8 + j) * I);
      uint4 v[kS / 8];
#pragma unroll
      for (int q = 0; q < kS / 8; ++q) v[q] = load_weights(row + q);
      float s = 0.0f;
#pragma unroll
      for (int q = 0; q < kS / 8; ++q) {
        float wf[8];
        bf16x8(v[q], wf);
#pragma unroll
        for (int z = 0; z < 8; ++z) s = fmaf(wf[z], act[q * 8 + z], s);
      }
      partial[j] = s * route_weight;
    }
  }
  float* dst = out_f32 + threadIdx.x * 8;
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(dst), "f"(partial[0]),
               "f"(partial[1]), "f"(partial[2]), "f"(partial[3])
               : "memory");
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(dst + 4),
               "f"(partial[4]), "f"(partial[5]), "f"(partial[6]), "f"(partial[7])
               : "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(old)
                 : "l"(arrivals)
                 : "memory");
    last = old == gridDim.x * gridDim.y - 1;
  }
  __syncthreads();
  if (!last) return;
  for (int h = threadIdx.x; h < H; h += kThreads) {
    out[h] = __float2bfloat16(__ldcg(out_f32 + h));
    out_f32[h] = 0.0f;
  }
  if (threadIdx.x == 0) *arrivals = 0;
}

// F32 reference of one launch (act rounded to BF16 as above).
__global__ void reference_act(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* ids,
                              float* act) {
  const int slot = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= I) return;
  const __nv_bfloat16* g = w13 + (static_cast<size_t>(ids[slot]) * 2 * I + i) * H;
  const __nv_bfloat16* u = g + static_cast<size_t>(I) * H;
  float sg = 0.0f, su = 0.0f;
  for (int k = 0; k < H; ++k) {
    sg += __bfloat162float(g[k]) * __bfloat162float(x[k]);
    su += __bfloat162float(u[k]) * __bfloat162float(x[k]);
  }
  act[slot * I + i] = __bfloat162float(__float2bfloat16(silu(sg) * su));
}
__global__ void reference_out(const __nv_bfloat16* w2, const int* ids, const float* route_weights,
                              const float* act, float* out) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= H) return;
  float s = 0.0f;
  for (int j = 0; j < K; ++j) {
    const __nv_bfloat16* row = w2 + (static_cast<size_t>(ids[j]) * H + h) * I;
    float d = 0.0f;
    for (int i = 0; i < I; ++i) d += __bfloat162float(row[i]) * act[j * I + i];
    s += route_weights[j] * d;
  }
  out[h] = s;
}
__global__ void fill_random(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
  }
}

struct Buffers {
  __nv_bfloat16 *x, *w13, *w2, *out;
  int* ids;
  float *route_weights, *out_f32, *reference;
  unsigned* arrivals;
};

template <int kS, Parts kParts>
void time_variant(const char* name, const Buffers& b, cudaStream_t stream) {
  const auto kernel = split_inter_kernel<kS, kParts>;
  const dim3 grid(I / kS, K);
  kernel<<<grid, kThreads, 0, stream>>>(b.x, b.w13, b.w2, b.ids, b.route_weights, b.out_f32, b.out,
                                        b.arrivals);
  CHECK(cudaStreamSynchronize(stream));
  std::vector<__nv_bfloat16> out(H);
  std::vector<float> reference(H);
  CHECK(cudaMemcpy(out.data(), b.out, H * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(reference.data(), b.reference, H * sizeof(float), cudaMemcpyDeviceToHost));
  double max_error = 0.0, max_reference = 0.0;
  for (int h = 0; h < H; ++h) {
    max_error = std::max(max_error,
                         std::fabs(static_cast<double>(__bfloat162float(out[h])) - reference[h]));
    max_reference = std::max(max_reference, std::fabs(static_cast<double>(reference[h])));
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int l = 0; l < kLaunches; ++l) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    config.attrs = &attr;
    config.numAttrs = l == 0 ? 0 : 1;
    CHECK(cudaLaunchKernelEx(
        &config, kernel, static_cast<const __nv_bfloat16*>(b.x),
        static_cast<const __nv_bfloat16*>(b.w13), static_cast<const __nv_bfloat16*>(b.w2),
        static_cast<const int*>(b.ids + l * K), static_cast<const float*>(b.route_weights + l * K),
        b.out_f32, b.out, b.arrivals));
  }
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> us;
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  for (int r = 0; r < 15; ++r) {
    CHECK(cudaEventRecord(begin, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(end, stream));
    CHECK(cudaStreamSynchronize(stream));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, begin, end));
    us.push_back(1000.0f * ms / kLaunches);
  }
  std::sort(us.begin(), us.end());
  const double bytes_mb = kParts == kBoth     ? kFloorMb
                          : kParts == kUpOnly ? kFloorMb * 2 / 3
                                              : kFloorMb / 3;
  std::printf("%-24s %7.2f us a launch (median of 15 replays), %5.0f GB/s of its %.1f MB", name,
              us[us.size() / 2], bytes_mb * 1e3 / us[us.size() / 2], bytes_mb);
  if (kParts == kBoth)
    std::printf(", max |error| %.3g of max |reference| %.3g", max_error, max_reference);
  std::printf("\n");
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
}

}  // namespace

int main() {
  Buffers b{};
  const size_t n13 = static_cast<size_t>(E) * 2 * I * H, n2 = static_cast<size_t>(E) * H * I;
  CHECK(cudaMalloc(&b.w13, n13 * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&b.w2, n2 * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&b.x, H * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&b.out, H * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&b.ids, kLaunches * K * sizeof(int)));
  CHECK(cudaMalloc(&b.route_weights, kLaunches * K * sizeof(float)));
  CHECK(cudaMalloc(&b.out_f32, H * sizeof(float)));
  CHECK(cudaMalloc(&b.reference, H * sizeof(float)));
  CHECK(cudaMalloc(&b.arrivals, sizeof(unsigned)));
  float* act = nullptr;
  CHECK(cudaMalloc(&act, K * I * sizeof(float)));
  fill_random<<<1024, 256>>>(b.w13, n13, 1);
  fill_random<<<1024, 256>>>(b.w2, n2, 2);
  fill_random<<<8, 256>>>(b.x, H, 3);
  CHECK(cudaMemset(b.out_f32, 0, H * sizeof(float)));
  CHECK(cudaMemset(b.arrivals, 0, sizeof(unsigned)));
  // Each launch: 8 distinct experts of 128, weights normalised to 1.
  std::mt19937 rng(7);
  std::vector<int> ids(kLaunches * K);
  std::vector<float> weights(kLaunches * K);
  for (int l = 0; l < kLaunches; ++l) {
    std::vector<int> experts(E);
    for (int e = 0; e < E; ++e) experts[e] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    float sum = 0.0f;
    for (int j = 0; j < K; ++j) {
      ids[l * K + j] = experts[j];
      weights[l * K + j] = 0.5f + static_cast<float>(rng() % 1000) / 1000.0f;
      sum += weights[l * K + j];
    }
    for (int j = 0; j < K; ++j) weights[l * K + j] /= sum;
  }
  CHECK(cudaMemcpy(b.ids, ids.data(), ids.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b.route_weights, weights.data(), weights.size() * sizeof(float),
                   cudaMemcpyHostToDevice));
  reference_act<<<dim3((I + 127) / 128, K), 128>>>(b.x, b.w13, b.ids, act);
  reference_out<<<(H + 127) / 128, 128>>>(b.w2, b.ids, b.route_weights, act, b.reference);
  CHECK(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("qwen3-30b-a3b experts at one token, BF16, split over I (floor: %.1f MB a launch)\n",
              kFloorMb);
  time_variant<16, kBoth>("16 columns a block", b, stream);
  time_variant<32, kBoth>("32 columns a block", b, stream);
  time_variant<16, kUpOnly>("16, part 1 alone", b, stream);
  time_variant<32, kUpOnly>("32, part 1 alone", b, stream);
  time_variant<16, kDownOnly>("16, part 2 alone", b, stream);
  time_variant<32, kDownOnly>("32, part 2 alone", b, stream);
  time_variant<64, kDownOnly>("64, part 2 alone", b, stream);
  return 0;
}
