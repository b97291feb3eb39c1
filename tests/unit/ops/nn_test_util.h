// Small helpers of the dense nn op tests: I32 tensors and "throws mg::Error saying X".
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/tensor.h"

namespace mg::testing {

inline Tensor i32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty_cpu(DType::kI32, {static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

// 0, 1, ..., n-1 shifted by `first`.
inline Tensor positions_tensor(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = first + static_cast<int32_t>(i);
  return i32_tensor(v);
}

// Runs `fn`, expecting mg::Error whose message contains every one of `needles`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string_view> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected mg::Error mentioning '" << *needles.begin() << "', got none";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (std::string_view needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message '" << message << "' does not mention '" << needle << "'";
    }
  }
}

}  // namespace mg::testing
