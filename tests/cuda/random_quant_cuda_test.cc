// Random quantized weights made on the GPU (framework/compile/random_quantized_weights.h with a
// CUDA `where`) and repacked there (cuda::wna16_pack_on_device): the same codes and scales as the
// host makes, the same packed words as the host repacking, and whole models that run on the GPU
// from them as the CPU runs from the host's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

// The whole file needs a CUDA build (its calls go straight to the runtime); in a CPU build the
// suite has no GPU tests to skip.
#ifdef MG_WITH_CUDA
#include "framework/compile/random_quantized_weights.h"
#include "framework/core/int_quant.h"
#include "framework/device/allocator.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/graph/tensor_quantization.h"
#include "framework/runtime/session.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/cuda/wna16/wna16_pack_device_cuda.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

Tensor host_of(const Tensor& t) {
  Tensor out = Tensor::empty_cpu(t.dtype(), t.shape());
  copy_tensor(out, t);
  return out;
}

void expect_same(const Tensor& gpu, const Tensor& host, const char* what) {
  ASSERT_EQ(gpu.defined(), host.defined()) << what;
  if (!host.defined()) return;
  ASSERT_TRUE(gpu.device().is_cuda()) << what;
  const Tensor got = host_of(gpu);
  ASSERT_EQ(got.shape(), host.shape()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), host.raw(), host.nbytes()), 0) << what;
}

proto::TensorInfo info_of(const std::string& name, const Shape& shape) {
  proto::TensorInfo info;
  info.set_name(name);
  for (int64_t d : shape) info.add_shape(d);
  info.mutable_quantization()->set_scale(name + ".scale");
  return info;
}

TEST(RandomQuantCuda, IntegerAndFp4CodesMadeOnTheGpuAreTheHostsBitForBit) {
  MG_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Shape logical = {4, 192, 512};
  for (const auto& [element, group] :
       {std::pair{QuantElement::kInt4, int64_t{128}}, std::pair{QuantElement::kUInt4, int64_t{32}},
        std::pair{QuantElement::kInt8, int64_t{-1}},
        std::pair{QuantElement::kUInt8, int64_t{64}}}) {
    SCOPED_TRACE(quant_element_name(element));
    const proto::TensorInfo info = info_of("layers.0.mlp.experts.w13", logical);
    const auto [hc, hq] = random_int_weight(info, logical, element, group, 9);
    const auto [dc, dq] = random_int_weight(info, logical, element, group, 9, gpu);
    expect_same(dc, hc, "codes");
    expect_same(dq.scale, hq.scale, "scales");
    expect_same(dq.zero_point, hq.zero_point, "zero points");
  }
  const proto::TensorInfo info = info_of("layers.0.mlp.experts.w2", {4, 192, 256});
  for (const auto& [grid, group] :
       {std::pair{Fp4ScaleGrid::kF32, int64_t{32}}, std::pair{Fp4ScaleGrid::kE8M0, int64_t{32}},
        std::pair{Fp4ScaleGrid::kE4M3, int64_t{16}}}) {
    SCOPED_TRACE(static_cast<int>(grid));
    const auto [hc, hq] = random_fp4_weight(info, GroupShape{1, group}, 9, Device::cpu(), grid);
    const auto [dc, dq] = random_fp4_weight(info, GroupShape{1, group}, 9, gpu, grid);
    expect_same(dc, hc, "fp4 codes");
    expect_same(dq.scale, hq.scale, "fp4 scales");
    ASSERT_EQ(dq.global_scale.defined(), grid == Fp4ScaleGrid::kE4M3);
    if (dq.global_scale.defined()) {
      EXPECT_EQ(std::memcmp(dq.global_scale.raw(), hq.global_scale.raw(), hq.global_scale.nbytes()),
                0);
    }
  }
}

