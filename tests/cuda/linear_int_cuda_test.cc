// The weight-only INT4 / INT8 linear on CUDA with packed codes (linear_int_cuda_kernel.cc) against
// the CPU's integer linear (cpu_int_gemm_xwt) on the same dtype-rounded inputs: int4 / uint4 /
// int8 / uint8 (signed codes symmetric, unsigned with zero points or the midpoint), groups of 32,
// 48 (not a power of two), 128 (also a partial last group) and channel-wise, sizes off every
// multiple (out odd, in 2047 on the one-code-at-a-time path), bias and scale, BF16 and F16, rows
// 1, 2, 3 (the GEMV) and 8, 9, 64, 300 (dequantize into the workspace + cuBLASLt). The GPU rounds
// its output to the compute dtype (and, above 4 rows, the weight): the bounds are the CUDA op
// tests' (1e-2 BF16, 2e-3 F16). Then: both paths captured into a CUDA graph replay to the same
// bits; act-order g_idx and F32 activations keep the dequantize-at-build linear and still match;
// the weight-only HF fixtures (AWQ, compressed-tensors int4 / int8, GPTQ act-order) on CUDA
// against the CPU; and a timing of the Qwen3-30B-A3B attention shapes (MG_WNA16_TIMING=1).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <iostream>
#include <random>

#include "framework/compile/compiler.h"
#include "framework/compile/execution_plan.h"
#include "framework/core/int_quant.h"
#include "framework/import/hf_importer.h"
#include "framework/io/npy.h"
#include "framework/runtime/session.h"
#include "tests/cuda/cuda_test_util.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/linear/int_linear_cuda.h"
#include "ops/nn/linear/linear_gemm_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

struct IntWeight {
  Tensor codes;
  WeightQuantization quant;
};

IntWeight random_weight(int64_t out, int64_t in, QuantElement element, int64_t group,
                        uint32_t seed) {
  auto [codes, q] = quantize_int_cpu(testing::random_tensor({out, in}, seed), element, group);
  return {std::move(codes), std::move(q)};
}

std::unique_ptr<OpKernel> make_kernel(const proto::Node& node, const CompileOptions& options,
                                      const IntWeight& w, const Tensor& bias) {
  const int64_t out = w.quant.logical_shape[0], in = w.quant.logical_shape[1];
  const std::vector<std::optional<ValueType>> types = {
      ValueType{DType::kF32, {kTokens, in}},
      ValueType{int_codes_dtype(w.quant.element), {out, in}, w.quant.group, w.quant.element},
      bias.defined() ? std::optional<ValueType>(ValueType{DType::kF32, {out}}) : std::nullopt};
  const std::vector<Tensor> weights = {Tensor(), w.codes, bias};
  const std::vector<WeightQuantization> quant = {{}, w.quant, {}};
  const KernelContext ctx{node, options, types, weights, quant};
  std::unique_ptr<OpKernel> kernel = OpRegistry::global().find("linear")->create_kernel(ctx);
  if (options.device.is_cuda()) synchronize_device(options.device);  // the build's copies
  return kernel;
}

proto::Node linear_node(bool bias, float scale) {
  proto::Node node;
  node.set_name("proj");
  node.set_op("linear");
  node.mutable_linear()->set_has_bias(bias);
  if (scale != 1.0f) node.mutable_linear()->set_scale(scale);
  return node;
}

std::vector<float> run_cpu(OpKernel& kernel, const Tensor& x, const Tensor& bias, int64_t out) {
  Tensor y = Tensor::empty_cpu(DType::kF32, {x.dim(0), out});
  std::vector<uint8_t> ws(kernel.workspace_bytes(x.dim(0)));
  ExecContext ec;
  ec.workspace = ws.data();
  ec.workspace_bytes = ws.size();
  const std::vector<Tensor> in = {x, Tensor(), bias};
  kernel.run(ec, in, std::span<const Tensor>(&y, 1));
  return {y.data<float>(), y.data<float>() + y.numel()};
}

