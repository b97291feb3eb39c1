// Helpers shared by the test suites: seeded random tensors and error metrics.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "framework/core/tensor.h"

namespace mg::testing {

// Uniform values in [lo, hi), never all zero; deterministic for a seed.
std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// An F32 CPU tensor filled by random_floats.
Tensor random_tensor(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// An F32 CPU tensor holding `values`.
Tensor tensor_from(Shape shape, std::span<const float> values);

// ||a - b|| / max(||b||, tiny): the normalised error used to compare a path with its reference.
double normalized_error(std::span<const float> a, std::span<const float> b);
double max_abs_diff(std::span<const float> a, std::span<const float> b);
std::span<const float> span_of(const Tensor& t);

// A fresh empty directory under the system temp dir, unique per test, removed by the caller
// or left for inspection.
std::filesystem::path temp_dir(const std::string& name);

}  // namespace mg::testing