// wna16_pack_on_device against wna16_pack / wna16_pack_e2m1 on the same codes.
TEST(RandomQuantCuda, DevicePackingWritesTheHostPackingsWords) {
  MG_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const int64_t E = 3, N = 2 * 40, K = 384, parts = 2;
  const proto::TensorInfo info = info_of("w", {E, N, K});
  for (const auto& [element, group] : {std::pair{QuantElement::kInt4, int64_t{128}},
                                       std::pair{QuantElement::kUInt8, int64_t{64}}}) {
    SCOPED_TRACE(quant_element_name(element));
    const int bits = quant_element_bits(element);
    const auto [codes, q] = random_int_weight(info, {E, N, K}, element, group, 4);
    // The host contract: unsigned codes, one per byte.
    std::vector<uint8_t> unpacked(static_cast<size_t>(E * N * K));
    const int32_t offset = quant_element_signed(element) ? (1 << (bits - 1)) : 0;
    const int64_t row_bytes = int_codes_row_bytes(element, K);
    for (int64_t r = 0; r < E * N; ++r) {
      for (int64_t k = 0; k < K; ++k) {
        unpacked[r * K + k] = static_cast<uint8_t>(
            int_code_at(static_cast<const uint8_t*>(codes.raw()) + r * row_bytes, element, k) +
            offset);
      }
    }
    cuda::Wna16HostMatrix h;
    h.codes = unpacked.data();
    h.scales = q.scale.data<float>();
    h.zeros_f32 = q.zero_point.defined() ? q.zero_point.data<float>() : nullptr;
    h.experts = E;
    h.rows = N;
    h.cols = K;
    h.bits = bits;
    h.group_size = group;
    const cuda::Wna16PackedHost want = cuda::wna16_pack(h, parts);

    Tensor d_codes = empty_tensor(gpu, codes.dtype(), codes.shape());
    copy_tensor(d_codes, codes);
    Tensor d_scale = empty_tensor(gpu, DType::kF32, q.scale.shape());
    copy_tensor(d_scale, q.scale);
    Tensor d_zero;
    if (q.zero_point.defined()) {
      d_zero = empty_tensor(gpu, DType::kF32, q.zero_point.shape());
      copy_tensor(d_zero, q.zero_point);
    }
    cuda::Wna16PackSource c;
    c.codes = static_cast<const uint8_t*>(d_codes.raw());
    c.row_bytes = row_bytes;
    c.flip = quant_element_signed(element) ? (bits == 4 ? 0x8u : 0x80u) : 0u;
    c.bits = bits;
    c.experts = E;
    c.rows = N;
    c.cols = K;
    c.parts = parts;
    c.part_rows = want.part_rows;
    c.k_steps = want.k_steps;
    cuda::Wna16ParamSource s;
    s.scales = d_scale.data<float>();
    s.zeros = d_zero.defined() ? d_zero.data<float>() : nullptr;
    s.default_zero = bits == 4 ? 8.0f : 128.0f;
    s.scale_groups = want.groups;
    s.experts = E;
    s.rows = N;
    s.parts = parts;
    s.part_rows = want.part_rows;
    s.groups = want.groups;
    Tensor words = empty_tensor(gpu, DType::kI32, {want.word_count()});
    Tensor pairs = empty_tensor(gpu, DType::kF32, {want.param_count()});
    cuda::wna16_pack_on_device(c, s, reinterpret_cast<uint32_t*>(words.raw()), want.word_count(),
                               pairs.data<float>(), want.param_count() / 2, nullptr);
    const Tensor got_words = host_of(words), got_pairs = host_of(pairs);
    EXPECT_EQ(std::memcmp(got_words.raw(), want.words.data(), want.words.size() * 4), 0);
    EXPECT_EQ(std::memcmp(got_pairs.raw(), want.params.data(), want.params.size() * 4), 0);
  }
}

