// cuda_fp4 (ops/moe/experts/cuda_wna16_experts.h): the WNA16 grouped GEMMs with the E2M1
// dequantization policy, for MXFP4 and NVFP4 expert weights.
// - the packing (host only, runs without a GPU): wna16_pack_e2m1 read back through the layout
//   (wna16_unpack_host) gives every value an independent E2M1 decoder gives, with the scale of its
//   own 16 columns, for MXFP4 (E8M0 bytes) and NVFP4 (E4M3 bytes over per-part globals) with
//   partial last groups; scales with no byte and bad shapes are refused with the reason; the bytes
//   per expert are the codes, one scale byte per 32 (16) values and NVFP4's globals;
// - the oracle: FP4 nodes on CUDA pick cuda_fp4 first, cuda_dequant after it;
// - the backend against the fp64 reference on the independently dequantized weights, routed from
//   random logits: MXFP4 and NVFP4, GPT-OSS's interleaved gate/up with biases and SwiGLU-OAI (at
//   limit 7 and at a limit the values reach), a plain activation, odd expert counts, partial last
//   groups, 1 / 8 / 300 tokens (1 token: most experts get none), BF16 and F16, the kernel chosen
//   (the decode path at M <= 8) and the decode path, the large-M path (`wna16_dequant`:
//   dequantize + the BF16 grouped GEMMs) and both GEMM tiles forced; NVFP4 with globals
//   != 1 per expert and part and E4M3 scales all subnormal or all near 448. A wrong nibble, the
//   other half's scale, a global missed or on the wrong part, or a swapped gate/up moves the
//   results by tens of percent; BF16 rounding of the weights and the intermediate stays within
//   2e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/fp4_weights.h"

#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "framework/core/fp4.h"
#include "framework/core/fp4_scale_bytes.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/experts/cuda_fp8_experts.h"
#include "ops/moe/experts/cuda_wna16_experts.h"
#include "ops/moe/oracle/fp4.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/unit/moe/moe_test_util.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::DeviceBuffer;
using testing::independent_dequantize;
using testing::independent_e2m1;

int64_t group_of(QuantScheme s) {
  return s == QuantScheme::kMxfp4 ? 32 : 16;
}

// The E4M3 codes random NVFP4 scales are drawn from.
struct E4m3Range {
  uint8_t lo = 0x28, hi = 0x48;  // 0.25 .. 4
};

// Random packed codes [E, R, C / 2] (every byte value) and positive scales per group (MXFP4: 32
// columns, NVFP4: 16) as a checkpoint holds them, with real values O(1 / sqrt(C)): MXFP4 powers
// of two (E8M0) around 1 / (6 sqrt(C)); NVFP4 E4M3 codes of `range` times an F32 global per expert
// (per gate / up half of the rows when `global_parts` is 2) that is not a power of two, in
// q.global_scale [E, global_parts], the effective F32 scale e4m3 x global rounded once as the
// loader makes it (fp4_group_scales_f32).
std::pair<Tensor, WeightQuantization> random_fp4(QuantScheme scheme, int64_t E, int64_t R,
                                                 int64_t C, uint32_t seed, int64_t global_parts = 1,
                                                 E4m3Range range = {}) {
  std::mt19937 rng(seed);
  Tensor codes = Tensor::empty_cpu(DType::kU8, {E, R, C / 2});
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < codes.numel(); ++i) {
    static_cast<uint8_t*>(codes.raw())[i] = static_cast<uint8_t>(byte(rng));
  }
  const int64_t group = group_of(scheme), G = (C + group - 1) / group;
  WeightQuantization q;
  q.element = QuantElement::kFp4E2M1;
  q.group = {1, group};
  q.scale = Tensor::empty_cpu(DType::kF32, {E, R, G});
  float* scale = q.scale.data<float>();
  const float base = 2.0f / (kFp4E2M1Max * std::sqrt(static_cast<float>(C)));
  if (scheme == QuantScheme::kMxfp4) {
    const int e0 = static_cast<int>(std::floor(std::log2(base)));
    std::uniform_int_distribution<int> exp(e0 - 1, e0 + 1);
    for (int64_t i = 0; i < q.scale.numel(); ++i) scale[i] = std::ldexp(1.0f, exp(rng));
    return {codes, q};
  }
  // The globals: base over the mean E4M3 value of the range, times a factor in [0.7, 1.3).
  std::uniform_int_distribution<int> code(range.lo, range.hi);
  std::uniform_real_distribution<float> factor(0.7f, 1.3f);
  const float mean_e4m3 = 0.5f * (e4m3_scale_value(range.lo) + e4m3_scale_value(range.hi));
  q.global_scale = Tensor::empty_cpu(DType::kF32, {E, global_parts});
  float* global = q.global_scale.data<float>();
  for (int64_t i = 0; i < E * global_parts; ++i) global[i] = base / mean_e4m3 * factor(rng);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < R; ++r) {
      const float g = global[e * global_parts + r / (R / global_parts)];
      for (int64_t j = 0; j < G; ++j) {
        scale[(e * R + r) * G + j] = e4m3_scale_value(static_cast<uint8_t>(code(rng))) * g;
      }
    }
  }
  return {codes, q};
}

