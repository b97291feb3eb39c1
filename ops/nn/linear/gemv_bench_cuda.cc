#include "ops/nn/linear/gemv_bench_cuda.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/linear/linear_gemm_cuda.h"
#include "ops/nn/linear/linear_gemv_cuda.h"

namespace mg {

namespace {

// Weight copies rotate until they cover this many bytes: more than the H100's 50 MB L2, so every
// call reads its weight from HBM as in a decode step (each weight is read once per step).
constexpr size_t kRotateBytes = size_t{256} << 20;
constexpr int kCallsPerGraph = 64;
constexpr int kReplays = 20;

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    MG_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Median µs per call of kCallsPerGraph calls captured in one CUDA graph, replayed kReplays times.
template <typename Call>
double time_calls(cudaStream_t stream, const Call& call) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  call(0);  // first call outside capture: cuBLASLt picks and caches its algorithm
  MG_CUDA_CHECK(cudaStreamSynchronize(stream));
  MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCallsPerGraph; ++i) call(i);
  MG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  MG_CUDA_CHECK(cudaEventCreate(&start));
  MG_CUDA_CHECK(cudaEventCreate(&stop));
  MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  std::vector<double> us;
  for (int r = 0; r < kReplays; ++r) {
    MG_CUDA_CHECK(cudaEventRecord(start, stream));
    MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MG_CUDA_CHECK(cudaEventRecord(stop, stream));
    MG_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MG_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0 / kCallsPerGraph);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// The q/k/v blocks of a layer as one split GEMV over `w` (their rows one after another) into `y`
// ([rows, out_b] per block, one after another): loads in flight, target warps and the blocks'
// warps per feature as GemvSplitArgs takes them (0: the launcher's rule). Qwen3-30B-A3B's (2048 ->
// 4096 + 512 + 512) and GPT-OSS's (2880 -> 4096 + 512 + 512).
struct QkvShape {
  const char* name;
  int64_t in;
  int64_t outs[3];
  int64_t total() const { return outs[0] + outs[1] + outs[2]; }
};
constexpr QkvShape kQkvShapes[2] = {{"qwen3", 2048, {4096, 512, 512}},
                                    {"gpt-oss", 2880, {4096, 512, 512}}};
constexpr const QkvShape& kQkv = kQkvShapes[0];  // the grid and warp sweeps' shape

void launch_qkv_split(DType dtype, const QkvShape& shape, const void* x, const void* w, void* y,
                      int64_t rows, int loads, int64_t target_warps,
                      const int (&warps_per_feature)[3], cudaStream_t stream) {
  cuda::GemvSplitArgs args;
  args.x = x;
  args.w = w;
  args.rows = rows;
  args.in = shape.in;
  args.loads_in_flight = loads;
  args.target_warps = target_warps;
  args.num_blocks = 3;
  char* out = static_cast<char*>(y);
  for (int b = 0; b < 3; ++b) {
    args.blocks[b].y = out;
    args.blocks[b].out = shape.outs[b];
    args.blocks[b].warps_per_feature = warps_per_feature[b];
    out += static_cast<size_t>(shape.outs[b] * rows) * dtype_size(dtype);
  }
  cuda::dispatch_float_dtype(
      dtype, [&](auto tag) { cuda::launch_gemv_split<decltype(tag)>(args, stream); });
}

// A layer's q/k/v as the unfused graph runs them, three GEMVs one after another (each through
// GemmXwt at every row count), against the split GEMV the fused linear launches once over their
// concatenated weight (linear_gemv_cuda.h, the fuse-ops pass's output_features), and against the
// three projections through cuBLASLt: what kGemvSplitChosenRows rests on.
void bench_qkv_split(const GemvBenchOptions& o, const QkvShape& shape, cudaStream_t stream,
                     void* workspace) {
  const int64_t kIn = shape.in;
  const int64_t(&outs)[3] = shape.outs;
  const int64_t total = shape.total();
  const size_t elem = dtype_size(o.dtype);
  const size_t weight_bytes = static_cast<size_t>(kIn * total) * elem;
  const int copies =
      static_cast<int>(std::clamp<size_t>(kRotateBytes / weight_bytes + 1, 1, kCallsPerGraph));
  DeviceBuffer weights(weight_bytes * copies);
  DeviceBuffer x(static_cast<size_t>(cuda::kGemvMaxRows * kIn) * elem);
  DeviceBuffer y(static_cast<size_t>(cuda::kGemvMaxRows * total) * elem);
  MG_CUDA_CHECK(cudaMemset(weights.ptr, 0x11, weight_bytes * copies));
  MG_CUDA_CHECK(cudaMemset(x.ptr, 0x22, static_cast<size_t>(cuda::kGemvMaxRows * kIn) * elem));
  std::vector<std::unique_ptr<cuda::GemmXwt>> gemvs, cublas;
  for (const int64_t out : outs) {
    gemvs.push_back(std::make_unique<cuda::GemmXwt>(o.dtype, kIn, out, nullptr, o.device));
    gemvs.back()->set_gemv_max_rows(cuda::kGemvMaxRows);
    cublas.push_back(std::make_unique<cuda::GemmXwt>(o.dtype, kIn, out, nullptr, o.device));
    cublas.back()->set_gemv_max_rows(0);
  }
  std::cout << fmt::format(
      "\nq/k/v {} {} -> {} + {} + {}: three GEMVs, one split GEMV, three cuBLASLt GEMMs\n",
      shape.name, kIn, outs[0], outs[1], outs[2]);
  std::cout << fmt::format("{:>4} | {:>12} | {:>12} {:>8} | {:>12} | {:>12}\n", "rows",
                           "3 gemvs us", "split us", "GB/s", "8 loads us", "3 cublas us");
  for (const int64_t rows : o.rows) {
    if (rows > cuda::kGemvMaxRows) continue;
    const auto three_of = [&](const std::vector<std::unique_ptr<cuda::GemmXwt>>& gemms) {
      return [&, rows](int i) {
        const char* w = static_cast<const char*>(weights.ptr) + (i % copies) * weight_bytes;
        char* out = static_cast<char*>(y.ptr);
        for (int b = 0; b < 3; ++b) {
          gemms[b]->run(x.ptr, rows, w, out, 1.0f, workspace, cuda::GemmXwt::kWorkspaceBytes,
                        stream);
          w += static_cast<size_t>(outs[b] * kIn) * elem;
          out += static_cast<size_t>(outs[b] * rows) * elem;
        }
      };
    };
    const double three_us = time_calls(stream, three_of(gemvs));
    const double cublas_us = time_calls(stream, three_of(cublas));
    const auto split_call = [&](int loads) {
      return [&, loads](int i) {
        launch_qkv_split(o.dtype, shape, x.ptr,
                         static_cast<const char*>(weights.ptr) + (i % copies) * weight_bytes, y.ptr,
                         rows, loads, 0, {0, 0, 0}, stream);
      };
    };
    const double split_us = time_calls(stream, split_call(4));
    const double split8_us = rows <= 2 ? time_calls(stream, split_call(8)) : 0.0;
    std::cout << fmt::format("{:>4} | {:>12.2f} | {:>12.2f} {:>8.0f} | {:>12} | {:>12.2f}\n", rows,
                             three_us, split_us, static_cast<double>(weight_bytes) / split_us / 1e3,
                             rows <= 2 ? fmt::format("{:.2f}", split8_us) : std::string("-"),
                             cublas_us);
  }
}

// The launch grid's two knobs at 1 and 2 rows, µs: 16-byte loads in flight per lane (4, 8) x the
// warps gemv_warps_per_feature aims at (4096, 8192, 16384; its rule picks 4096, or 16384 for
// rows of kGemvLongRow elements), for each shape with
// 16-byte rows and the q/k/v split GEMV; then the default grid with the weight already in L2 (one
// copy re-read by every call, shapes under 40 MB): what the GEMV would take had its weight been
// prefetched into L2 during the kernels before it.
void bench_grid_sweep(const GemvBenchOptions& o, const std::vector<GemvBenchShape>& shapes,
                      cudaStream_t stream) {
  const size_t elem = dtype_size(o.dtype);
  const int loads[2] = {4, 8};
  const int64_t targets[3] = {4096, 8192, 16384};
  std::cout << "\nGEMV grid sweep, us (loads in flight / target warps):\n";
  std::cout << fmt::format("{:<10} {:>4} |", "shape", "rows");
  for (const int l : loads) {
    for (const int64_t t : targets) {
      std::cout << fmt::format(" {:>9}", fmt::format("{}/{}k", l, t / 1024));
    }
  }
  std::cout << " | L2-warm default\n";
  std::vector<GemvBenchShape> all = shapes;
  all.push_back({"qkv split", kQkv.in, kQkv.total()});
  for (const GemvBenchShape& s : all) {
    if ((s.in * static_cast<int64_t>(elem)) % 16 != 0) continue;  // 8 loads need 16-byte rows
    const bool split = std::string(s.name) == "qkv split";
    const size_t weight_bytes = static_cast<size_t>(s.in * s.out) * elem;
    const int copies =
        static_cast<int>(std::clamp<size_t>(kRotateBytes / weight_bytes + 1, 1, kCallsPerGraph));
    DeviceBuffer weights(weight_bytes * copies);
    DeviceBuffer x(static_cast<size_t>(2 * s.in) * elem);
    DeviceBuffer y(static_cast<size_t>(2 * s.out) * 4);
    MG_CUDA_CHECK(cudaMemset(weights.ptr, 0x11, weight_bytes * copies));
    MG_CUDA_CHECK(cudaMemset(x.ptr, 0x22, static_cast<size_t>(2 * s.in) * elem));
    const auto launch = [&](const void* w, int64_t rows, int l, int64_t t) {
      cuda::dispatch_float_dtype(o.dtype, [&](auto tag) {
        using T = decltype(tag);
        if (split) {
          launch_qkv_split(o.dtype, kQkv, x.ptr, w, y.ptr, rows, l, t, {0, 0, 0}, stream);
        } else {
          cuda::GemvArgs args;
          args.x = x.ptr;
          args.w = w;
          args.y = y.ptr;
          args.rows = rows;
          args.in = s.in;
          args.out = s.out;
          args.loads_in_flight = l;
          args.target_warps = t;
          cuda::launch_gemv<T, T>(args, stream);
        }
      });
    };
    for (const int64_t rows : {int64_t{1}, int64_t{2}}) {
      std::cout << fmt::format("{:<10} {:>4} |", s.name, rows);
      for (const int l : loads) {
        for (const int64_t t : targets) {
          const double us = time_calls(stream, [&](int i) {
            launch(static_cast<const char*>(weights.ptr) + (i % copies) * weight_bytes, rows, l, t);
          });
          std::cout << fmt::format(" {:>9.2f}", us);
        }
      }
      if (weight_bytes < (size_t{40} << 20)) {
        const double warm_us = time_calls(stream, [&](int) { launch(weights.ptr, rows, 0, 0); });
        std::cout << fmt::format(" | {:>9.2f}", warm_us);
      }
      std::cout << "\n";
    }
  }
}

// The q/k/v split GEMV (2048 -> 4096 + 512 + 512) at 1 row with the warps per feature of the q
// block and of the k/v blocks forced, µs: which split of the row over warps suits each block when
// they share one launch (the rule gives q 1 and k/v 8).
void bench_split_warps(const GemvBenchOptions& o, cudaStream_t stream) {
  const int64_t kIn = kQkv.in;
  const int64_t(&outs)[3] = kQkv.outs;
  const size_t elem = dtype_size(o.dtype);
  const size_t weight_bytes = static_cast<size_t>(kIn * (outs[0] + outs[1] + outs[2])) * elem;
  const int copies =
      static_cast<int>(std::clamp<size_t>(kRotateBytes / weight_bytes + 1, 1, kCallsPerGraph));
  DeviceBuffer weights(weight_bytes * copies);
  DeviceBuffer x(static_cast<size_t>(kIn) * elem);
  DeviceBuffer y(static_cast<size_t>(outs[0] + outs[1] + outs[2]) * elem);
  MG_CUDA_CHECK(cudaMemset(weights.ptr, 0x11, weight_bytes * copies));
  MG_CUDA_CHECK(cudaMemset(x.ptr, 0x22, static_cast<size_t>(kIn) * elem));
  std::cout << "\nq/k/v split GEMV at 1 row by warps per feature (rows: q block; columns: k/v "
               "blocks), us:\n      kv 1      kv 2      kv 4      kv 8\n";
  for (const int q_wpf : {1, 2, 4}) {
    std::cout << fmt::format("q {}", q_wpf);
    for (const int kv_wpf : {1, 2, 4, 8}) {
      const double us = time_calls(stream, [&](int i) {
        launch_qkv_split(o.dtype, kQkv, x.ptr,
                         static_cast<const char*>(weights.ptr) + (i % copies) * weight_bytes, y.ptr,
                         1, 0, 0, {q_wpf, kv_wpf, kv_wpf}, stream);
      });
      std::cout << fmt::format(" {:>9.2f}", us);
    }
    std::cout << "\n";
  }
}
}  // namespace

