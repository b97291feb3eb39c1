// One table of op test cases, shared by the CPU op tests (tests/unit/) and the CUDA op tests
// (tests/cuda/), after ggml's test-backend-ops: a case is a node (op + params) and the inputs it
// runs on; the CPU tests run every case through the CPU kernel against the op's plain reference,
// the CUDA tests run the same cases in BF16, F16 and F32 (inputs rounded through the dtype first)
// against the same reference. A shape added here is tested on both devices.
//
// op_case_check.h makes a case's inputs and runs the reference. The sweeps live here; the tests
// that check exact semantics by hand (hand-computed rows, error messages, NaN rows for bad ids on
// a GPU) stay in the op's own test file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/tensor.h"
#include "proto/model.pb.h"

namespace mg::testing {

// How one input of a case is made. Floats are seeded by the case's name, so the CPU and a GPU
// see the same values (a GPU after rounding through its dtype).
struct CaseInput {
  enum class Fill {
    kAbsent,              // an optional input left out (attention without sinks)
    kRandom,              // F32, uniform in [lo, hi)
    kRandomWithSpecials,  // kRandom with NaN, ±inf, -0 and ±1e4 spread over it (clamp)
    kI32,                 // the I32 `values` given: token ids, positions
  };
  Fill fill = Fill::kAbsent;
  Shape shape;
  float lo = -1.0f, hi = 1.0f;
  std::vector<int32_t> values;
};

CaseInput random_input(Shape shape, float lo = -1.0f, float hi = 1.0f);
CaseInput random_input_with_specials(Shape shape, float lo, float hi);
CaseInput i32_input(std::vector<int32_t> values);
CaseInput absent_input();

// How a kernel's output is held against the reference.
enum class Match {
  // Normalised error below the tolerance: OpCase::cpu_tolerance on the CPU, the dtype's
  // (cuda_dtypes()) times OpCase::device_tolerance_factor on a GPU.
  kClose,
  // Equal element for element, NaN where NaN; a GPU's output equals the reference rounded
  // through its dtype (ops that only move, compare or scale once in fp32).
  kExact,
  // kClose, and a GPU's output equals the CPU kernel's rounded through its dtype (the kernel
  // computes the same fp32 factor as the CPU's).
  kCloseAndGpuEqualsCpuKernel,
};

struct OpCase {
  std::string name;  // "<op> <what>", unique; the trace of every failure
  proto::Node node;
  std::vector<CaseInput> inputs;  // one per node input, in order
  Match match = Match::kClose;
  double cpu_tolerance = 1e-5;           // the CPU kernel (F32) against the reference
  double device_tolerance_factor = 1.0;  // times the dtype's tolerance on a GPU
  int cpu_threads = 3;                   // the CPU kernel's thread pool (a CPU-only param)
  // Non-empty: why this case does not run on a GPU (the CUDA tests print it and skip the case).
  std::string cpu_only;
};

// Every case of every op, in the order of the table.
const std::vector<OpCase>& op_cases();
// The cases of one op (MG_CHECK: the table has some).
std::vector<const OpCase*> op_cases_of(std::string_view op);

// A named attention configuration. The table's attention cases are prefills of every config at
// several lengths; the tests that run whole sequences (token-by-token decode, chunked calls on
// one KV cache) iterate the same configs on both devices.
struct AttentionConfig {
  std::string name;
  proto::AttentionParams params;
  std::string cpu_only;  // as OpCase::cpu_only
};
const std::vector<AttentionConfig>& attention_configs();
// v_head_dim with 0 resolved to head_dim.
int64_t attention_v_head_dim(const proto::AttentionParams& params);

// The rope configurations of the table (every pairing and scaling), by name.
struct RopeConfig {
  std::string name;
  proto::RopeParams params;
};
const std::vector<RopeConfig>& rope_configs();

// Position t of an attn_temperature case: consecutive, on a step of floor((p + 1) /
// floor_scale), far, and the largest I32 values, in turn.
int32_t temperature_position(int64_t t, float floor_scale, uint32_t seed);

}  // namespace mg::testing