// ---- 1. The packing ----------------------------------------------------------------------------

cuda::Wna16Codes codes_of(QuantScheme s) {
  return s == QuantScheme::kMxfp4 ? cuda::Wna16Codes::kMxfp4 : cuda::Wna16Codes::kNvfp4;
}

// The globals [E, parts] wna16_pack_e2m1 takes from q.global_scale [E, S] (S = 1 or parts).
std::vector<float> globals_of(const WeightQuantization& q, int64_t E, int64_t parts) {
  std::vector<float> out(static_cast<size_t>(E * parts), 1.0f);
  if (!q.global_scale.defined()) return out;
  const int64_t S = q.global_scale.dim(1);
  for (int64_t i = 0; i < E * parts; ++i) {
    out[i] = q.global_scale.data<float>()[i / parts * S + (S == 1 ? 0 : i % parts)];
  }
  return out;
}

TEST(CudaFp4Experts, PackKeepsEveryCodeWithItsHalfsScaleByte) {
  struct Case {
    QuantScheme scheme;
    int64_t E, rows, cols, parts;
  };
  // 72 = 2 x 32 + 8 and 40 = 2 x 16 + 8: partial last groups; 136: a second, partial K step;
  // gated with odd halves (row padding per part, NVFP4 globals per part); 4 x 512 x 4096: large
  // enough to be packed on several host threads.
  for (const Case c :
       {Case{QuantScheme::kMxfp4, 2, 16, 64, 1}, Case{QuantScheme::kMxfp4, 3, 10, 72, 2},
        Case{QuantScheme::kNvfp4, 2, 8, 40, 1}, Case{QuantScheme::kNvfp4, 2, 14, 136, 2},
        Case{QuantScheme::kMxfp4, 1, 9, 256, 1}, Case{QuantScheme::kNvfp4, 4, 512, 4096, 2}}) {
    SCOPED_TRACE(fmt::format("{} rows {} cols {} parts {}", quant_scheme_name(c.scheme), c.rows,
                             c.cols, c.parts));
    const auto [codes, q] = random_fp4(c.scheme, c.E, c.rows, c.cols, 17, c.parts);
    const std::vector<float> globals = globals_of(q, c.E, c.parts);
    const cuda::Wna16PackedHost p = cuda::wna16_pack_e2m1(
        codes_of(c.scheme), static_cast<const uint8_t*>(codes.raw()), q.scale.data<float>(),
        globals.data(), c.E, c.rows, c.cols, group_of(c.scheme), c.parts);
    EXPECT_EQ(p.codes, codes_of(c.scheme));
    EXPECT_EQ(p.bits, 4);
    EXPECT_TRUE(p.params.empty());
    EXPECT_EQ(static_cast<int64_t>(p.scale_bytes.size()), p.scale_byte_count());
    EXPECT_EQ(p.globals.size(), c.scheme == QuantScheme::kNvfp4 ? globals.size() : 0u);
    const std::vector<float> got = cuda::wna16_unpack_host(p, c.rows);
    const Tensor want = independent_dequantize(codes, q);
    ASSERT_EQ(got.size(), static_cast<size_t>(want.numel()));
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want.data<float>()[i];
    EXPECT_EQ(wrong, 0);
  }
}

