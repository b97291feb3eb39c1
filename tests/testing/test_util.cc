#include "tests/testing/test_util.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

namespace mg::testing {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor random_tensor(Shape shape, uint32_t seed, float lo, float hi) {
  Tensor t = Tensor::empty_cpu(DType::kF32, std::move(shape));
  std::vector<float> v = random_floats(static_cast<size_t>(t.numel()), seed, lo, hi);
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

Tensor tensor_from(Shape shape, std::span<const float> values) {
  Tensor t = Tensor::empty_cpu(DType::kF32, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

double normalized_error(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (std::isnan(num)) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

std::span<const float> span_of(const Tensor& t) {
  return {t.data<float>(), static_cast<size_t>(t.numel())};
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "test";
  for (char& c : test) {
    if (c == '/') c = '_';
  }
  auto dir = std::filesystem::temp_directory_path() / "moegraph-tests" / test / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace mg::testing
