#include "framework/device/convert.h"

#include <cstring>

#include "framework/core/float_dtype.h"
#include "framework/device/allocator.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/convert_cuda.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#endif

namespace mg {

namespace {

bool is_activation_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// dst[i] = src[i] for F32 host data into F32, F16 or BF16.
void store_f32_as(const float* src, int64_t n, DType dtype, void* dst) {
  visit_float_dtype(dtype, "the converted tensor", [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = from_float<T>(src[i]);
  });
}

}  // namespace

Tensor cast_cpu(const Tensor& src, DType dtype) {
  MG_ASSERT(is_activation_float(dtype), "cast_cpu: target dtype {} is not F32, F16 or BF16",
            dtype_name(dtype));
  Tensor f32 = to_f32_cpu(src);
  if (dtype == DType::kF32) return f32;
  Tensor out = Tensor::empty_cpu(dtype, src.shape());
  store_f32_as(f32.data<float>(), f32.numel(), dtype, out.raw());
  return out;
}

void convert_tensor(const Tensor& dst, const Tensor& src, Stream* stream) {
  MG_ASSERT(dst.numel() == src.numel() && dst.device() == src.device(), "convert {} <- {}",
            dst.str(), src.str());
  MG_ASSERT(is_activation_float(dst.dtype()) && is_activation_float(src.dtype()),
            "convert {} <- {}: only F32, F16 and BF16", dst.str(), src.str());
  if (dst.dtype() == src.dtype()) {
    copy_tensor(dst, src, stream);
    return;
  }
  if (src.device().is_cpu()) {
    const Tensor f32 = to_f32_cpu(src);
    store_f32_as(f32.data<float>(), f32.numel(), dst.dtype(), dst.raw());
    return;
  }
#ifdef MG_WITH_CUDA
  cuda::convert_cuda(dst.dtype(), dst.raw(), src.dtype(), src.raw(), src.numel(),
                     cuda::native(stream));
  // Without a stream (compile time) the result is complete on return, as copy_tensor's is.
  if (stream == nullptr) MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
  MG_ASSERT(false, "convert_tensor on {} in a build without CUDA", src.device().str());
#endif
}

}  // namespace mg
