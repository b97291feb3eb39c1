// Running the shared op case table (op_cases.h): a case's inputs, the op's reference, and the
// CPU side of the check. The CUDA side (tests/cuda/cuda_test_util.h) runs the same cases through
// DeviceOp in every dtype of cuda_dtypes().
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "framework/core/tensor.h"
#include "proto/model.pb.h"
#include "tests/testing/op_cases.h"

namespace mg::testing {

// The inputs of `c` as host tensors (F32, I32, or undefined where absent); deterministic.
std::vector<Tensor> make_inputs(const OpCase& c);

// The op's plain reference (ops/nn/<op>/<op>_reference.cc) on `inputs`: the expected output as
// an F32 tensor of the output's shape. Attention cases are prefills from position 0.
Tensor op_reference(const proto::Node& node, const std::vector<Tensor>& inputs);

// `got` equals `want` element for element (NaN where `want` is NaN); the count of differences
// and the first one are reported.
void expect_same_values(std::span<const float> got, std::span<const float> want);

// The CPU side of the table: every case of `op` through the CPU kernel (run_cpu_op) against
// op_reference, as its Match says.
void expect_cpu_cases_match_reference(std::string_view op);

}  // namespace mg::testing
