#include "framework/device/random_fill.h"

#include "framework/core/float_dtype.h"
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
  visit_float_dtype(t.dtype(), "fill_uniform's tensor", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = from_float<T>(uniform_at(seed, i, center, scale));
  });
}

}  // namespace mg
