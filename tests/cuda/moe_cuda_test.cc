// op "moe" on CUDA: every expert backend of the oracle's CUDA list (cuda_moe, cuda_grouped,
// cuda_cublas; cuda_padded on the odd sizes the others refuse) against the fp64 reference layer,
// for every family shape of the CPU op tests, in BF16, F16 and F32, over token counts that cross
// the decode/grouped switch and the shared-experts stream threshold. Inputs are rounded through the
// dtype first (the router weight and shared experts as the plan places them; router and
// score-correction biases stay F32, raw), so the reference routes on the same values and what is
// left is the kernels' arithmetic.
#include <gtest/gtest.h>

#include <cstring>

#include "ops/moe/moe_params.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/moe/moe_node_util.h"

#ifdef MG_WITH_CUDA
#include "ops/moe/router/router_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using moe_test::make_moe_node;
using moe_test::MoENode;
using testing::cuda_dtypes;
using testing::DeviceOp;
using testing::round_through;

constexpr const char* kCudaBackends[] = {"cuda_moe", "cuda_grouped", "cuda_cublas"};

// The node's inputs as the GPU sees them: x and every weight rounded through `dtype` (the plan
// places the router weight and shared experts in it, the experts convert theirs to it), but the
// router and score-correction biases, which stay F32 on every device.
std::vector<Tensor> rounded_inputs(const MoENode& n, const Tensor& x, DType dtype) {
  std::vector<Tensor> in = n.inputs;
  in[moe_input::kX] = x;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == moe_input::kRouterBias || i == moe_input::kScoreCorrectionBias) continue;
    in[i] = round_through(in[i], dtype);
  }
  return in;
}

std::vector<float> reference(const MoENode& n, const std::vector<Tensor>& inputs) {
  return reference::moe_forward(moe_config_from_params(n.node.moe()), inputs);
}

std::span<const float> values(const Tensor& t) {
  return {t.data<float>(), static_cast<size_t>(t.numel())};
}

TEST(CudaMoE, EveryFamilyMatchesTheReferenceOnEveryBackend) {
  MG_REQUIRE_GPU();
  uint32_t seed = 7000;
  for (const char* family : moe_test::kFamilies) {
    const MoENode n = make_moe_node(family, seed++);
    for (const auto& d : cuda_dtypes()) {
      for (const char* backend : kCudaBackends) {
        DeviceOp op(n.node, n.inputs, d.dtype, 256, backend);
        // 1, 3: cuda_moe's decode kernels (up to 5 tokens, pipeline row P1 of
        // ops/moe/heuristics/unquantized_kernel_choice.cc); 16+: its grouped GEMMs; 300 > the
        // shared-experts stream threshold (256).
        for (int64_t M : {1, 3, 16, 17, 64, 300}) {
          const Tensor x = testing::random_tensor({M, 32}, seed++);
          const std::vector<Tensor> in = rounded_inputs(n, x, d.dtype);
          const std::vector<Tensor> out = op.run(in);
          EXPECT_LE(testing::normalized_error(values(out[0]), reference(n, in)), d.tolerance)
              << family << " " << backend << " " << dtype_name(d.dtype) << " M=" << M;
        }
      }
    }
  }
}

// Wider layers: many experts, top-8, grouped routing over 8 groups, H and I not powers of two.
TEST(CudaMoE, ManyExpertsAndOddSizesMatchTheReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 7500;
  for (const char* family : {"mixtral", "deepseek_v3", "gpt_oss"}) {
    const MoENode n = make_moe_node(family, seed++, /*E=*/64, /*k=*/6, /*H=*/200, /*I=*/72,
                                    /*Is=*/40);
    for (const auto& d : cuda_dtypes()) {
      for (const char* backend : kCudaBackends) {
        DeviceOp op(n.node, n.inputs, d.dtype, 256, backend);
        for (int64_t M : {1, 9, 130}) {
          const Tensor x = testing::random_tensor({M, 200}, seed++);
          const std::vector<Tensor> in = rounded_inputs(n, x, d.dtype);
          EXPECT_LE(testing::normalized_error(values(op.run(in)[0]), reference(n, in)), d.tolerance)
              << family << " " << backend << " " << dtype_name(d.dtype) << " M=" << M;
        }
      }
    }
  }
}

