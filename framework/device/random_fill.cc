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

namespace {

// Throws unless `t` lies on a GPU (the host's random quantized weights are made elsewhere).
void check_on_gpu(const Tensor& t, const char* what) {
  MG_CHECK(t.defined() && t.device().is_cuda(), "{}: a GPU tensor, not {}", what,
           t.defined() ? t.device().str() : "none");
#ifndef MG_WITH_CUDA
  MG_FAIL("{}: this moegraph was built without CUDA", what);
#endif
}

}  // namespace

void fill_random_bytes(const Tensor& bytes, uint64_t seed, Stream* stream) {
  check_on_gpu(bytes, "fill_random_bytes");
#ifdef MG_WITH_CUDA
  cuda::fill_random_bytes(static_cast<uint8_t*>(bytes.raw()), bytes.nbytes(), seed,
                          cuda::native(stream));
  if (stream == nullptr) MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
  (void)seed;
  (void)stream;
#endif
}

void fill_random_scales(const Tensor& scale, uint64_t seed, float base, Stream* stream,
                        Fp4ScaleGrid grid, float global) {
  check_on_gpu(scale, "fill_random_scales");
  MG_CHECK(scale.dtype() == DType::kF32, "fill_random_scales: F32, not {}",
           dtype_name(scale.dtype()));
#ifdef MG_WITH_CUDA
  cuda::fill_random_scales(scale.data<float>(), scale.numel(), seed, base, grid, global,
                           cuda::native(stream));
  if (stream == nullptr) MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
  (void)seed;
  (void)base;
  (void)stream;
  (void)grid;
  (void)global;
#endif
}

void fill_random_int_codes(const Tensor& codes, const Tensor& scale, const Tensor& zero, int64_t C,
                           int64_t group_cols, int bits, bool is_signed, uint64_t seed, float range,
                           Stream* stream) {
  check_on_gpu(codes, "fill_random_int_codes");
  check_on_gpu(scale, "fill_random_int_codes");
  MG_CHECK(is_signed || zero.defined(), "fill_random_int_codes: unsigned codes need zero points");
  MG_CHECK(bits == 4 || bits == 8, "fill_random_int_codes: 4 or 8 bits, not {}", bits);
#ifdef MG_WITH_CUDA
  const int64_t rows = scale.numel() / scale.shape().back();
  cuda::fill_random_int_codes(static_cast<uint8_t*>(codes.raw()), scale.data<float>(),
                              zero.defined() ? zero.data<float>() : nullptr, rows, C, group_cols,
                              bits, is_signed, seed, range, cuda::native(stream));
  if (stream == nullptr) MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
  (void)C;
  (void)group_cols;
  (void)seed;
  (void)range;
  (void)stream;
#endif
}

}  // namespace mg