std::vector<GemvBenchShape> gemv_bench_default_shapes() {
  return {
      {"q_proj", 2048, 4096},
      {"k/v_proj", 2048, 512},
      {"o_proj", 4096, 2048},
      {"router", 2048, 128},
      {"lm_head", 2048, 151936},
      {"odd", 2047, 1001},
      {"odd-long", 4099, 257},
      // GPT-OSS (hidden 2880, 64 x 64 query heads, 8 x 64 KV heads, vocab 201088)
      {"oss q", 2880, 4096},
      {"oss k/v", 2880, 512},
      {"oss o", 4096, 2880},
      {"oss router", 2880, 128},
      {"oss lm_head", 2880, 201088},
  };
}

int run_gemv_bench(const GemvBenchOptions& o) {
  MG_CUDA_CHECK(cudaSetDevice(o.device));
  const std::vector<GemvBenchShape> shapes =
      o.shapes.empty() ? gemv_bench_default_shapes() : o.shapes;
  const int64_t max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  const size_t elem = dtype_size(o.dtype);
  cudaStream_t stream = nullptr;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::cout << fmt::format(
      "{:<10} {:>6} {:>7} {:>4} | {:>10} {:>8} | {:>10} {:>8} | {:<13} | {:>10}\n", "shape", "in",
      "out", "rows", "gemv us", "GB/s", "cublas us", "GB/s", "faster", "8 loads us");
  void* workspace = nullptr;
  MG_CUDA_CHECK(cudaMalloc(&workspace, cuda::GemmXwt::kWorkspaceBytes));
  for (const GemvBenchShape& s : shapes) {
    const size_t weight_bytes = static_cast<size_t>(s.in * s.out) * elem;
    const int copies =
        static_cast<int>(std::clamp<size_t>(kRotateBytes / weight_bytes + 1, 1, kCallsPerGraph));
    DeviceBuffer weights(weight_bytes * copies);
    DeviceBuffer x(static_cast<size_t>(max_rows * s.in) * elem);
    DeviceBuffer y(static_cast<size_t>(max_rows * s.out) * 4);
    // Small random-ish values: the timing does not depend on them, NaNs would not either, but a
    // defined input keeps compute-sanitizer quiet.
    MG_CUDA_CHECK(cudaMemset(weights.ptr, 0x11, weight_bytes * copies));
    MG_CUDA_CHECK(cudaMemset(x.ptr, 0x22, static_cast<size_t>(max_rows * s.in) * elem));
    cuda::GemmXwt gemv(o.dtype, s.in, s.out, nullptr, o.device);
    cuda::GemmXwt cublas(o.dtype, s.in, s.out, nullptr, o.device);
    gemv.set_gemv_max_rows(cuda::kGemvMaxRows);  // every row count, whatever the rule chooses
    cublas.set_gemv_max_rows(0);
    for (int64_t rows : o.rows) {
      auto call_of = [&](const cuda::GemmXwt& g) {
        return [&, rows](int i) {
          const char* w = static_cast<const char*>(weights.ptr) + (i % copies) * weight_bytes;
          g.run(x.ptr, rows, w, y.ptr, 1.0f, workspace, cuda::GemmXwt::kWorkspaceBytes, stream);
        };
      };
      const bool gemv_applies = rows <= cuda::kGemvMaxRows;
      const double gemv_us = gemv_applies ? time_calls(stream, call_of(gemv)) : 0.0;
      // The same GEMV with 8 weight loads in flight per lane instead of kGemvLoadsInFlight (up to
      // 2 rows, where the kernel takes 8): the A/B that sets the default.
      const bool loads8_applies = rows <= 2 && (s.in * static_cast<int64_t>(elem)) % 16 == 0;
      const double loads8_us =
          loads8_applies ? time_calls(stream,
                                      [&, rows](int i) {
                                        cuda::GemvArgs args;
                                        args.x = x.ptr;
                                        args.w = static_cast<const char*>(weights.ptr) +
                                                 (i % copies) * weight_bytes;
                                        args.y = y.ptr;
                                        args.rows = rows;
                                        args.in = s.in;
                                        args.out = s.out;
                                        args.loads_in_flight = 8;
                                        cuda::dispatch_float_dtype(o.dtype, [&](auto tag) {
                                          using T = decltype(tag);
                                          cuda::launch_gemv<T, T>(args, stream);
                                        });
                                      })
                         : 0.0;
      const double cublas_us = time_calls(stream, call_of(cublas));
      const double bytes = static_cast<double>(weight_bytes);
      std::cout << fmt::format(
          "{:<10} {:>6} {:>7} {:>4} | {:>10} {:>8} | {:>10.2f} {:>8.0f} | {:<13} | {:>10}\n",
          s.name, s.in, s.out, rows,
          gemv_applies ? fmt::format("{:.2f}", gemv_us) : std::string("-"),
          gemv_applies ? fmt::format("{:.0f}", bytes / gemv_us / 1e3) : std::string("-"), cublas_us,
          bytes / cublas_us / 1e3,
          !gemv_applies          ? "cublas (only)"
          : gemv_us <= cublas_us ? "gemv"
                                 : "cublas",
          loads8_applies ? fmt::format("{:.2f}", loads8_us) : std::string("-"));
    }
  }
  if (o.shapes.empty()) {
    for (const QkvShape& shape : kQkvShapes) bench_qkv_split(o, shape, stream, workspace);
  }
  bench_grid_sweep(o, shapes, stream);
  if (o.shapes.empty()) bench_split_warps(o, stream);
  cudaFree(workspace);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace mg