// wna16_pack_scale_bytes_on_device (and the words of FP4 codes) against wna16_pack_e2m1 on the
// same random FP4 weights, MXFP4 and NVFP4 (globals per expert); a scale with no byte is found.
TEST(RandomQuantCuda, DevicePackingWritesTheHostPackingsFp4ScaleBytes) {
  MG_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const int64_t E = 3, N = 2 * 40, K = 384, parts = 2;
  const proto::TensorInfo info = info_of("w", {E, N, K / 2});
  for (const auto& [codes_kind, grid, group] :
       {std::tuple{cuda::Wna16Codes::kMxfp4, Fp4ScaleGrid::kE8M0, int64_t{32}},
        std::tuple{cuda::Wna16Codes::kNvfp4, Fp4ScaleGrid::kE4M3, int64_t{16}}}) {
    SCOPED_TRACE(static_cast<int>(codes_kind));
    const auto [codes, q] = random_fp4_weight(info, GroupShape{1, group}, 4, Device::cpu(), grid);
    std::vector<float> globals(E * parts, 1.0f);
    if (q.global_scale.defined()) {
      for (int64_t i = 0; i < E * parts; ++i) globals[i] = q.global_scale.data<float>()[i / parts];
    }
    const cuda::Wna16PackedHost want =
        cuda::wna16_pack_e2m1(codes_kind, static_cast<const uint8_t*>(codes.raw()),
                              q.scale.data<float>(), globals.data(), E, N, K, group, parts);
    Tensor d_codes = empty_tensor(gpu, codes.dtype(), codes.shape());
    copy_tensor(d_codes, codes);
    Tensor d_scale = empty_tensor(gpu, DType::kF32, q.scale.shape());
    copy_tensor(d_scale, q.scale);
    Tensor d_globals = empty_tensor(gpu, DType::kF32, {E * parts});
    MG_CUDA_CHECK(
        cudaMemcpy(d_globals.raw(), globals.data(), globals.size() * 4, cudaMemcpyHostToDevice));
    cuda::Wna16PackSource c;
    c.codes = static_cast<const uint8_t*>(d_codes.raw());
    c.row_bytes = K / 2;
    c.experts = E;
    c.rows = N;
    c.cols = K;
    c.parts = parts;
    c.part_rows = want.part_rows;
    c.k_steps = want.k_steps;
    cuda::Wna16ScaleByteSource s;
    s.scales = d_scale.data<float>();
    s.globals = codes_kind == cuda::Wna16Codes::kNvfp4 ? d_globals.data<float>() : nullptr;
    s.codes = codes_kind;
    s.scale_groups = q.scale.dim(2);
    s.group_size = group;
    s.experts = E;
    s.rows = N;
    s.cols = K;
    s.parts = parts;
    s.part_rows = want.part_rows;
    s.k_steps = want.k_steps;
    Tensor words = empty_tensor(gpu, DType::kI32, {want.word_count()});
    Tensor bytes = empty_tensor(gpu, DType::kU8, {want.scale_byte_count()});
    // {the first byte with no code, the largest byte} (8 bytes each).
    Tensor first_bad = empty_tensor(gpu, DType::kI64, {2});
    auto* largest = reinterpret_cast<unsigned int*>(first_bad.data<int64_t>() + 1);
    const auto none = static_cast<unsigned long long>(want.scale_byte_count());
    const unsigned long long start[2] = {none, 0};
    MG_CUDA_CHECK(cudaMemcpy(first_bad.raw(), start, 16, cudaMemcpyHostToDevice));
    cuda::wna16_pack_on_device(c, cuda::Wna16ParamSource{},
                               reinterpret_cast<uint32_t*>(words.raw()), want.word_count(), nullptr,
                               0, nullptr);
    cuda::wna16_pack_scale_bytes_on_device(
        s, static_cast<uint8_t*>(bytes.raw()), want.scale_byte_count(),
        static_cast<unsigned long long*>(first_bad.raw()), largest, nullptr);
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    unsigned long long found[2] = {};
    MG_CUDA_CHECK(cudaMemcpy(found, first_bad.raw(), 16, cudaMemcpyDeviceToHost));
    EXPECT_EQ(found[0], none);
    EXPECT_EQ(found[1], *std::max_element(want.scale_bytes.begin(), want.scale_bytes.end()));
    unsigned long long bad = 0;
    const Tensor got_words = host_of(words), got_bytes = host_of(bytes);
    EXPECT_EQ(std::memcmp(got_words.raw(), want.words.data(), want.words.size() * 4), 0);
    EXPECT_EQ(std::memcmp(got_bytes.raw(), want.scale_bytes.data(), want.scale_bytes.size()), 0);
    // One scale off its grid (x 1.3: no power of two or E4M3 value times 1.3 is one), found.
    std::vector<float> off(q.scale.data<float>(), q.scale.data<float>() + q.scale.numel());
    off[0] *= 1.3f;
    MG_CUDA_CHECK(cudaMemcpy(d_scale.raw(), off.data(), off.size() * 4, cudaMemcpyHostToDevice));
    MG_CUDA_CHECK(cudaMemcpy(first_bad.raw(), &none, 8, cudaMemcpyHostToDevice));
    cuda::wna16_pack_scale_bytes_on_device(
        s, static_cast<uint8_t*>(bytes.raw()), want.scale_byte_count(),
        static_cast<unsigned long long*>(first_bad.raw()), largest, nullptr);
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    MG_CUDA_CHECK(cudaMemcpy(&bad, first_bad.raw(), 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(bad, 0u);  // scale 0 of row 0 is byte 0 (unit 0 / half 0 of step 0)
  }
}

// A graph-only model whose experts are above the size made on the GPU: the GPU run (BF16, codes
// made and repacked there by `backend`) against the CPU run (F32, codes made on the host).
void expect_gpu_matches_cpu(const std::vector<std::string>& flags, const std::string& backend) {
  const auto dir = testing::temp_dir("random-quant");
  std::vector<std::string> args = {"make-model", "--graph-only", "--out", dir.string(), "--layers",
                                   "2",          "--vocab",      "1024"};
  args.insert(args.end(), flags.begin(), flags.end());
  const testing::CommandResult made = testing::run_moegraph(args);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto open = [&](Device device) {
    CompileOptions c;
    c.device = device;
    if (device.is_cuda()) c.activation_dtype = DType::kBF16;
    c.max_tokens = 64;
    c.random_weights = 7;
    SessionOptions s;
    s.threads = 2;
    return Session::open(dir / "model.pbtxt", c, s);
  };
  const std::vector<int32_t> ids = {5, 17, 3, 90, 42, 8, 64, 1};
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  auto logits = [&](Session& s) {
    const Tensor& t = s.forward(ids, pos);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  auto cpu = open(Device::cpu());
  const std::vector<float> want = logits(*cpu);
  auto gpu = open(Device::cuda(0));
  bool chosen = false;
  for (const PlanNode& node : gpu->plan().nodes) {
    if (node.op == "moe") {
      EXPECT_THAT(node.kernel->describe(), ::testing::HasSubstr(backend + " (auto"));
      chosen = true;
    }
  }
  EXPECT_TRUE(chosen);
  const std::vector<float> got = logits(*gpu);
  // BF16 activations on the GPU against F32 on the CPU: the same weights, two layers of rounding
  // apart (and a near-tie expert choice may flip at a position); codes packed wrong would be ~1.
  EXPECT_LT(testing::normalized_error(got, want), 0.15);
}

TEST(RandomQuantCuda, Int4ModelWithCodesMadeOnTheGpuMatchesTheCpu) {
  MG_REQUIRE_GPU();
  expect_gpu_matches_cpu({"--family", "qwen3_moe", "--hidden", "512", "--moe-inter", "256",
                          "--experts", "32", "--topk", "4", "--quant", "int4-g128"},
                         "cuda_wna16");
}

TEST(RandomQuantCuda, Nvfp4ModelWithCodesMadeOnTheGpuMatchesTheCpu) {
  MG_REQUIRE_GPU();
  expect_gpu_matches_cpu({"--family", "qwen3_moe", "--hidden", "512", "--moe-inter", "256",
                          "--experts", "32", "--topk", "4", "--quant", "nvfp4"},
                         "cuda_fp4");
}

TEST(RandomQuantCuda, GptOssMxfp4ModelWithCodesMadeOnTheGpuMatchesTheCpu) {
  MG_REQUIRE_GPU();
  expect_gpu_matches_cpu(
      {"--family", "gpt_oss", "--hidden",         "512", "--moe-inter", "256", "--experts",  "32",
       "--topk",   "4",       "--heads",          "8",   "--kv-heads",  "2",   "--head-dim", "64",
       "--quant",  "mxfp4",   "--sliding-window", "4"},
      "cuda_fp4");
}

}  // namespace
}  // namespace mg

#endif  // MG_WITH_CUDA
