// The FP8 linear on CUDA, W8A8 (cuBLASLt FP8 with VEC128 scales, linear_fp8_cuda_kernel.cc),
// against the CPU's W8A8 linear on the same BF16-rounded inputs: both quantize x to the same codes
// and scales (quantize_fp8_e4m3_group / the static clamp, bit for bit), so what is left is the
// fp32 accumulation order and the GPU's BF16 output (2^-9 relative per element, about 2e-3
// normalised): bound 5e-3, and at most a quarter of how far the W8A16 result is (so x was
// quantized). Every weight scale layout (128 x 128 blocks, per channel, per tensor), activation
// groups of 128 channels, per token and static, 1, 7 and 300 tokens, bias and scale; sizes
// cuBLASLt refuses (K not a multiple of 128, N not of 16) run W8A16 and say so.
#include <gtest/gtest.h>

#include "framework/core/fp8.h"
#include "tests/cuda/cuda_test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

struct Fp8Weight {
  Tensor codes;
  WeightQuantization quant;
};

Fp8Weight random_weight(int64_t out, int64_t in, GroupShape group, uint32_t seed) {
  Fp8Weight w;
  const Tensor v = testing::random_tensor({out, in}, seed, -kFp8E4M3Max, kFp8E4M3Max);
  w.codes = Tensor::empty_cpu(DType::kF8E4M3, {out, in});
  for (int64_t i = 0; i < v.numel(); ++i) {
    fp8_codes(w.codes)[i] = float_to_fp8_e4m3(v.data<float>()[i]);
  }
  const float base = 2.0f / (kFp8E4M3Max * std::sqrt(static_cast<float>(in)));
  w.quant.group = group;
  w.quant.scale =
      testing::random_tensor(scale_shape_for({out, in}, group), seed + 1, 0.5f * base, base);
  return w;
}