TEST(CudaFp4Experts, PackRefusesWithTheReason) {
  using cuda::Wna16Codes;
  EXPECT_EQ(cuda::wna16_pack_e2m1_check(Wna16Codes::kMxfp4, 8, 64, 32, 1), "");
  EXPECT_EQ(cuda::wna16_pack_e2m1_check(Wna16Codes::kNvfp4, 8, 40, 16, 2), "");
  EXPECT_NE(cuda::wna16_pack_e2m1_check(Wna16Codes::kNvfp4, 8, 64, 8, 1).find("multiples of 16"),
            std::string::npos);
  EXPECT_NE(cuda::wna16_pack_e2m1_check(Wna16Codes::kMxfp4, 8, 64, 16, 1).find("multiples of 32"),
            std::string::npos);
  EXPECT_NE(cuda::wna16_pack_e2m1_check(Wna16Codes::kMxfp4, 8, 63, 32, 1).find("even"),
            std::string::npos);
  EXPECT_NE(cuda::wna16_pack_e2m1_check(Wna16Codes::kMxfp4, 7, 64, 32, 2).find("two equal halves"),
            std::string::npos);
  EXPECT_NE(cuda::wna16_pack_e2m1_check(Wna16Codes::kInteger, 8, 64, 32, 1).find("MXFP4 or NVFP4"),
            std::string::npos);
  const std::vector<uint8_t> codes(8 * 32, 0);
  std::vector<float> scales(8 * 8, 1.0f);
  EXPECT_MG_ERROR(cuda::wna16_pack_e2m1(Wna16Codes::kNvfp4, codes.data(), scales.data(), nullptr, 1,
                                        8, 64, 8, 1),
                  "multiples of 16");
  // A scale with no byte, named by its place: MXFP4 not a power of two; NVFP4 not E4M3 x global
  // (0.3 / 0.5 = 0.6 is between E4M3's 0.5625 and 0.625).
  scales[3 * 2 + 1] = 0.75f;
  EXPECT_MG_ERROR(cuda::wna16_pack_e2m1(Wna16Codes::kMxfp4, codes.data(), scales.data(), nullptr, 1,
                                        8, 64, 32, 1),
                  "MXFP4 scale 0.75 of expert 0 row 3 group 1 is not a power of two");
  // A power of two above 2^6, which the BF16 kernels' folded scale pairs do not take.
  scales[3 * 2 + 1] = 1.0f;
  scales[6 * 2] = 128.0f;
  EXPECT_MG_ERROR(cuda::wna16_pack_e2m1(Wna16Codes::kMxfp4, codes.data(), scales.data(), nullptr, 1,
                                        8, 64, 32, 1),
                  "MXFP4 scale 128 of expert 0 row 6 group 0 is above 2^6");
  // 2^6 is taken, with the shift 5.
  scales[6 * 2] = 64.0f;
  EXPECT_EQ(cuda::wna16_pack_e2m1(Wna16Codes::kMxfp4, codes.data(), scales.data(), nullptr, 1, 8,
                                  64, 32, 1)
                .e8m0_shift,
            5);
  std::vector<float> nv(8 * 4, 0.5f);
  nv[5 * 4 + 2] = 0.3f;
  const float global = 0.5f;
  EXPECT_MG_ERROR(
      cuda::wna16_pack_e2m1(Wna16Codes::kNvfp4, codes.data(), nv.data(), &global, 1, 8, 64, 16, 1),
      "NVFP4 scale 0.3 of expert 0 row 5 group 2 is not an E4M3 value times its "
      "global scale 0.5");
}