// Big experts and many rows per expert: cuda_moe hands the GEMMs to cuBLASLt
// (pipeline row P3 of ops/moe/heuristics/unquantized_kernel_choice.cc), so its output is
// cuda_cublas's bit for bit, and the grouped GEMM agrees within BF16 rounding.
TEST(CudaMoE, CudaMoETakesTheCublasPathForLargeBatches) {
  MG_REQUIRE_GPU();
  const int64_t H = 2048, I = 2048, M = 512;  // E 4, k 2: 256 rows and 4.3 GFLOP per expert
  const MoENode n = make_moe_node("mixtral", 7800, /*E=*/4, /*k=*/2, H, I);
  const Tensor x = testing::random_tensor({M, H}, 7801);
  const std::vector<Tensor> in = rounded_inputs(n, x, DType::kBF16);
  DeviceOp fused(n.node, n.inputs, DType::kBF16, 256, "cuda_moe");
  DeviceOp cublas(n.node, n.inputs, DType::kBF16, 256, "cuda_cublas");
  DeviceOp grouped(n.node, n.inputs, DType::kBF16, 256, "cuda_grouped");
  const Tensor a = fused.run(in)[0], b = cublas.run(in)[0], c = grouped.run(in)[0];
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << "element " << i;
  }
  EXPECT_LE(testing::normalized_error(values(a), values(c)), 1e-2);
}

TEST(CudaMoE, OracleChoosesCudaMoEAndSaysWhy) {
  MG_REQUIRE_GPU();
  const MoENode n = make_moe_node("deepseek_v3", 7900);
  DeviceOp op(n.node, n.inputs, DType::kBF16);
  const std::string plan = op.kernel().describe();
  EXPECT_NE(plan.find("cuda_moe"), std::string::npos) << plan;
  EXPECT_NE(plan.find("cuda_grouped: fits, lower priority"), std::string::npos) << plan;
  EXPECT_NE(plan.find("cuda_cublas: fits, lower priority"), std::string::npos) << plan;
}

TEST(CudaMoE, SharedExpertsOnTheSideStreamEqualSequential) {
  MG_REQUIRE_GPU();
  for (const char* family : {"qwen2_moe", "deepseek_v3", "llama4"}) {
    const MoENode n = make_moe_node(family, 7950);
    const Tensor x = testing::random_tensor({24, 32}, 7951);
    const std::vector<Tensor> in = rounded_inputs(n, x, DType::kBF16);
    DeviceOp overlapped(n.node, n.inputs, DType::kBF16);
    DeviceOp sequential(n.node, n.inputs, DType::kBF16);
    sequential.drop_state();  // no side stream: the shared experts run on the main stream
    const Tensor a = overlapped.run(in)[0], b = sequential.run(in)[0];
    ASSERT_EQ(a.numel(), b.numel());
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << family << " element " << i;
    }
  }
}

// The op's state holds the router's arrival counter, so cuda_moe at decode sizes (with the fused
// kernel switched on) runs the fused gate + route launch and takes the runner's ids
// (router_route_cuda.h); without the state it launches the gate and routes itself. At 1 and 2
// tokens both gates are the GEMV: the outputs are the same bits. At 5 and 8 the two-launch gate is
// cuBLAS: both within the reference bound.
TEST(CudaMoE, FusedGateAndRouteEqualsTwoLaunches) {
  MG_REQUIRE_GPU();
  const ScopedFusedRoute on(true);  // off by default (router_cuda.h)
  uint32_t seed = 7960;
  for (const char* family : moe_test::kFamilies) {
    const MoENode n = make_moe_node(family, seed++);
    DeviceOp fused(n.node, n.inputs, DType::kBF16, 256, "cuda_moe");
    DeviceOp two(n.node, n.inputs, DType::kBF16, 256, "cuda_moe");
    two.drop_state();
    for (int64_t M : {1, 2, 5, 8}) {
      SCOPED_TRACE(fmt::format("{} M={}", family, M));
      const Tensor x = testing::random_tensor({M, 32}, seed++);
      const std::vector<Tensor> in = rounded_inputs(n, x, DType::kBF16);
      const Tensor a = fused.run(in)[0], b = two.run(in)[0];
      ASSERT_EQ(a.numel(), b.numel());
      if (M <= 2) {
        ASSERT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
      } else {
        const std::vector<float> want = reference(n, in);
        EXPECT_LE(testing::normalized_error(values(a), want), 1e-2);
        EXPECT_LE(testing::normalized_error(values(b), want), 1e-2);
      }
    }
  }
}

TEST(CudaMoE, UnsupportedRequestsFailWithTheReason) {
  MG_REQUIRE_GPU();
  const MoENode n = make_moe_node("mixtral", 7990);
  try {
    DeviceOp op(n.node, n.inputs, DType::kBF16, 256, "cpu_eigen");
    FAIL() << "cpu_eigen accepted on cuda";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown MoE backend 'cpu_eigen' for cuda:0"),
              std::string::npos)
        << e.what();
  }
}

