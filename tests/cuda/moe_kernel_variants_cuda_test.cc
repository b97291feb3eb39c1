// Every kernel variant of the CUDA MoE experts, forced through `cuda_moe:KERNEL` (the way
// `moegraph run --moe-backend` and `bench moe --kernel` force them), against the fp64 reference
// layer: decode, cublas, grouped with the table's tiles, and every pair of grouped GEMM kernels
// (GEMM1 x GEMM2 over mma16/32/64/128, wgmma, tma, ffma), in BF16, F16 and F32, on a gated and a
// plain activation with sizes that are not multiples of 16/64, and a small gated shape below
// TMA's boxes; token counts leave experts without tokens (1 token, k 2 of 8 experts), fill the
// decode kernels (16) and give every expert many rows (300). A variant that cannot run a case is
// refused with a reason (no tile of that kind, not this dtype, TMA boxes larger than the problem,
// decode above 16 tokens), which the test checks against the heuristics' own check; at least the
// variants an H100 runs must have run.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <set>

#include "ops/moe/moe_params.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/moe/moe_node_util.h"

#ifdef MG_WITH_CUDA
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/heuristics/unquantized_kernel_choice.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using moe_test::make_moe_node;
using moe_test::MoENode;
using testing::cuda_dtypes;
using testing::DeviceOp;
using testing::round_through;

std::vector<Tensor> rounded_inputs(const MoENode& n, const Tensor& x, DType dtype) {
  std::vector<Tensor> in = n.inputs;
  in[moe_input::kX] = x;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == moe_input::kRouterBias || i == moe_input::kScoreCorrectionBias) continue;
    in[i] = round_through(in[i], dtype);
  }
  return in;
}

std::span<const float> values(const Tensor& t) {
  return {t.data<float>(), static_cast<size_t>(t.numel())};
}

// Every request name: the named ones and every GEMM1 x GEMM2 pair.
std::vector<std::string> every_request() {
  std::vector<std::string> out = {"decode", "cublas", "grouped"};
  for (cuda::GroupedGemmKernel a : cuda::kAllGroupedGemmKernels) {
    for (cuda::GroupedGemmKernel b : cuda::kAllGroupedGemmKernels) {
      out.push_back(fmt::format("grouped_{}+{}", cuda::grouped_gemm_kernel_name(a),
                                cuda::grouped_gemm_kernel_name(b)));
    }
  }
  return out;
}