// The bytes per expert cuda_fp4 keeps and the bench's floor reads: the codes (half a byte a
// value), one scale byte per 32 (MXFP4) or 16 (NVFP4) values of a row, NVFP4's F32 global per
// matrix part; no F32 pairs. GPT-OSS-120B's expert (H = I = 2880, gated): w13 5760 x 2880 and w2
// 2880 x 2880 values, K = 2880 padded to 23 steps of 128 (2944).
TEST(CudaFp4Experts, BytesPerExpertAreCodesAndOneScaleBytePerGroup) {
  ExpertsShape shape;
  shape.hidden_size = 2880;
  shape.intermediate_size = 2880;
  shape.activation.kind = MoEActivation::kSwigluOai;
  const double values = 3.0 * 2880 * 2880;
  const double padded = 3.0 * 2880 * (23 * 128);  // K padded to whole steps (codes 0, scales 0)
  const double mx = cuda_fp4_expert_bytes(shape, QuantScheme::kMxfp4);
  const double nv = cuda_fp4_expert_bytes(shape, QuantScheme::kNvfp4);
  EXPECT_DOUBLE_EQ(mx, padded / 2 + padded / 32);
  EXPECT_DOUBLE_EQ(nv, padded / 2 + padded / 16 + 4.0 * 3);  // globals: gate, up, w2
  // 4.25 and 4.5 bits a value (plus the padding of K to 2944): 36 layers x 128 experts of the
  // 120B shape are 62.3 GB (58.0 GiB), not the 88 GB of F32 pairs per 32 values.
  EXPECT_NEAR(mx / values, 4.25 / 8 * 2944 / 2880, 1e-12);
  EXPECT_LT(36 * 128 * mx, 62.4e9);
  EXPECT_GT(36 * 128 * mx, 62.2e9);
  const cuda::Wna16PackedHost one =
      cuda::wna16_layout_e2m1(cuda::Wna16Codes::kMxfp4, 1, 5760, 2880, 2);
  EXPECT_EQ(one.param_count(), 0);
  EXPECT_EQ(one.scale_byte_count(), 5760 * 23 * 4);
  EXPECT_EQ(one.global_count(), 0);
  EXPECT_EQ(cuda::wna16_layout_e2m1(cuda::Wna16Codes::kNvfp4, 3, 5760, 2880, 2).global_count(), 6);
}

// ---- 2. The backend through the oracle ---------------------------------------------------------

struct Fp4Case {
  const char* name;
  QuantScheme scheme;
  int64_t E, k, H, I;
  MoEActivation act;
  bool interleaved = false;
  bool biases = false;
  float swiglu_limit = 7.0f;
};

MoEConfig fp4_config(const Fp4Case& c) {
  MoEConfig::Fields f = moe_test::experts_config(c.E, c.k, c.H, c.I, c.act, c.biases).fields();
  f.quant_scheme = c.scheme;
  f.gate_up_interleaved = c.interleaved;
  f.activation.swiglu_limit = c.swiglu_limit;
  return MoEConfig(f);
}

RawExpertWeights random_raw(const MoEConfig& config, const Fp4Case& c, uint32_t seed,
                            E4m3Range range = {}) {
  RawExpertWeights raw;
  // NVFP4 gate and up rows with globals of their own where they are not interleaved.
  const int64_t parts = is_gated(c.act) && !c.interleaved ? 2 : 1;
  std::tie(raw.w13, raw.w13_quant) =
      random_fp4(c.scheme, c.E, config.w13_rows(), c.H, seed, parts, range);
  std::tie(raw.w2, raw.w2_quant) = random_fp4(c.scheme, c.E, c.H, c.I, seed + 2, 1, range);
  if (c.biases) {
    raw.w13_bias = testing::random_tensor({c.E, config.w13_rows()}, seed + 4, -0.5f, 0.5f);
    raw.w2_bias = testing::random_tensor({c.E, c.H}, seed + 5, -0.5f, 0.5f);
  }
  return raw;
}