// One GPU call of `kernel` on x (host F32, cast to `dtype`) with exactly workspace_bytes(rows).
// graph: captured into a CUDA graph and replayed twice instead of run directly.
std::vector<float> run_gpu(OpKernel& kernel, const Tensor& x, int64_t out, DType dtype,
                           bool graph = false) {
  const std::unique_ptr<Stream> stream = make_stream(Device::cuda(0));
  const Tensor xd = testing::upload(x, dtype, stream.get());
  Tensor y = empty_tensor(Device::cuda(0), dtype, {x.dim(0), out}, stream.get());
  const size_t ws_bytes = kernel.workspace_bytes(x.dim(0));
  Tensor ws = empty_tensor(Device::cuda(0), DType::kU8,
                           {static_cast<int64_t>(std::max<size_t>(ws_bytes, 1))}, stream.get());
  ExecContext ec;
  ec.device = Device::cuda(0);
  ec.stream = stream.get();
  ec.workspace = ws.raw();
  ec.workspace_bytes = ws_bytes;
  const std::vector<Tensor> in = {xd, Tensor(), Tensor()};
  if (!graph) {
    kernel.run(ec, in, std::span<const Tensor>(&y, 1));
  } else {
    EXPECT_TRUE(kernel.graph_capturable());
    const cudaStream_t s = cuda::native(stream.get());
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    MG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    kernel.run(ec, in, std::span<const Tensor>(&y, 1));
    MG_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    MG_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    MG_CUDA_CHECK(cudaGraphLaunch(exec, s));
    MG_CUDA_CHECK(cudaGraphLaunch(exec, s));
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MG_CUDA_CHECK(cudaGraphDestroy(g));
  }
  const Tensor host = testing::download_f32(y, stream.get());
  return {host.data<float>(), host.data<float>() + host.numel()};
}

double tolerance_of(DType dtype) {
  return dtype == DType::kBF16 ? 1e-2 : 2e-3;
}

// ---- No GPU needed: the device layout and the refusals ---------------------------------------