// H = 36: rows that are not 16-byte aligned. The three aligned backends refuse the shape and
// say why; the oracle's list ends in cuda_padded, which takes it.
TEST(CudaMoE, UnalignedRowsFallToCudaPadded) {
  MG_REQUIRE_GPU();
  const MoENode odd = make_moe_node("mixtral", 7991, 8, 2, /*H=*/36, /*I=*/16);
  DeviceOp op(odd.node, odd.inputs, DType::kBF16);
  const std::string plan = op.kernel().describe();
  EXPECT_EQ(plan.rfind("cuda_padded (auto", 0), 0u) << plan;
  for (const char* name : kCudaBackends) {
    EXPECT_NE(plan.find(std::string(name) + ": rejected, shape"), std::string::npos) << plan;
  }
}

// Sizes no aligned backend takes (odd, even but not multiples of 8, primes; H or I alone
// unaligned) for every family (every routing method and activation: softmax/sigmoid top-k,
// grouped and group-limited, score-correction bias, Llama-4's weight on the input, SwiGLU-OAI
// with biases, GELU, ReLU², shared experts of odd sizes too), in BF16, F16 and F32, on the
// token counts of both cuda_moe pipelines (decode up to 8, grouped above), through the oracle's
// own choice (cuda_padded) against the fp64 reference.
TEST(CudaMoE, OddSizesMatchTheReferenceOnCudaPadded) {
  MG_REQUIRE_GPU();
  struct Dims {
    int64_t H, I, Is;
  };
  const Dims dims[] = {{7, 5, 3}, {30, 22, 14}, {37, 53, 11}, {13, 16, 24}, {32, 11, 9}, {3, 9, 5}};
  uint32_t seed = 8100;
  for (const char* family : moe_test::kFamilies) {
    for (const Dims& s : dims) {
      const MoENode n = make_moe_node(family, seed++, /*E=*/8, /*k=*/2, s.H, s.I, s.Is);
      for (const auto& d : cuda_dtypes()) {
        DeviceOp op(n.node, n.inputs, d.dtype);
        ASSERT_EQ(op.kernel().describe().rfind("cuda_padded (auto", 0), 0u)
            << op.kernel().describe();
        for (int64_t M : {1, 3, 17, 64}) {
          const Tensor x = testing::random_tensor({M, s.H}, seed++);
          const std::vector<Tensor> in = rounded_inputs(n, x, d.dtype);
          EXPECT_LE(testing::normalized_error(values(op.run(in)[0]), reference(n, in)), d.tolerance)
              << family << " H=" << s.H << " I=" << s.I << " " << dtype_name(d.dtype) << " M=" << M;
        }
      }
    }
  }
}

// Forced on aligned sizes, cuda_padded pads nothing and is cuda_moe; forced kernels pass through
// to cuda_moe on the padded shape (the decode kernels and a grouped GEMM on unaligned rows).
TEST(CudaMoE, CudaPaddedTakesCudaMoEKernelRequests) {
  MG_REQUIRE_GPU();
  const MoENode n = make_moe_node("deepseek_v3", 8300, 8, 2, /*H=*/27, /*I=*/19);
  uint32_t seed = 8301;
  for (const char* backend :
       {"cuda_padded:decode", "cuda_padded:grouped_mma16+mma16", "cuda_padded:cublas"}) {
    for (const auto& d : cuda_dtypes()) {
      // The mma kernels run BF16/F16 only (F32 runs ffma): the request is refused for F32.
      if (d.dtype == DType::kF32 && std::string_view(backend).find("mma16") != std::string::npos) {
        continue;
      }
      DeviceOp op(n.node, n.inputs, d.dtype, 256, backend);
      for (int64_t M : {1, 5, 40}) {
        if (std::string_view(backend).ends_with("decode") && M > 16) continue;
        const Tensor x = testing::random_tensor({M, 27}, seed++);
        const std::vector<Tensor> in = rounded_inputs(n, x, d.dtype);
        EXPECT_LE(testing::normalized_error(values(op.run(in)[0]), reference(n, in)), d.tolerance)
            << backend << " " << dtype_name(d.dtype) << " M=" << M;
      }
    }
  }
  const MoENode aligned = make_moe_node("mixtral", 8400);
  const Tensor x = testing::random_tensor({9, 32}, 8401);
  const std::vector<Tensor> in = rounded_inputs(aligned, x, DType::kBF16);
  DeviceOp padded(aligned.node, aligned.inputs, DType::kBF16, 256, "cuda_padded");
  DeviceOp fused(aligned.node, aligned.inputs, DType::kBF16, 256, "cuda_moe");
  const Tensor a = padded.run(in)[0], b = fused.run(in)[0];
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << "element " << i;
  }
}

#else

TEST(CudaMoE, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
