// The FP8 linear on the CPU against an fp64 reference on the dequantized weight: block, per-row and
// per-tensor scales over sizes that are not multiples of the block, one token and many, bias and
// scale, W8A16 and W8A8 (x quantized per token (group) exactly as quantize_fp8_e4m3_group says).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "framework/core/fp8.h"
#include "framework/core/thread_pool.h"
#include "framework/op/op_registry.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

struct Fp8Linear {
  Tensor codes;
  WeightQuantization quant;
};

Fp8Linear random_fp8_linear(int64_t out, int64_t in, GroupShape group, uint32_t seed) {
  Fp8Linear w;
  const Tensor v = testing::random_tensor({out, in}, seed, -kFp8E4M3Max, kFp8E4M3Max);
  w.codes = Tensor::empty_cpu(DType::kF8E4M3, {out, in});
  for (int64_t i = 0; i < v.numel(); ++i)
    fp8_codes(w.codes)[i] = float_to_fp8_e4m3(v.data<float>()[i]);
  const float base = 2.0f / (kFp8E4M3Max * std::sqrt(static_cast<float>(in)));
  w.quant.group = group;
  w.quant.scale =
      testing::random_tensor(scale_shape_for({out, in}, group), seed + 1, 0.5f * base, base);
  return w;
}

// y = (xq W^T + b) * scale in fp64, W dequantized element by element.
std::vector<float> reference(const std::vector<float>& x, int64_t tokens, const Fp8Linear& w,
                             const Tensor& bias, float scale, std::optional<int64_t> act_group) {
  const int64_t out = w.codes.dim(0), in = w.codes.dim(1);
  const Tensor deq = dequantize_cpu(w.codes, w.quant);
  std::vector<float> xq = x;
  if (act_group) {
    const int64_t g = *act_group < 0 ? in : *act_group;
    std::vector<uint8_t> codes(static_cast<size_t>(g));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c0 = 0; c0 < in; c0 += g) {
        const int64_t len = std::min(g, in - c0);
        const float s = quantize_fp8_e4m3_group(x.data() + t * in + c0, len, codes.data());
        for (int64_t c = 0; c < len; ++c) xq[t * in + c0 + c] = fp8_e4m3_to_float(codes[c]) * s;
      }
    }
  }
  std::vector<float> y(static_cast<size_t>(tokens * out));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias.defined() ? bias.data<float>()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(xq[t * in + i]) * deq.data<float>()[o * in + i];
      }
      y[t * out + o] = static_cast<float>(acc * scale);
    }
  }
  return y;
}

TEST(LinearFp8, MatchesTheDequantizedReference) {
  const OpDef* def = OpRegistry::global().find("linear");
  ASSERT_NE(def, nullptr);
  ThreadPool pool(3);
  struct Case {
    int64_t out, in;
    GroupShape group;
    std::optional<int64_t> act_group;  // nullopt: W8A16
    bool bias;
    float scale;
  };
  const Case cases[] = {
      {300, 200, GroupShape::block(128, 128), 128, false, 1.0f},
      {300, 200, GroupShape::block(128, 128), std::nullopt, true, 0.5f},
      {97, 131, GroupShape::per_channel(), -1, true, 1.0f},
      {1, 7, GroupShape::per_tensor(), -1, false, 2.0f},
      {33, 48, GroupShape::block(16, 32), 32, false, 1.0f},
  };
  uint32_t seed = 50;
  for (const Case& c : cases) {
    for (const int64_t tokens : {1, 5, 70}) {
      SCOPED_TRACE(fmt::format("out={} in={} group={} act={} T={}", c.out, c.in, c.group.str(),
                               c.act_group ? std::to_string(*c.act_group) : "none", tokens));
      Fp8Linear w = random_fp8_linear(c.out, c.in, c.group, seed += 3);
      w.quant.activation = c.act_group ? ActivationQuant::kDynamic : ActivationQuant::kNone;
      w.quant.activation_group = c.act_group.value_or(-1);
      const Tensor bias = c.bias ? testing::random_tensor({c.out}, seed + 2) : Tensor();
      proto::Node node;
      node.set_name("proj");
      node.set_op("linear");
      node.mutable_linear()->set_has_bias(c.bias);
      if (c.scale != 1.0f) node.mutable_linear()->set_scale(c.scale);
      CompileOptions options;
      options.quantize_dense_activations = true;
      const std::vector<std::optional<ValueType>> types = {
          ValueType{DType::kF32, {kTokens, c.in}},
          ValueType{DType::kF8E4M3, {c.out, c.in}, c.group},
          c.bias ? std::optional<ValueType>(ValueType{DType::kF32, {c.out}}) : std::nullopt};
      const std::vector<Tensor> weights = {Tensor(), w.codes, bias};
      const std::vector<WeightQuantization> quant = {{}, w.quant, {}};
      const KernelContext ctx{node, options, types, weights, quant};
      const std::unique_ptr<OpKernel> kernel = def->create_kernel(ctx);

      const std::vector<float> x = testing::random_floats(tokens * c.in, seed + 1, -2.0f, 2.0f);
      Tensor xt = Tensor::empty_cpu(DType::kF32, {tokens, c.in});
      std::copy(x.begin(), x.end(), xt.data<float>());
      Tensor y = Tensor::empty_cpu(DType::kF32, {tokens, c.out});
      std::vector<uint8_t> ws(kernel->workspace_bytes(tokens));
      ExecContext ec;
      ec.pool = &pool;
      ec.workspace = ws.data();
      ec.workspace_bytes = ws.size();
      const std::vector<Tensor> in = {xt, Tensor(), bias};
      kernel->run(ec, in, std::span<const Tensor>(&y, 1));
      const std::vector<float> got(y.data<float>(), y.data<float>() + y.numel());
      EXPECT_LE(testing::normalized_error(got, reference(x, tokens, w, bias, c.scale, c.act_group)),
                1e-5);
      // Quantizing x matters: the other mode's reference is measurably off.
      EXPECT_GT(testing::normalized_error(
                    got, reference(x, tokens, w, bias, c.scale,
                                   c.act_group ? std::nullopt : std::optional<int64_t>(128))),
                1e-4);
    }
  }
}

