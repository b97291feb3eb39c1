// `moegraph bench gemv`: the GEMV path of linear (linear_gemv_cuda.h) against cuBLASLt on the
// one-token shapes of a decode step, the numbers behind kGemvMaxRows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/dtype.h"

namespace mg {

struct GemvBenchShape {
  std::string name;
  int64_t in = 0, out = 0;
};

struct GemvBenchOptions {
  std::vector<GemvBenchShape> shapes;  // empty: the Qwen3-30B-A3B decode projections
  std::vector<int64_t> rows = {1, 2, 4, 8, 16};
  DType dtype = DType::kBF16;
  int device = 0;
};

// The decode step's projections of the 48-layer Qwen3-30B-A3B-shaped model (docs/performance.md)
// and two odd shapes.
std::vector<GemvBenchShape> gemv_bench_default_shapes();

// Prints one row per (shape, rows): µs per call of each path (CUDA-graph replay of calls that
// rotate over weight copies larger than L2), GB/s of weight read and the faster path; with the
// default shapes, then a layer's q/k/v as three GEMVs against one split GEMV (the fused linear)
// at each row count up to kGemvMaxRows. Returns 0.
int run_gemv_bench(const GemvBenchOptions& options);

}  // namespace mg
