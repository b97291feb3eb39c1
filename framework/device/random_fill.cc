#include "framework/device/random_fill.h"

#include "framework/core/half.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/random_fill_cuda.h"
#endif

namespace mg {

void fill_uniform(const Tensor& t, uint64_t seed, float center, float scale, Stream* stream) {
  const int64_t n = t.numel();
  if (t.device().is_cuda()) {
#ifdef MG_WITH_CUDA
    cuda::fill_uniform(t.raw(), n, t.dtype(), seed, center, scale, cuda::native(stream));
    if (stream == nullptr) MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    return;
#endif
  }
  (void)stream;  // CPU work is done on return
  MG_CHECK(t.device().is_cpu(), "fill_uniform: no generator for {}", t.device().str());
  switch (t.dtype()) {
    case DType::kF32: {
      float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = uniform_at(seed, i, center, scale);
      return;
    }
    case DType::kBF16: {
      auto* p = static_cast<uint16_t*>(t.raw());
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(uniform_at(seed, i, center, scale));
      return;
    }
    case DType::kF16: {
      auto* p = static_cast<uint16_t*>(t.raw());
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_fp16(uniform_at(seed, i, center, scale));
      return;
    }
    default:
      break;
  }
  MG_FAIL("fill_uniform: {} is not a float tensor (F32, F16 or BF16)", t.str());
}

}  // namespace mg
