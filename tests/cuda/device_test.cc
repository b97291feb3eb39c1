// The CUDA device layer on a real GPU: streams and events order work, the caching allocator
// reuses blocks without cudaMalloc, copies round-trip, and the cuBLAS handle computes a GEMM that
// matches the CPU. Skipped (with the reason) where no GPU or no CUDA build is present.
#include <cstring>

#include <gtest/gtest.h>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/test_util.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#endif

namespace mg {
namespace {

TEST(CudaDevice, CopiesRoundTripThroughTheDevice) {
  MG_REQUIRE_GPU();
  Tensor host = testing::random_tensor({1000, 3}, 5);
  auto stream = make_stream(Device::cuda(0));
  Tensor dev = empty_tensor(Device::cuda(0), DType::kF32, host.shape(), stream.get());
  copy_tensor(dev, host, stream.get());
  Tensor dev2 = empty_tensor(Device::cuda(0), DType::kF32, host.shape(), stream.get());
  copy_tensor(dev2, dev, stream.get());
  Tensor back = Tensor::empty_cpu(DType::kF32, host.shape());
  copy_tensor(back, dev2, stream.get());
  EXPECT_EQ(std::memcmp(back.raw(), host.raw(), host.nbytes()), 0);
}

#ifdef MG_WITH_CUDA
TEST(CudaDevice, CachingAllocatorReusesFreedBlocks) {
  MG_REQUIRE_GPU();
  auto stream = make_stream(Device::cuda(0));
  { Tensor warm = empty_tensor(Device::cuda(0), DType::kF32, {1 << 20}, stream.get()); }
  const auto before = cuda::caching_allocator_stats(0);
  for (int i = 0; i < 100; ++i) {
    Tensor t = empty_tensor(Device::cuda(0), DType::kF32, {1 << 20}, stream.get());
    EXPECT_NE(t.raw(), nullptr);
  }
  const auto after = cuda::caching_allocator_stats(0);
  EXPECT_EQ(after.num_cuda_mallocs, before.num_cuda_mallocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

TEST(CudaDevice, EventOrdersASideStream) {
  MG_REQUIRE_GPU();
  auto main = make_stream(Device::cuda(0));
  auto side = make_stream(Device::cuda(0));
  auto forked = make_event(Device::cuda(0));
  Tensor host = testing::random_tensor({1 << 18}, 9);
  Tensor a = empty_tensor(Device::cuda(0), DType::kF32, host.shape(), main.get());
  Tensor b = empty_tensor(Device::cuda(0), DType::kF32, host.shape(), side.get());
  copy_tensor(a, host, main.get());
  forked->record(*main);
  forked->wait_on(*side);  // side sees a's contents only after the copy on main
  MG_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), a.nbytes(), cudaMemcpyDeviceToDevice,
                                cuda::native(side.get())));
  Tensor back = Tensor::empty_cpu(DType::kF32, host.shape());
  copy_tensor(back, b, side.get());
  EXPECT_EQ(std::memcmp(back.raw(), host.raw(), host.nbytes()), 0);
}

TEST(CudaDevice, CublasGemmMatchesTheCpu) {
  MG_REQUIRE_GPU();
  const int m = 37, n = 29, k = 53;  // y[m,n] = x[m,k] · w[n,k]ᵀ
  Tensor x = testing::random_tensor({m, k}, 1), w = testing::random_tensor({n, k}, 2);
  std::vector<float> ref(m * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += double(x.data<float>()[i * k + p]) * w.data<float>()[j * k + p];
      ref[i * n + j] = static_cast<float>(s);
    }
  }
  auto stream = make_stream(Device::cuda(0));
  Tensor dx = empty_tensor(Device::cuda(0), DType::kF32, x.shape(), stream.get());
  Tensor dw = empty_tensor(Device::cuda(0), DType::kF32, w.shape(), stream.get());
  Tensor dy = empty_tensor(Device::cuda(0), DType::kF32, {m, n}, stream.get());
  copy_tensor(dx, x, stream.get());
  copy_tensor(dw, w, stream.get());
  cublasHandle_t h = cuda::cublas_handle(0);
  MG_CUBLAS_CHECK(cublasSetStream(h, cuda::native(stream.get())));
  MG_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  const float one = 1, zero = 0;
  // Column-major view: yᵀ[n,m] = w[n,k] · xᵀ[k,m].
  MG_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, dw.data<float>(), k,
                              dx.data<float>(), k, &zero, dy.data<float>(), n));
  Tensor y = Tensor::empty_cpu(DType::kF32, {m, n});
  copy_tensor(y, dy, stream.get());
  EXPECT_LT(testing::normalized_error(testing::span_of(y), ref), 1e-5);
}

TEST(CudaDevice, ConvertsBetweenActivationDtypesOnTheDevice) {
  MG_REQUIRE_GPU();
  auto stream = make_stream(Device::cuda(0));
  const Tensor host = testing::random_tensor({3000}, 11, -100.0f, 100.0f);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    // F32 -> dtype on the device rounds as the host's cast_cpu does, and dtype -> F32 is exact.
    Tensor f32 = empty_tensor(Device::cuda(0), DType::kF32, host.shape(), stream.get());
    copy_tensor(f32, host, stream.get());
    Tensor low = empty_tensor(Device::cuda(0), dtype, host.shape(), stream.get());
    convert_tensor(low, f32, stream.get());
    Tensor back = empty_tensor(Device::cuda(0), DType::kF32, host.shape(), stream.get());
    convert_tensor(back, low, stream.get());
    Tensor got = Tensor::empty_cpu(DType::kF32, host.shape());
    copy_tensor(got, back, stream.get());
    const Tensor want = to_f32_cpu(cast_cpu(host, dtype));
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0);
  }
}
#endif

}  // namespace
}  // namespace mg