TEST(CudaFp4Experts, OracleListsCudaFp4FirstWithReasons) {
  const std::vector<const ExpertsBackend*> list = fp4_priority(Device::cuda(0));
  ASSERT_GE(list.size(), 2u);
  EXPECT_EQ(list[0]->name(), "cuda_fp4");
  EXPECT_EQ(list[1]->name(), "cuda_dequant");
  const ExpertsBackend& b = cuda_fp4_backend();
  EXPECT_EQ(b.check_quant(MoEQuantConfig::unquantized()),
            "takes FP4 weights (MXFP4, NVFP4), not unquantized");
  const Fp4Case mx{"mx", QuantScheme::kMxfp4, 4, 2, 64, 32, MoEActivation::kSiluGated};
  const MoEConfig config = fp4_config(mx);
  const RawExpertWeights raw = random_raw(config, mx, 1);
  EXPECT_EQ(b.check_quant(fp4_quant_config(config, raw, DType::kBF16)), "");
  ExpertsShape shape = local_experts_shape(config, ParallelConfig());
  shape.dtype = DType::kF32;
  EXPECT_NE(b.check_shape(shape).find("BF16 or F16"), std::string::npos);
  shape.dtype = DType::kBF16;
  EXPECT_EQ(b.check_shape(shape), "");
  shape.hidden_size = 68;  // K not a multiple of 8
  EXPECT_NE(b.check_shape(shape).find("multiple of 8"), std::string::npos);
  EXPECT_NE(b.check_kernel("nope", shape, Device::cuda(0)).find("no kernel 'nope'"),
            std::string::npos);
}

// Scales stored as F32 values with no byte (a graph written by hand or another tool) cannot be kept
// by cuda_fp4's scale-byte layout: its weights check refuses them, naming the matrix, and the
// oracle takes cuda_dequant instead of failing at build.
TEST(CudaFp4Experts, ScalesWithNoByteGoToCudaDequant) {
  for (const QuantScheme scheme : {QuantScheme::kMxfp4, QuantScheme::kNvfp4}) {
    SCOPED_TRACE(quant_scheme_name(scheme));
    const Fp4Case c{"c", scheme, 4, 2, 64, 32, MoEActivation::kSiluGated};
    const MoEConfig config = fp4_config(c);
    RawExpertWeights raw = random_raw(config, c, 3);
    const MoEQuantConfig quant = fp4_quant_config(config, raw, DType::kBF16);
    ExpertsShape shape = local_experts_shape(config, ParallelConfig());
    shape.dtype = DType::kBF16;
    const ParallelConfig parallel;
    const auto choose = [&] {
      const ExpertWeightFacts facts = fp4_weight_facts(raw, scheme);
      const OracleQuery q{Device::cuda(0), config, quant, parallel, shape, "", &facts};
      return select_backend(fp4_priority(Device::cuda(0)), q);
    };
    EXPECT_EQ(choose().backend->name(), "cuda_fp4");
    // One w2 scale (expert 0) set to 1.0625 x its global: not a power of two, and between the
    // E4M3 values 1 and 1.125.
    const float global = raw.w2_quant.global_scale.defined()
                             ? to_f32_cpu(raw.w2_quant.global_scale).data<float>()[0]
                             : 1.0f;
    raw.w2_quant.scale.data<float>()[5] = 1.0625f * global;
    const ExpertWeightFacts facts = fp4_weight_facts(raw, scheme);
    EXPECT_TRUE(facts.w13.scales_have_bytes);
    EXPECT_FALSE(facts.w2.scales_have_bytes);
    EXPECT_NE(cuda_fp4_backend().check_weights(facts, shape).find("w2 has scales with no"),
              std::string::npos)
        << cuda_fp4_backend().check_weights(facts, shape);
    const OracleChoice choice = choose();
    EXPECT_EQ(choice.backend->name(), "cuda_dequant") << choice.describe();
    EXPECT_NE(choice.describe().find("one-byte code"), std::string::npos) << choice.describe();
    if (scheme == QuantScheme::kMxfp4) {
      // A power of two above 2^6: it has a byte, but the BF16 kernels' folded scale pairs take
      // codes up to 133 (wna16_exact_codes.h), so cuda_dequant takes the node.
      raw.w2_quant.scale.data<float>()[5] = 128.0f;
      const ExpertWeightFacts big = fp4_weight_facts(raw, scheme);
      EXPECT_TRUE(big.w2.scales_have_bytes);
      EXPECT_EQ(big.w2.largest_e8m0_code, 134);
      EXPECT_NE(cuda_fp4_backend().check_weights(big, shape).find("w2 has an MXFP4 scale of 2^7"),
                std::string::npos)
          << cuda_fp4_backend().check_weights(big, shape);
      EXPECT_EQ(choose().backend->name(), "cuda_dequant");
    }
  }
}