std::unique_ptr<OpKernel> make_kernel(const proto::Node& node, const CompileOptions& options,
                                      const Fp8Weight& w, const Tensor& bias) {
  const int64_t out = w.codes.dim(0), in = w.codes.dim(1);
  const std::vector<std::optional<ValueType>> types = {
      ValueType{DType::kF32, {kTokens, in}}, ValueType{DType::kF8E4M3, {out, in}, w.quant.group},
      bias.defined() ? std::optional<ValueType>(ValueType{DType::kF32, {out}}) : std::nullopt};
  const std::vector<Tensor> weights = {Tensor(), w.codes, bias};
  const std::vector<WeightQuantization> quant = {{}, w.quant, {}};
  const KernelContext ctx{node, options, types, weights, quant};
  std::unique_ptr<OpKernel> kernel = OpRegistry::global().find("linear")->create_kernel(ctx);
  synchronize_device(options.device);  // the build's copies, before a run's stream reads them
  return kernel;
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

std::vector<float> run_gpu(OpKernel& kernel, const Tensor& x, int64_t out) {
  const std::unique_ptr<Stream> stream = make_stream(Device::cuda(0));
  const Tensor xd = testing::upload(x, DType::kBF16, stream.get());
  Tensor y = empty_tensor(Device::cuda(0), DType::kBF16, {x.dim(0), out}, stream.get());
  const size_t ws_bytes = kernel.workspace_bytes(x.dim(0));
  Tensor ws = empty_tensor(Device::cuda(0), DType::kU8,
                           {static_cast<int64_t>(std::max<size_t>(ws_bytes, 1))}, stream.get());
  ExecContext ec;
  ec.device = Device::cuda(0);
  ec.stream = stream.get();
  ec.workspace = ws.raw();
  ec.workspace_bytes = ws_bytes;
  const std::vector<Tensor> in = {xd, Tensor(), Tensor()};
  kernel.run(ec, in, std::span<const Tensor>(&y, 1));
  const Tensor host = testing::download_f32(y, stream.get());
  return {host.data<float>(), host.data<float>() + host.numel()};
}

struct Activation {
  const char* name;
  ActivationQuant kind;
  int64_t group;       // kDynamic
  float static_scale;  // kStatic
};

TEST(CudaLinearFp8, W8A8MatchesTheCpuW8A8) {
  MG_REQUIRE_GPU();
  struct Case {
    int64_t out, in;
    GroupShape group;
    bool bias;
    float scale;
  };
  const Case cases[] = {
      {384, 256, GroupShape::block(128, 128), false, 1.0f},
      {272, 384, GroupShape::block(128, 128), true, 0.5f},  // N = 272: a partial scale block
      {96, 128, GroupShape::per_channel(), true, 1.0f},
      {48, 256, GroupShape::per_tensor(), false, 2.0f},
  };
  // |x| <= 2: a static scale of 1.5 / 448 saturates the top quarter.
  const Activation acts[] = {{"group 128", ActivationQuant::kDynamic, 128, 0.0f},
                             {"per token", ActivationQuant::kDynamic, -1, 0.0f},
                             {"static", ActivationQuant::kStatic, 0, 1.5f / kFp8E4M3Max}};
  uint32_t seed = 700;
  for (const Case& c : cases) {
    for (const Activation& a : acts) {
      Fp8Weight w = random_weight(c.out, c.in, c.group, seed += 5);
      w.quant.activation = a.kind;
      w.quant.activation_group = a.group;
      if (a.kind == ActivationQuant::kStatic) {
        w.quant.activation_scale = Tensor::empty_cpu(DType::kF32, {1});
        w.quant.activation_scale.data<float>()[0] = a.static_scale;
      }
      const Tensor bias =
          c.bias ? testing::round_through(testing::random_tensor({c.out}, seed + 2), DType::kBF16)
                 : Tensor();
      proto::Node node;
      node.set_name("proj");
      node.set_op("linear");
      node.mutable_linear()->set_has_bias(c.bias);
      if (c.scale != 1.0f) node.mutable_linear()->set_scale(c.scale);
      CompileOptions cpu_options;
      CompileOptions w8a16_options;
      w8a16_options.quantize_activations = false;
      CompileOptions gpu_options;
      gpu_options.device = Device::cuda(0);
      const auto cpu = make_kernel(node, cpu_options, w, bias);
      const auto cpu16 = make_kernel(node, w8a16_options, w, bias);
      const auto gpu = make_kernel(node, gpu_options, w, bias);
      EXPECT_NE(gpu->describe().find("cublasLt FP8"), std::string::npos) << gpu->describe();
      for (const int64_t tokens : {1, 7, 300}) {
        SCOPED_TRACE(fmt::format("out={} in={} weight {} activations {} T={}", c.out, c.in,
                                 c.group.str(), a.name, tokens));
        const Tensor x = testing::round_through(
            testing::random_tensor({tokens, c.in}, seed + 3, -2.0f, 2.0f), DType::kBF16);
        const std::vector<float> ref = run_cpu(*cpu, x, bias, c.out);
        const std::vector<float> got = run_gpu(*gpu, x, c.out);
        const double err = testing::normalized_error(got, ref);
        const double w8a16 = testing::normalized_error(got, run_cpu(*cpu16, x, bias, c.out));
        std::cout << fmt::format(
            "[metric] fp8 linear {} {} T={}: vs cpu W8A8 {:.3g}, vs W8A16 "
            "{:.3g}\n",
            c.group.str(), a.name, tokens, err, w8a16);
        EXPECT_LE(err, 5e-3);
        EXPECT_LE(err, 0.25 * w8a16);
      }
    }
  }
}

TEST(CudaLinearFp8, SizesCublasLtRefusesRunW8A16) {
  MG_REQUIRE_GPU();
  // K 200 (not a multiple of 128), N 40 (not of 16).
  for (const auto& [out, in] : {std::pair<int64_t, int64_t>{64, 200}, {40, 128}}) {
    Fp8Weight w = random_weight(out, in, GroupShape::per_channel(), 900);
    w.quant.activation = ActivationQuant::kDynamic;
    w.quant.activation_group = -1;
    proto::Node node;
    node.set_name("proj");
    node.set_op("linear");
    node.mutable_linear();
    CompileOptions gpu_options;
    gpu_options.device = Device::cuda(0);
    const auto gpu = make_kernel(node, gpu_options, w, Tensor());
    EXPECT_NE(gpu->describe().find("W8A16"), std::string::npos) << gpu->describe();
    CompileOptions w8a16_options;
    w8a16_options.quantize_activations = false;
    const auto cpu16 = make_kernel(node, w8a16_options, w, Tensor());
    const Tensor x =
        testing::round_through(testing::random_tensor({5, in}, 901, -2.0f, 2.0f), DType::kBF16);
    EXPECT_LE(testing::normalized_error(run_gpu(*gpu, x, out), run_cpu(*cpu16, x, Tensor(), out)),
              1e-2);
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