// Static activation scales (compressed-tensors' input_scale): x quantized with the fixed scale,
// values past 448 * scale saturated to +-448 codes (never NaN); a stacked scale tensor [n] uses its
// largest entry.
TEST(LinearFp8, StaticActivationScaleQuantizesWithTheFixedScaleAndClamps) {
  const OpDef* def = OpRegistry::global().find("linear");
  ASSERT_NE(def, nullptr);
  const int64_t out = 33, in = 48, tokens = 7;
  Fp8Linear w = random_fp8_linear(out, in, GroupShape::per_channel(), 90);
  // |x| up to 2 with scale 1 / 448 (largest part): everything past 1 saturates.
  const float s = 1.0f / kFp8E4M3Max;
  w.quant.activation = ActivationQuant::kStatic;
  w.quant.activation_scale = Tensor::empty_cpu(DType::kF32, {3});
  w.quant.activation_scale.data<float>()[0] = 0.25f * s;
  w.quant.activation_scale.data<float>()[1] = s;
  w.quant.activation_scale.data<float>()[2] = 0.5f * s;
  proto::Node node;
  node.set_name("proj");
  node.set_op("linear");
  CompileOptions options;
  const std::vector<std::optional<ValueType>> types = {
      ValueType{DType::kF32, {kTokens, in}},
      ValueType{DType::kF8E4M3, {out, in}, GroupShape::per_channel()}, std::nullopt};
  const std::vector<Tensor> weights = {Tensor(), w.codes, Tensor()};
  const std::vector<WeightQuantization> quant = {{}, w.quant, {}};
  const KernelContext ctx{node, options, types, weights, quant};
  const std::unique_ptr<OpKernel> kernel = def->create_kernel(ctx);
  EXPECT_NE(kernel->describe().find("static scale"), std::string::npos) << kernel->describe();

  const std::vector<float> x = testing::random_floats(tokens * in, 91, -2.0f, 2.0f);
  Tensor xt = Tensor::empty_cpu(DType::kF32, {tokens, in});
  std::copy(x.begin(), x.end(), xt.data<float>());
  Tensor y = Tensor::empty_cpu(DType::kF32, {tokens, out});
  std::vector<uint8_t> ws(kernel->workspace_bytes(tokens));
  ExecContext ec;
  ec.workspace = ws.data();
  ec.workspace_bytes = ws.size();
  const std::vector<Tensor> ins = {xt, Tensor(), Tensor()};
  kernel->run(ec, ins, std::span<const Tensor>(&y, 1));
  const std::vector<float> got(y.data<float>(), y.data<float>() + y.numel());

  // The reference quantizes by hand: clamp(x / s) to +-448, then RNE to e4m3.
  std::vector<float> xq(x.size());
  int saturated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = std::clamp(x[i] / s, -kFp8E4M3Max, kFp8E4M3Max);
    saturated += std::fabs(v) == kFp8E4M3Max;
    xq[i] = fp8_e4m3_to_float(float_to_fp8_e4m3(v)) * s;
  }
  EXPECT_GT(saturated, static_cast<int>(x.size()) / 4);
  EXPECT_LE(testing::normalized_error(got, reference(xq, tokens, w, Tensor(), 1.0f, std::nullopt)),
            1e-5);
  // Dynamic per-token quantization would be far off (no clamp).
  EXPECT_GT(testing::normalized_error(got, reference(x, tokens, w, Tensor(), 1.0f, -1)), 1e-2);
}

}  // namespace
}  // namespace mg