// The layout the kernels read, decoded on the host exactly as they do (the float with bits
// 0x4B000000 | u minus 2^23 + z, times s), equals the CPU's dequantized weight bit for bit.
TEST(CudaLinearInt, DeviceLayoutDecodesToTheCpuWeights) {
  struct Case {
    QuantElement element;
    int64_t group;
    bool signed_zero;  // a signed element with zero points (the CPU subtracts them too)
  };
  const Case cases[] = {{QuantElement::kInt4, 32, false}, {QuantElement::kUInt4, 128, false},
                        {QuantElement::kInt8, -1, false}, {QuantElement::kUInt8, 16, false},
                        {QuantElement::kInt8, 32, true},  {QuantElement::kInt4, 48, true}};
  uint32_t seed = 1100;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} group {}{}", quant_element_name(c.element), c.group,
                             c.signed_zero ? " signed zeros" : ""));
    const int64_t out = 19, in = 97;  // odd in: the last 4-bit byte half empty
    IntWeight w = random_weight(out, in, c.element, c.group, seed += 3);
    if (c.signed_zero) {
      w.quant.zero_point = Tensor::empty_cpu(DType::kF32, w.quant.scale.shape());
      for (int64_t i = 0; i < w.quant.zero_point.numel(); ++i) {
        w.quant.zero_point.data<float>()[i] = static_cast<float>(i % 5) - 2.0f;
      }
    }
    const IntLinearCudaLayout layout = int_linear_cuda_layout(w.codes, w.quant);
    const Tensor want = dequantize_cpu(w.codes, w.quant);
    const int64_t groups = w.quant.scale.dim(1), gc = w.quant.group.cols_in(in);
    const int64_t row_bytes = layout.codes.dim(1);
    const auto* codes = static_cast<const uint8_t*>(layout.codes.raw());
    const float* params = layout.params.data<float>();
    const bool four = quant_element_bits(c.element) == 4;
    int64_t mismatches = 0;
    for (int64_t r = 0; r < out; ++r) {
      for (int64_t k = 0; k < in; ++k) {
        const uint8_t byte = codes[r * row_bytes + (four ? k / 2 : k)];
        const uint32_t u = four ? (byte >> ((k & 1) * 4)) & 0xFu : byte;
        const float* sz = params + 2 * (r * groups + k / gc);
        const float got = (std::bit_cast<float>(0x4B000000u | u) - sz[1]) * sz[0];
        mismatches += got != want.data<float>()[r * in + k];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(CudaLinearInt, RefusalsNameTheReason) {
  const auto refusal = [](const IntWeight& w, DType dtype) {
    const int64_t out = w.quant.logical_shape[0], in = w.quant.logical_shape[1];
    const proto::Node node = linear_node(false, 1.0f);
    CompileOptions options;
    options.device = Device::cuda(0);
    options.activation_dtype = dtype;
    const std::vector<std::optional<ValueType>> types = {
        ValueType{DType::kF32, {kTokens, in}},
        ValueType{int_codes_dtype(w.quant.element), {out, in}, w.quant.group, w.quant.element},
        std::nullopt};
    const std::vector<Tensor> weights = {Tensor(), w.codes, Tensor()};
    const std::vector<WeightQuantization> quant = {{}, w.quant, {}};
    const KernelContext ctx{node, options, types, weights, quant};
    return linear_int_cuda_refusal(ctx, w.quant);
  };
  const IntWeight plain = random_weight(40, 256, QuantElement::kUInt4, 128, 1150);
  EXPECT_EQ(refusal(plain, DType::kBF16), "");
  EXPECT_EQ(refusal(plain, DType::kF16), "");
  EXPECT_THAT(refusal(plain, DType::kF32), ::testing::HasSubstr("BF16 and F16 activations"));
  IntWeight act = plain;
  act.quant.g_idx = Tensor::empty_cpu(DType::kI32, {1, 256});
  for (int i = 0; i < 256; ++i) act.quant.g_idx.data<int32_t>()[i] = (i * 7) % 2;
  EXPECT_THAT(refusal(act, DType::kBF16), ::testing::HasSubstr("act-order g_idx"));
  IntWeight half_zero = random_weight(40, 256, QuantElement::kUInt4, 128, 1151);
  half_zero.quant.zero_point = Tensor::empty_cpu(DType::kF32, half_zero.quant.scale.shape());
  for (int64_t i = 0; i < half_zero.quant.zero_point.numel(); ++i) {
    half_zero.quant.zero_point.data<float>()[i] = i == 5 ? 7.5f : 8.0f;
  }
  EXPECT_THAT(refusal(half_zero, DType::kBF16),
              ::testing::HasSubstr("zero point 7.5 is not an integer (group 1 of row 2)"));
}

// ---- On the GPU ------------------------------------------------------------------------------

constexpr int64_t kRowCounts[] = {1, 2, 3, 8, 9, 64, 300};

TEST(CudaLinearInt, PackedCodesMatchTheCpuIntLinear) {
  MG_REQUIRE_GPU();
  struct Case {
    QuantElement element;
    int64_t out, in, group;
    bool bias;
    float scale;
    bool midpoint;  // unsigned codes with no zero points: the midpoint 2^(bits-1)
    bool vectorized;
  };
  const Case cases[] = {
      {QuantElement::kInt4, 333, 160, 32, true, 0.5f, false, true},
      {QuantElement::kUInt4, 1001, 384, 128, false, 1.0f, false, true},
      {QuantElement::kUInt4, 77, 160, 128, true, 1.0f, false, true},   // a partial last group
      {QuantElement::kUInt4, 65, 96, 48, false, 2.0f, true, true},     // group 48: a division
      {QuantElement::kInt4, 257, 2047, -1, true, 1.0f, false, false},  // odd in: one at a time
      {QuantElement::kInt4, 31, 48, 16, false, 1.0f, false, false},    // in % 32 != 0
      {QuantElement::kInt8, 1001, 160, 32, false, 1.0f, false, true},
      {QuantElement::kUInt8, 129, 384, 128, true, 0.25f, false, true},
      {QuantElement::kUInt8, 45, 2047, -1, false, 1.0f, false, false},
      {QuantElement::kInt8, 300, 512, -1, true, 1.0f, false, true},
  };
  uint32_t seed = 1200;
  for (const Case& c : cases) {
    IntWeight w = random_weight(c.out, c.in, c.element, c.group, seed += 7);
    if (c.midpoint) w.quant.zero_point = Tensor();
    const Tensor bias =
        c.bias ? testing::round_through(testing::random_tensor({c.out}, seed + 1), DType::kBF16)
               : Tensor();
    const proto::Node node = linear_node(c.bias, c.scale);
    const auto cpu = make_kernel(node, CompileOptions{}, w, bias);
    for (const DType dtype : {DType::kBF16, DType::kF16}) {
      CompileOptions gpu_options;
      gpu_options.device = Device::cuda(0);
      gpu_options.activation_dtype = dtype;
      const auto gpu = make_kernel(node, gpu_options, w, bias);
      const std::string plan = gpu->describe();
      EXPECT_NE(plan.find(fmt::format("cuda {} weight-only", quant_element_name(c.element))),
                std::string::npos)
          << plan;
      EXPECT_NE(plan.find(c.vectorized ? "16-byte loads" : "one code at a time"), std::string::npos)
          << plan;
      EXPECT_EQ(gpu->workspace_bytes(cuda::kIntGemvMaxRows), 0u);
      for (const int64_t rows : kRowCounts) {
        SCOPED_TRACE(fmt::format("{} out={} in={} group={}{} {} rows={}",
                                 quant_element_name(c.element), c.out, c.in, c.group,
                                 c.midpoint ? " midpoint" : "", dtype_name(dtype), rows));
        const Tensor x = testing::round_through(
            testing::random_tensor({rows, c.in}, seed + 2, -2.0f, 2.0f), dtype);
        const std::vector<float> ref = run_cpu(*cpu, x, bias, c.out);
        const std::vector<float> got = run_gpu(*gpu, x, c.out, dtype);
        const double err = testing::normalized_error(got, ref);
        std::cout << fmt::format("[metric] int linear {} g{} {}x{} {} rows {}: vs cpu {:.3g}\n",
                                 quant_element_name(c.element), c.group, c.out, c.in,
                                 dtype_name(dtype), rows, err);
        EXPECT_LE(err, tolerance_of(dtype));
      }
    }
  }
}

TEST(CudaLinearInt, BothPathsReplayFromACudaGraph) {
  MG_REQUIRE_GPU();
  const IntWeight w = random_weight(515, 256, QuantElement::kUInt4, 128, 1300);
  const Tensor bias = testing::round_through(testing::random_tensor({515}, 1301), DType::kBF16);
  const proto::Node node = linear_node(true, 0.5f);
  CompileOptions gpu_options;
  gpu_options.device = Device::cuda(0);
  const auto gpu = make_kernel(node, gpu_options, w, bias);
  const auto cpu = make_kernel(node, CompileOptions{}, w, bias);
  for (const int64_t rows : {int64_t{4}, int64_t{40}}) {
    SCOPED_TRACE(fmt::format("rows={}", rows));
    const Tensor x = testing::round_through(testing::random_tensor({rows, 256}, 1302, -2.0f, 2.0f),
                                            DType::kBF16);
    const std::vector<float> eager = run_gpu(*gpu, x, 515, DType::kBF16);
    const std::vector<float> replayed = run_gpu(*gpu, x, 515, DType::kBF16, /*graph=*/true);
    EXPECT_EQ(eager, replayed);
    EXPECT_LE(testing::normalized_error(replayed, run_cpu(*cpu, x, bias, 515)), 1e-2);
  }
}

TEST(CudaLinearInt, ActOrderAndF32KeepTheDequantizedLinear) {
  MG_REQUIRE_GPU();
  // Act-order: a shuffled g_idx (groups are not runs of columns).
  IntWeight act = random_weight(97, 256, QuantElement::kUInt4, 32, 1400);
  act.quant.g_idx = Tensor::empty_cpu(DType::kI32, {1, 256});
  std::vector<int32_t> g(256);
  for (int i = 0; i < 256; ++i) g[i] = i / 32;
  std::shuffle(g.begin(), g.end(), std::mt19937(1401));
  std::copy(g.begin(), g.end(), act.quant.g_idx.data<int32_t>());
  const IntWeight plain = random_weight(97, 256, QuantElement::kInt4, 32, 1402);
  struct Case {
    const char* name;
    const IntWeight* w;
    DType dtype;
  };
  for (const Case& c : {Case{"act-order BF16", &act, DType::kBF16},
                        Case{"int4 F32 activations", &plain, DType::kF32}}) {
    SCOPED_TRACE(c.name);
    const proto::Node node = linear_node(false, 1.0f);
    CompileOptions gpu_options;
    gpu_options.device = Device::cuda(0);
    gpu_options.activation_dtype = c.dtype;
    const auto gpu = make_kernel(node, gpu_options, *c.w, Tensor());
    EXPECT_EQ(gpu->describe().find("weight-only"), std::string::npos) << gpu->describe();
    const auto cpu = make_kernel(node, CompileOptions{}, *c.w, Tensor());
    for (const int64_t rows : {int64_t{1}, int64_t{20}}) {
      const Tensor x =
          testing::round_through(testing::random_tensor({rows, 256}, 1403, -2.0f, 2.0f), c.dtype);
      EXPECT_LE(
          testing::normalized_error(run_gpu(*gpu, x, 97, c.dtype), run_cpu(*cpu, x, Tensor(), 97)),
          c.dtype == DType::kF32 ? 1e-5 : 1e-2);
    }
  }
}

// ---- The weight-only HF fixtures (attention and dense MLP linears quantized) on CUDA ----------

// The prompt's logits, then three one-token decode steps' (the GEMV path), concatenated.
std::vector<float> prompt_and_decode(Session& s) {
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 23, 64, 8, 77, 3, 120, 56};
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& p = s.forward(prompt, pos);
  std::vector<float> out(p.data<float>(), p.data<float>() + p.numel());
  for (int step = 0; step < 3; ++step) {
    const int32_t id = prompt[step] + 1, at = static_cast<int32_t>(prompt.size()) + step;
    const Tensor& d = s.forward(std::span(&id, 1), std::span(&at, 1));
    out.insert(out.end(), d.data<float>(), d.data<float>() + d.numel());
  }
  return out;
}

std::unique_ptr<Session> open_fixture(const std::filesystem::path& hf, Device device) {
  CompileOptions c;
  c.device = device;
  c.max_tokens = 64;
  c.max_seq_len = 64;
  return std::make_unique<Session>(
      compile_model(import_hf_checkpoint(hf).model, hf / "model.pbtxt", c), SessionOptions{});
}

TEST(CudaLinearInt, WeightOnlyFixturesMatchTheCpu) {
  MG_REQUIRE_GPU();
  struct Fixture {
    const char* name;
    const char* linear;  // what the plan says of the quantized dense linears
  };
  const Fixture fixtures[] = {
      {"qwen3_moe_awq", "cuda uint4 weight-only -> BF16 (group 16, zero points"},
      {"mixtral_ct_w4a16", "cuda uint4 weight-only -> BF16 (group 16;"},  // midpoint zeros
      {"mixtral_ct_w8a16", "cuda uint8 weight-only -> BF16 (per channel, zero points"},
      {"qwen3_moe_gptq", nullptr},  // act-order: dequantized at build
  };
  for (const Fixture& f : fixtures) {
    SCOPED_TRACE(f.name);
    const std::filesystem::path hf =
        std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf" / f.name;
    auto cpu = open_fixture(hf, Device::cpu());
    auto gpu = open_fixture(hf, Device::cuda(0));
    const std::string plan = gpu->plan().describe();
    if (f.linear != nullptr) {
      EXPECT_NE(plan.find(f.linear), std::string::npos) << plan;
    } else {
      EXPECT_EQ(plan.find("weight-only ->"), std::string::npos) << plan;
    }
    const std::vector<float> ref = prompt_and_decode(*cpu);
    const std::vector<float> got = prompt_and_decode(*gpu);
    const double err = testing::normalized_error(got, ref);
    std::cout << fmt::format("[metric] int linear fixture {} on cuda: logits vs cpu {:.3g}\n",
                             f.name, err);
    EXPECT_LT(err, 0.05);  // BF16 activations against F32, as the other whole-model tests
  }
}

// ---- Timing (MG_WNA16_TIMING=1; prints, asserts nothing) ----------------------------------

// The Qwen3-30B-A3B attention projections at 1..4 rows: the int4 group-128 GEMV (packed codes)
// against the BF16 linear on the same shape (GemmXwt as the plain linear builds it: its GEMV up to
// 2 rows, cuBLASLt above) and the floor of the packed bytes (codes + 8-byte {s, z} per group)
// at 3.0 TB/s. Each timed as a replayed CUDA graph of 20 launches. Run on an H100 with
//   MG_WNA16_TIMING=1 build/tests/mg_cuda_tests --gtest_filter='CudaLinearInt.Timing*'
TEST(CudaLinearInt, TimingQwen3AttentionShapes) {
  MG_REQUIRE_GPU();
  if (std::getenv("MG_WNA16_TIMING") == nullptr) GTEST_SKIP() << "set MG_WNA16_TIMING=1 to time";
  constexpr int kLaunches = 20;
  const std::unique_ptr<Stream> stream = make_stream(Device::cuda(0));
  const cudaStream_t s = cuda::native(stream.get());
  const auto time_us = [&](const std::function<void()>& launch) {
    launch();
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    MG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) launch();
    MG_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    MG_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    const double ms = testing::median_graph_replay_ms(exec, s, 20);
    MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MG_CUDA_CHECK(cudaGraphDestroy(g));
    return 1000.0 * ms / kLaunches;
  };
  struct Shape2 {
    const char* name;
    int64_t out, in;
  };
  for (const Shape2& sh : {Shape2{"qkv", 5120, 2048}, Shape2{"o", 2048, 4096}}) {
    const IntWeight w = random_weight(sh.out, sh.in, QuantElement::kInt4, 128, 1500);
    CompileOptions gpu_options;
    gpu_options.device = Device::cuda(0);
    const auto int4 = make_kernel(linear_node(false, 1.0f), gpu_options, w, Tensor());
    const Tensor wbf =
        testing::upload(dequantize_cpu(w.codes, w.quant), DType::kBF16, stream.get());
    const cuda::GemmXwt bf16(DType::kBF16, sh.in, sh.out, nullptr, 0);
    Tensor gemm_ws =
        empty_tensor(Device::cuda(0), DType::kU8,
                     {static_cast<int64_t>(cuda::GemmXwt::kWorkspaceBytes)}, stream.get());
    const double packed =
        static_cast<double>(w.codes.numel()) + 8.0 * static_cast<double>(w.quant.scale.numel());
    for (int64_t rows = 1; rows <= cuda::kIntGemvMaxRows; ++rows) {
      const Tensor x = testing::upload(testing::random_tensor({rows, sh.in}, 1501, -1.0f, 1.0f),
                                       DType::kBF16, stream.get());
      Tensor y = empty_tensor(Device::cuda(0), DType::kBF16, {rows, sh.out}, stream.get());
      ExecContext ec;
      ec.device = Device::cuda(0);
      ec.stream = stream.get();
      const std::vector<Tensor> in = {x, Tensor(), Tensor()};
      const double int_us = time_us([&] { int4->run(ec, in, std::span<const Tensor>(&y, 1)); });
      const double bf16_us = time_us([&] {
        bf16.run(x.raw(), rows, wbf.raw(), y.raw(), 1.0f, gemm_ws.raw(),
                 cuda::GemmXwt::kWorkspaceBytes, s);
      });
      const double floor_us = packed / 3.0e6;
      std::cout << fmt::format(
          "int linear {} {}x{} rows {}: int4 g128 GEMV {:6.2f} us, bf16 ({}) {:6.2f} us, "
          "packed floor {:5.2f} us ({:3.0f}% of it), bf16 floor {:5.2f} us\n",
          sh.name, sh.out, sh.in, rows, int_us, bf16.describe(), bf16_us, floor_us,
          100.0 * floor_us / int_us, 2.0 * sh.out * sh.in / 3.0e6);
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