template <typename T>
std::vector<uint16_t> to_bits(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    T v;
    if constexpr (std::is_same_v<T, __half>) {
      v = __float2half_rn(x[i]);
    } else {
      v = __float2bfloat16_rn(x[i]);
    }
    std::memcpy(&out[i], &v, 2);
  }
  return out;
}

template <typename T>
float from_bits(uint16_t b) {
  T v;
  std::memcpy(static_cast<void*>(&v), &b, 2);
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return __bfloat162float(v);
  }
}

// One monolithic apply of `experts` on x (rounded to T) and logits; the output as F32, and the
// rounded x in `x_rounded`.
template <typename T>
std::vector<float> run_experts(Experts& experts, const std::vector<float>& x,
                               const std::vector<float>& logits, int64_t M, int64_t H,
                               std::vector<float>& x_rounded) {
  auto* mono = dynamic_cast<ExpertsMonolithic*>(&experts);
  EXPECT_NE(mono, nullptr);
  if (mono == nullptr) return {};
  const std::vector<uint16_t> xb = to_bits<T>(x);
  x_rounded.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) x_rounded[i] = from_bits<T>(xb[i]);
  DeviceBuffer d_x(xb.size() * 2), d_logits(logits.size() * 4), d_out(M * H * 2);
  d_x.upload(xb.data(), xb.size() * 2);
  d_logits.upload(logits.data(), logits.size() * 4);
  DeviceBuffer d_ws(std::max<size_t>(experts.workspace_bytes(M), 1));
  DispatchedLogits t;
  t.hidden = d_x.as<void>();
  t.router_logits = d_logits.as<float>();
  t.num_tokens = M;
  t.expert_output = d_out.as<void>();
  Workspace ws(d_ws.as<void>(), experts.workspace_bytes(M));
  mono->apply(t, ws, MoEExecContext{});
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(M * H);
  d_out.download(out.data(), out.size() * 2);
  std::vector<float> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) got[i] = from_bits<T>(out[i]);
  return got;
}

