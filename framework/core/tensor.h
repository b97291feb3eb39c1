// Buffer: bytes on one device, kept alive by whoever holds it.
// Tensor: a contiguous row-major view (dtype, shape, byte offset) on a Buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/device/device.h"

namespace mg {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
// "[2, 3, 4]"
std::string shape_str(const Shape& shape);

class Buffer {
 public:
  // `owner` keeps the memory alive (an mmap, an allocator block, a vector); null for views of
  // memory owned elsewhere.
  Buffer(void* data, size_t size, Device device, std::shared_ptr<void> owner)
      : data_(data), size_(size), device_(device), owner_(std::move(owner)) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t size_;
  Device device_;
  std::shared_ptr<void> owner_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape, size_t offset = 0);

  // A new zero-filled tensor in host memory (64-byte aligned).
  static Tensor empty_cpu(DType dtype, Shape shape);
  // A view of memory owned elsewhere; the caller keeps it alive.
  static Tensor wrap(void* data, DType dtype, Shape shape, Device device = Device::cpu());

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return buffer_ ? buffer_->device() : Device::cpu(); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  size_t offset() const { return offset_; }

  void* raw() const { return static_cast<char*>(buffer_->data()) + offset_; }
  template <typename T>
  T* data() const {
    MG_ASSERT(dtype_of<T>() == dtype_, "tensor is {}, accessed as {}", dtype_name(dtype_),
              dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Same data, new shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Sets the leading dimension in place (no allocation); the view must still fit its buffer.
  // Used by the runtime to resize activation views to this call's token count.
  void set_rows(int64_t rows);
  // Rows [begin, end) of the leading dimension.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // "F32[4, 16]"
  std::string str() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  size_t offset_ = 0;
};

// Returns `src` converted to F32 in host memory (F32, F16, BF16, F64 accepted).
Tensor to_f32_cpu(const Tensor& src);

}  // namespace mg
