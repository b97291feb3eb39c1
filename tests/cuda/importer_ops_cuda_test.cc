// The CUDA kernels of the ops that graphs imported from Hugging Face add — clamp (OLMoE's
// clip_qkv), concat_heads (DeepSeek MLA) and attn_temperature (Llama-4's NoPE layers) — against
// their CPU kernels and references in BF16, F16 and F32, over the shared op case table
// (tests/testing/op_cases.cc) and by hand. They leave no error: each output is the CPU's on the
// same (rounded) input rounded through the dtype, compared exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "ops/nn/attn_temperature/attn_temperature.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/op_harness.h"
#include "tests/unit/ops/nn_test_util.h"
#ifdef MG_WITH_CUDA
#include <cuda_fp16.h>

#include "ops/nn/concat_heads/concat_heads_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::cuda_dtypes;
using testing::DeviceOp;
using testing::dtype_trace;
using testing::DtypeTolerance;

proto::Node clamp_node(std::optional<float> min, std::optional<float> max) {
  proto::Node node;
  node.set_name("clip");
  node.set_op("clamp");
  proto::ClampParams* p = node.mutable_clamp();
  if (min) p->set_min(*min);
  if (max) p->set_max(*max);
  return node;
}

// The kernel compares in fp32 and rounds once, so its output is the reference's on the same
// (rounded) input rounded through the dtype: equal in every dtype, NaN and ±inf included (the
// table's clamp inputs hold NaN, ±inf, -0 and ±1e4; its bounds 0.3, 1.1 and 0.7 are not exact in
// BF16 or F16, so the bound itself is rounded on store).
TEST(CudaOps, ClampMatchesReferenceExactly) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("clamp");
}

TEST(CudaOps, ClampHandChecked) {
  MG_REQUIRE_GPU();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-3.0f, 0.5f, 2.0f, nan, kInf, -kInf, -0.0f};
  const Tensor xt = testing::tensor_from({1, 7}, x);
  for (const DtypeTolerance& d : cuda_dtypes()) {
    SCOPED_TRACE(dtype_trace(d));
    DeviceOp both(clamp_node(-1.0f, 1.0f), {xt}, d.dtype);
    EXPECT_EQ(both.kernel().describe(), fmt::format("cuda {}", dtype_name(d.dtype)));
    testing::expect_same_values(testing::span_of(both.run({xt})[0]),
                                std::vector<float>{-1.0f, 0.5f, 1.0f, nan, 1.0f, -1.0f, -0.0f});
    // Unset bounds leave every value, infinities included, as it is.
    DeviceOp none(clamp_node(std::nullopt, std::nullopt), {xt}, d.dtype);
    testing::expect_same_values(testing::span_of(none.run({xt})[0]), x);
  }
}

// m = 1 and m = n, odd widths (element copies in BF16/F16), 4-, 8- and 16-byte units,
// DeepSeek-V3's widths.
TEST(CudaOps, ConcatHeadsMatchesReferenceExactly) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("concat_heads");
}

// launch_concat_heads<T> on buffers offset by a few elements from cudaMalloc's alignment, so
// that every unit width is taken (16, 8, 4 bytes, single elements). The inputs are distinct bit
// patterns (NaN encodings among them) that must arrive unchanged; the output buffer around the
// copy must stay untouched.
template <typename T, typename Bits>
void check_concat_heads_launch(int64_t tokens, int64_t heads, int64_t a_dim, int64_t b_heads,
                               int64_t b_dim, int64_t a_off, int64_t b_off, int64_t out_off) {
  static_assert(sizeof(T) == sizeof(Bits));
  SCOPED_TRACE(fmt::format("{}-byte elements, T={} n={} da={} m={} db={}, offsets a {} b {} out {}",
                           sizeof(T), tokens, heads, a_dim, b_heads, b_dim, a_off, b_off, out_off));
  constexpr size_t kTail = 64;  // elements after the output
  const size_t out_dim = static_cast<size_t>(a_dim + b_dim);
  std::vector<Bits> a(static_cast<size_t>(a_off + tokens * heads * a_dim));
  std::vector<Bits> b(static_cast<size_t>(b_off + tokens * b_heads * b_dim));
  std::vector<Bits> out(
      static_cast<size_t>(out_off) + static_cast<size_t>(tokens * heads) * out_dim + kTail,
      static_cast<Bits>(0x5a5a5a5au));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<Bits>(0x9e3779b9u * (i + 1));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<Bits>(0x85ebca6bu * (i + 1) + 7);
  testing::DeviceBuffer da(a.size() * sizeof(Bits)), db(b.size() * sizeof(Bits)),
      dout(out.size() * sizeof(Bits));
  da.upload(a.data(), a.size() * sizeof(Bits));
  db.upload(b.data(), b.size() * sizeof(Bits));
  dout.upload(out.data(), out.size() * sizeof(Bits));
  cuda::ConcatHeadsArgs args;
  args.a = da.as<Bits>() + a_off;
  args.b = db.as<Bits>() + b_off;
  args.out = dout.as<Bits>() + out_off;
  args.tokens = tokens;
  args.heads = heads;
  args.a_dim = a_dim;
  args.b_heads = b_heads;
  args.b_dim = b_dim;
  cuda::launch_concat_heads<T>(args, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<Bits> got(out.size());
  dout.download(got.data(), got.size() * sizeof(Bits));

  std::vector<Bits> want = out;
  for (int64_t row = 0; row < tokens * heads; ++row) {
    const int64_t t = row / heads, h = row % heads;
    const int64_t b_row = t * b_heads + (b_heads == 1 ? 0 : h);
    Bits* o = want.data() + out_off + row * static_cast<int64_t>(out_dim);
    for (int64_t i = 0; i < a_dim; ++i) o[i] = a[a_off + row * a_dim + i];
    for (int64_t i = 0; i < b_dim; ++i) o[a_dim + i] = b[b_off + b_row * b_dim + i];
  }
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0u) << "first at element " << first << " of the buffer (output from " << out_off
                        << ")";
}

