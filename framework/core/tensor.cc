#include "framework/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <numeric>

#include "framework/core/checked_math.h"
#include "framework/core/float_dtype.h"
#include "framework/core/half.h"
#include "framework/core/host_memory.h"

namespace mg {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape, size_t offset)
    : buffer_(std::move(buffer)), dtype_(dtype), shape_(std::move(shape)), offset_(offset) {
  MG_ASSERT(buffer_ == nullptr || offset_ + nbytes() <= buffer_->size(),
            "view {} at offset {} exceeds buffer of {} bytes", shape_str(shape_), offset_,
            buffer_->size());
}

Tensor Tensor::empty_cpu(DType dtype, Shape shape) {
  const std::string what = fmt::format("host tensor {}{}", dtype_name(dtype), shape_str(shape));
  const size_t bytes = allocation_bytes(shape, dtype, what);
  return Tensor(allocate_host_buffer(bytes, what), dtype, std::move(shape));
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, Device device) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto buffer = std::make_shared<Buffer>(data, bytes, device, nullptr);
  return Tensor(std::move(buffer), dtype, std::move(shape));
}

Tensor Tensor::reshape(Shape shape) const {
  MG_ASSERT(shape_numel(shape) == numel(), "reshape {} -> {} changes the element count",
            shape_str(shape_), shape_str(shape));
  return Tensor(buffer_, dtype_, std::move(shape), offset_);
}

void Tensor::set_rows(int64_t rows) {
  MG_ASSERT(rank() >= 1 && rows >= 0, "set_rows({}) on {}", rows, str());
  shape_[0] = rows;
  MG_ASSERT(offset_ + nbytes() <= buffer_->size(), "{} rows do not fit the buffer of {}", rows,
            str());
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  MG_ASSERT(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [{}, {}) of {}",
            begin, end, str());
  Shape s = shape_;
  s[0] = end - begin;
  const size_t row_bytes = shape_[0] == 0 ? 0 : nbytes() / static_cast<size_t>(shape_[0]);
  return Tensor(buffer_, dtype_, std::move(s), offset_ + static_cast<size_t>(begin) * row_bytes);
}

std::string Tensor::str() const {
  return fmt::format("{}{}", dtype_name(dtype_), shape_str(shape_));
}

Tensor to_f32_cpu(const Tensor& src) {
  MG_ASSERT(src.device().is_cpu(), "to_f32_cpu on {}", src.device().str());
  Tensor out = Tensor::empty_cpu(DType::kF32, src.shape());
  float* dst = out.data<float>();
  const int64_t n = src.numel();
  visit_float_dtype(src.dtype(), "the tensor converted to F32", [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src.raw());
    for (int64_t i = 0; i < n; ++i) dst[i] = to_float(s[i]);
  });
  return out;
}

}  // namespace mg