// Which rows of a failed case are off (a failure seen only under other processes' load names
// them): their count, the first few, and the output's and the reference's norms.
std::string wrong_rows(std::span<const float> out, std::span<const float> ref, int64_t H) {
  std::vector<int64_t> bad;
  double out_norm = 0, ref_norm = 0;
  for (size_t r = 0; r * H < ref.size(); ++r) {
    const auto row = [&](std::span<const float> v) { return v.subspan(r * H, H); };
    if (testing::normalized_error(row(out), row(ref)) > 0.05) bad.push_back(r);
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    out_norm += double{out[i]} * out[i];
    ref_norm += double{ref[i]} * ref[i];
  }
  std::string first;
  for (size_t j = 0; j < bad.size() && j < 8; ++j) first += fmt::format(" {}", bad[j]);
  return fmt::format("{} of {} rows off (first:{}); |out| {:.4g}, |ref| {:.4g}", bad.size(),
                     ref.size() / H, first, std::sqrt(out_norm), std::sqrt(ref_norm));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct VariantShape {
  const char* family;
  int64_t E, k, H, I;
};

// mixtral: SiLU-gated; relu2_sigmoid: a plain activation (GEMM1 takes the plain tiles); gpt_oss:
// SwiGLU with biases and interleaved gate/up rows, I 72 below the gated TMA box (128).
constexpr VariantShape kShapes[] = {
    {"mixtral", 8, 2, 264, 136},
    {"relu2_sigmoid", 8, 2, 264, 264},
    {"gpt_oss", 8, 2, 200, 72},
};

TEST(CudaMoEKernelVariants, EveryVariantMatchesTheReferenceOrSaysWhyNot) {
  MG_REQUIRE_GPU();
  const CudaDeviceTraits device = cuda_device_traits(Device::cuda(0));
  std::set<std::string> ran;  // "shape dtype variant" of every case that ran
  int refused = 0;
  uint32_t seed = 9100;
  for (const VariantShape& s : kShapes) {
    const MoENode n = make_moe_node(s.family, seed++, s.E, s.k, s.H, s.I, /*Is=*/40);
    const MoEConfig config = moe_config_from_params(n.node.moe());
    for (const auto& d : cuda_dtypes()) {
      SCOPED_TRACE(testing::dtype_trace(d));
      ExpertsShape shape = local_experts_shape(config, ParallelConfig());
      shape.dtype = d.dtype;
      const CudaMoEProblem problem = CudaMoEProblem::of(shape);
      // The same inputs and reference for every variant.
      constexpr int64_t kTokens[] = {1, 16, 300};
      std::vector<std::vector<Tensor>> inputs;
      std::vector<std::vector<float>> expected;
      for (int64_t M : kTokens) {
        inputs.push_back(rounded_inputs(n, testing::random_tensor({M, s.H}, seed++), d.dtype));
        expected.push_back(reference::moe_forward(config, inputs.back()));
      }
      for (const std::string& variant : every_request()) {
        SCOPED_TRACE(std::string(s.family) + " " + variant);
        const CudaKernelRequest request = parse_cuda_kernel_request(variant);
        const std::string never = check_cuda_kernel_request(problem, device, request);
        if (!never.empty()) {
          // Refused when the op is built, with the heuristics' reason.
          try {
            DeviceOp op(n.node, n.inputs, d.dtype, 256, "cuda_moe:" + variant);
            ADD_FAILURE() << "built although: " << never;
          } catch (const Error& e) {
            EXPECT_TRUE(contains(e.what(), never)) << e.what();
          }
          ++refused;
          continue;
        }
        DeviceOp op(n.node, n.inputs, d.dtype, 256, "cuda_moe:" + variant);
        for (size_t i = 0; i < std::size(kTokens); ++i) {
          const int64_t M = kTokens[i];
          const std::vector<Tensor>& in = inputs[i];
          SCOPED_TRACE("M=" + std::to_string(M));
          std::string now;
          try {
            choose_cuda_kernels(problem, M, device, request);
          } catch (const Error& e) {
            now = e.what();
          }
          if (!now.empty()) {
            try {
              op.run(in);
              ADD_FAILURE() << "ran although: " << now;
            } catch (const Error& e) {
              EXPECT_TRUE(contains(e.what(), now)) << e.what();
            }
            ++refused;
            continue;
          }
          const std::vector<Tensor> out = op.run(in);
          const double error = testing::normalized_error(values(out[0]), expected[i]);
          EXPECT_LE(error, d.tolerance)
              << wrong_rows(values(out[0]), expected[i], s.H) << "; the same run again: "
              << testing::normalized_error(values(op.run(in)[0]), expected[i]);
          ran.insert(fmt::format("{} {} {}", s.family, dtype_name(d.dtype), variant));
        }
      }
    }
  }
  EXPECT_GT(refused, 0);
  // What must have run: the pipelines in every dtype, and on the gated shape every kernel that
  // has a gated tile for GEMM1 and a plain tile for GEMM2 (F32: ffma only).
  for (const auto& d : cuda_dtypes()) {
    const std::string dt(dtype_name(d.dtype));
    for (const char* v : {"decode", "cublas", "grouped"}) {
      EXPECT_TRUE(ran.count(fmt::format("mixtral {} {}", dt, v))) << dt << " " << v;
    }
    if (d.dtype == DType::kF32) {
      EXPECT_TRUE(ran.count("mixtral " + dt + " grouped_ffma+ffma"));
      continue;
    }
    std::vector<std::string> gated = {"mma16", "mma64"}, plain = {"mma16", "mma32", "mma128"};
    if (device.sm90a_kernels) {
      for (const char* k : {"wgmma", "tma"}) {
        gated.push_back(k);
        plain.push_back(k);
      }
    }
    for (const std::string& g1 : gated) {
      for (const std::string& g2 : plain) {
        EXPECT_TRUE(ran.count(fmt::format("mixtral {} grouped_{}+{}", dt, g1, g2)))
            << dt << " " << g1 << "+" << g2;
      }
    }
    for (const std::string& g : plain) {  // a plain activation takes the plain tiles in GEMM1
      EXPECT_TRUE(ran.count(fmt::format("relu2_sigmoid {} grouped_{}+{}", dt, g, g))) << dt << g;
    }
  }
}

// Forcing never falls back: a kernel that cannot run says why, when the op is built or when it
// runs.
TEST(CudaMoEKernelVariants, RefusalsNameTheReason) {
  MG_REQUIRE_GPU();
  const MoENode n = make_moe_node("mixtral", 9300, 8, 2, 264, 136, 40);
  auto build_error = [&](const std::string& backend) {
    try {
      DeviceOp op(n.node, n.inputs, DType::kBF16, 256, backend);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("built");
  };
  EXPECT_TRUE(contains(build_error("cuda_moe:grouped_mma32"), "mma32 has no gated tile"));
  EXPECT_TRUE(contains(build_error("cuda_moe:grouped_ffma"), "ffma runs F32 only"));
  EXPECT_TRUE(contains(build_error("cuda_moe:grouped_mma48"), "unknown CUDA MoE kernel"));
  EXPECT_TRUE(contains(build_error("cuda_grouped:decode"), "not one of this backend's kernels"));
  EXPECT_TRUE(contains(build_error("cuda_cublas:grouped"), "takes no kernel request"));
  const MoENode small = make_moe_node("gpt_oss", 9301, 8, 2, 200, 72, 40);
  try {
    DeviceOp op(small.node, small.inputs, DType::kBF16, 256, "cuda_moe:grouped_tma");
    ADD_FAILURE() << "built";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "boxes do not fit") || contains(e.what(), "sm_90a")) << e.what();
  }
  DeviceOp decode(n.node, n.inputs, DType::kBF16, 256, "cuda_moe:decode");
  const Tensor x = testing::random_tensor({17, 264}, 9302);
  try {
    decode.run(rounded_inputs(n, x, DType::kBF16));
    ADD_FAILURE() << "ran";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "at most 16 tokens")) << e.what();
  }
}

// The modular grouped backend takes the grouped GEMM kernels too.
TEST(CudaMoEKernelVariants, CudaGroupedRunsForcedGemmKernels) {
  MG_REQUIRE_GPU();
  const CudaDeviceTraits device = cuda_device_traits(Device::cuda(0));
  const MoENode n = make_moe_node("mixtral", 9400, 8, 2, 264, 136, 40);
  const MoEConfig config = moe_config_from_params(n.node.moe());
  std::vector<std::string> pairs = {"grouped_mma16", "grouped_mma64+mma32", "grouped_mma64+mma128"};
  if (device.sm90a_kernels) {
    pairs.push_back("grouped_tma");
    pairs.push_back("grouped_wgmma");
  }
  for (const std::string& pair : pairs) {
    DeviceOp op(n.node, n.inputs, DType::kBF16, 256, "cuda_grouped:" + pair);
    const Tensor x = testing::random_tensor({300, 264}, 9401);
    const std::vector<Tensor> in = rounded_inputs(n, x, DType::kBF16);
    EXPECT_LE(testing::normalized_error(values(op.run(in)[0]), reference::moe_forward(config, in)),
              1e-2)
        << pair;
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