TEST(CudaOps, ConcatHeadsLaunchCopiesBitsAtAnyAlignment) {
  MG_REQUIRE_GPU();
  struct Case {
    int64_t tokens, heads, a_dim, b_heads, b_dim, a_off, b_off, out_off;
  };
  // Unit widths as 4-byte (float) / 2-byte (half) elements.
  const std::vector<Case> cases = {
      {3, 4, 8, 1, 4, 0, 0, 0},       // 16 / 8 bytes
      {3, 4, 8, 4, 4, 1, 0, 0},       // a one element off: 4 bytes / single elements
      {2, 16, 128, 1, 64, 0, 2, 0},   // b two elements off: 8 / 4 bytes
      {2, 16, 128, 16, 64, 0, 0, 3},  // out three elements off: 4 bytes / single elements
      {5, 3, 5, 3, 3, 0, 0, 0},       // odd widths: 4 bytes / single elements
      {4, 2, 6, 2, 2, 0, 0, 4},       // 8 / 4 bytes
      {1, 1, 1, 1, 1, 1, 1, 1},       // single elements, every pointer off by one
      {0, 4, 8, 1, 4, 1, 1, 1},       // no tokens: nothing is written
      {700, 8, 64, 1, 32, 0, 0, 0},   // many tokens
  };
  for (const Case& c : cases) {
    check_concat_heads_launch<float, uint32_t>(c.tokens, c.heads, c.a_dim, c.b_heads, c.b_dim,
                                               c.a_off, c.b_off, c.out_off);
    check_concat_heads_launch<__half, uint16_t>(c.tokens, c.heads, c.a_dim, c.b_heads, c.b_dim,
                                                c.a_off, c.b_off, c.out_off);
  }
}

proto::Node attn_temperature_node(float attn_scale, float floor_scale) {
  proto::Node node;
  node.set_name("q_temperature");
  node.set_op("attn_temperature");
  node.mutable_attn_temperature()->set_attn_scale(attn_scale);
  node.mutable_attn_temperature()->set_floor_scale(floor_scale);
  return node;
}

// The kernel's fp32 factor is the CPU's and its product is x * factor in fp32 rounded once, so
// its output equals the CPU kernel's on the same (rounded) input rounded through the dtype.
TEST(CudaOps, AttnTemperatureMatchesTheCpuKernelExactly) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("attn_temperature");
}

// With x = 1 the F32 output is the factor itself: bit for bit the CPU's fp64 factor rounded to
// fp32, over consecutive, step-boundary and large positions.
TEST(CudaOps, AttnTemperatureFactorIsTheCpusBitForBit) {
  MG_REQUIRE_GPU();
  const std::pair<float, float> params[] = {{0.1f, 8192.0f}, {0.1f, 4.0f},  {0.25f, 8.0f},
                                            {-0.5f, 3.5f},   {1e-3f, 1.0f}, {2.0f, 0.3f}};
  constexpr int64_t kTokens = 6000;
  const Tensor ones = testing::tensor_from({kTokens, 1}, std::vector<float>(kTokens, 1.0f));
  for (auto [attn_scale, floor_scale] : params) {
    SCOPED_TRACE(fmt::format("attn_scale {} floor_scale {}", attn_scale, floor_scale));
    std::vector<int32_t> pos(static_cast<size_t>(kTokens));
    for (int64_t t = 0; t < kTokens; ++t) {
      pos[t] =
          t < 2048 ? static_cast<int32_t>(t) : testing::temperature_position(t, floor_scale, 7);
    }
    const Tensor positions = testing::i32_tensor(pos);
    DeviceOp op(attn_temperature_node(attn_scale, floor_scale), {ones, positions}, DType::kF32);
    std::vector<Tensor> out = op.run({ones, positions});
    std::vector<float> want(static_cast<size_t>(kTokens));
    for (int64_t t = 0; t < kTokens; ++t) {
      want[t] = static_cast<float>(attn_temperature_factor(pos[t], attn_scale, floor_scale));
    }
    testing::expect_same_values(testing::span_of(out[0]), want);
  }
}

// The kernel cannot report a negative position without a host sync (the Session checks them
// before a forward; the CPU kernel throws): it reads one as position 0.
TEST(CudaOps, AttnTemperatureReadsANegativePositionAsZero) {
  MG_REQUIRE_GPU();
  // floor_scale 0.5: the factor at 0 is 1 + 0.5 ln 3, not 1, so "as 0" is told from "skipped".
  const proto::Node node = attn_temperature_node(0.5f, 0.5f);
  const Tensor x = testing::random_tensor({4, 16}, 1950);
  const Tensor negative = testing::i32_tensor({-1, 3, std::numeric_limits<int32_t>::min(), -100});
  DeviceOp op(node, {x, negative}, DType::kF32);
  EXPECT_EQ(op.kernel().describe(), "cuda F32");
  const std::vector<Tensor> out = op.run({x, negative});
  const std::vector<Tensor> want =
      testing::run_cpu_op(node, {x, testing::i32_tensor({0, 3, 0, 0})});
  testing::expect_same_values(testing::span_of(out[0]), testing::span_of(want[0]));
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