// `tweak`, when set, changes the random weights before anything reads them.
template <typename T>
void expect_backend_matches_reference(
    const Fp4Case& c, uint32_t& seed, E4m3Range range = {},
    const std::function<void(RawExpertWeights&)>& tweak = nullptr) {
  constexpr DType kDtype = std::is_same_v<T, __half> ? DType::kF16 : DType::kBF16;
  const MoEConfig config = fp4_config(c);
  RawExpertWeights raw = random_raw(config, c, seed += 10, range);
  if (tweak) tweak(raw);
  const Tensor w13 = independent_dequantize(raw.w13, raw.w13_quant);
  const Tensor w2 = independent_dequantize(raw.w2, raw.w2_quant);
  // The oracle's choice on CUDA, with cuda_dequant listed after it.
  const MoEKernelBuild auto_build =
      build_moe_kernel(config, ParallelConfig(), Device::cuda(0), kDtype, "", raw, Tensor());
  EXPECT_EQ(auto_build.choice.backend->name(), "cuda_fp4") << auto_build.choice.describe();
  const ExpertsShape shape = [&] {
    ExpertsShape s = local_experts_shape(config, ParallelConfig());
    s.dtype = kDtype;
    return s;
  }();
  for (const char* kernel :
       {"auto", "wna16_decode", "wna16_dequant", "wna16_mma16", "wna16_mma32", "wna16_mma64"}) {
    ExpertsBuild build{config, shape, Device::cuda(0), CanonicalExpertWeights{}, Tensor()};
    build.kernel = kernel;
    build.quant = fp4_quant_config(config, raw, kDtype);
    build.quantized = convert_fp4_weights(config, ParallelConfig(), shape, raw);
    std::unique_ptr<Experts> experts = cuda_fp4_backend().create(std::move(build));
    EXPECT_TRUE(experts->graph_capturable());
    for (const int64_t M : {int64_t{1}, int64_t{8}, int64_t{300}}) {
      SCOPED_TRACE(fmt::format("kernel {} M {}", kernel, M));
      const std::vector<float> x = testing::random_floats(M * c.H, ++seed, -1.0f, 1.0f);
      const std::vector<float> logits = testing::random_floats(M * c.E, ++seed, -2.0f, 2.0f);
      std::vector<float> xr;
      const std::vector<float> got = run_experts<T>(*experts, x, logits, M, c.H, xr);
      const reference::Routing r = reference::route(config.routing(), logits, M, {});
      const std::vector<float> want =
          reference::experts(config, xr, M, r.ids, r.weights, w13, raw.w13_bias, w2, raw.w2_bias);
      EXPECT_LE(testing::normalized_error(got, want), 2e-2);
    }
  }
}

std::vector<Fp4Case> backend_cases() {
  return {
      // GPT-OSS as the hub ships it: interleaved gate/up rows, biases, SwiGLU-OAI at its limit 7,
      // and at a limit of 0.6 that the random values reach (the clamp taken).
      {"gpt_oss_mxfp4", QuantScheme::kMxfp4, 5, 2, 128, 64, MoEActivation::kSwigluOai, true, true,
       7.0f},
      {"gpt_oss_mxfp4_clamped", QuantScheme::kMxfp4, 5, 2, 128, 64, MoEActivation::kSwigluOai, true,
       true, 0.6f},
      {"gpt_oss_nvfp4", QuantScheme::kNvfp4, 7, 4, 96, 48, MoEActivation::kSwigluOai, true, true,
       0.6f},
      // Partial last groups (72 = 2 x 32 + 8, 40 = 32 + 8; NVFP4 40 = 2 x 16 + 8, 24 = 16 + 8).
      {"mxfp4_partial_groups", QuantScheme::kMxfp4, 7, 3, 72, 40, MoEActivation::kSiluGated},
      {"nvfp4_partial_groups", QuantScheme::kNvfp4, 3, 2, 40, 24, MoEActivation::kSiluGated, false,
       true},
      // A plain (one part) GEMM1.
      {"nvfp4_plain", QuantScheme::kNvfp4, 5, 2, 64, 48, MoEActivation::kGelu, false, true},
      // K over one 128-wide step with a partial second one.
      {"mxfp4_two_steps", QuantScheme::kMxfp4, 3, 2, 192, 160, MoEActivation::kSiluGated},
  };
}

TEST(CudaFp4Experts, BackendMatchesReferenceBf16) {
  MG_REQUIRE_GPU();
  uint32_t seed = 700;
  for (const Fp4Case& c : backend_cases()) {
    SCOPED_TRACE(fmt::format("{} {}", c.name, quant_scheme_name(c.scheme)));
    expect_backend_matches_reference<__nv_bfloat16>(c, seed);
  }
}

TEST(CudaFp4Experts, BackendMatchesReferenceF16) {
  MG_REQUIRE_GPU();
  uint32_t seed = 900;
  for (const Fp4Case& c : backend_cases()) {
    SCOPED_TRACE(fmt::format("{} {}", c.name, quant_scheme_name(c.scheme)));
    expect_backend_matches_reference<__half>(c, seed);
  }
}

// MXFP4 scales above 2 (E8M0 codes above 128): the BF16 kernels fold E2M1's unbias into the scale
// pairs, which BF16 holds only up to 2^(code - 1) <= 2^127, so such matrices take a shift
// (Wna16Weights::e8m0_shift: B values w / 2^shift, the fp32 sums times 2^shift). w13's scales are
// raised by 2^9 (codes ~129 .. 131, one at 2^6: the largest taken, shift 5) and w2's lowered by
// as much; every kernel against the CPU reference, in BF16 (F16 keeps MXFP4 scales in fp32 and
// takes no shift; its activations would overflow here).
TEST(CudaFp4Experts, Mxfp4ScalesAboveTwoMatchTheCpu) {
  MG_REQUIRE_GPU();
  uint32_t seed = 1500;
  const auto raise = [](RawExpertWeights& raw) {
    float* s13 = raw.w13_quant.scale.data<float>();
    for (int64_t i = 0; i < raw.w13_quant.scale.numel(); ++i) s13[i] = std::ldexp(s13[i], 9);
    s13[3] = 64.0f;
    float* s2 = raw.w2_quant.scale.data<float>();
    for (int64_t i = 0; i < raw.w2_quant.scale.numel(); ++i) s2[i] = std::ldexp(s2[i], -9);
  };
  for (const Fp4Case& c : backend_cases()) {
    if (c.scheme != QuantScheme::kMxfp4) continue;
    SCOPED_TRACE(c.name);
    expect_backend_matches_reference<__nv_bfloat16>(c, seed, {}, raise);
  }
}

// NVFP4 with globals != 1 (per expert, and per gate / up part) and E4M3 scales at the ends of
// the format: all subnormal (codes 0x01 .. 0x07: m / 8 * 2^-6) and all near the maximum (0x70 ..
// 0x7E: 256 .. 448), the globals making the real values O(1 / sqrt(C)) again. cuda_fp4 keeps the
// bytes and applies the global per output; the CPU reference reads the effective F32 scales.
TEST(CudaFp4Experts, Nvfp4GlobalScaleWithSubnormalAndNearMaxE4m3MatchesTheCpu) {
  MG_REQUIRE_GPU();
  uint32_t seed = 1300;
  const std::vector<Fp4Case> cases = {
      {"nvfp4_gated", QuantScheme::kNvfp4, 6, 2, 128, 96, MoEActivation::kSiluGated, false, true},
      {"nvfp4_plain", QuantScheme::kNvfp4, 4, 2, 64, 48, MoEActivation::kGelu, false, true},
      {"nvfp4_gpt_oss", QuantScheme::kNvfp4, 5, 2, 96, 64, MoEActivation::kSwigluOai, true, true,
       0.6f},
  };
  for (const E4m3Range range : {E4m3Range{0x01, 0x07}, E4m3Range{0x70, 0x7E}}) {
    for (const Fp4Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} e4m3 codes {:#x} .. {:#x}", c.name, range.lo, range.hi));
      expect_backend_matches_reference<__nv_bfloat16>(c, seed, range);
      expect_backend_matches_reference<__half>(c, seed, range);
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
