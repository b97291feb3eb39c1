// A linear with output_features (the fuse-ops pass's q/k/v, ops/nn/linear/linear_fusion.cc) on
// the GPU: each output equals the unfused linear of its rows of the weight run on the GPU where
// both take the same path (one split GEMV launch up to kGemvSplitChosenRows rows, which gives every
// block the unfused GEMV's warps per feature; the unfused per-block GEMMs above), and the fp64
// reference within the dtype's tolerance at every row count (a wide block's unfused linear takes
// cuBLASLt from 3 rows, where the split GEMV still runs: a rounding apart),
// on q/k/v-like shapes, small and odd ones, with and without bias and scale, in every dtype; and
// whole imported models with the rewrite applied give the unfused graph's logits in BF16 and F32,
// with and without CUDA graphs.
#include <gtest/gtest.h>

#include <algorithm>

#include "framework/compile/compiler.h"
#include "framework/import/hf_importer.h"
#include "framework/io/graph_loader.h"
#include "framework/runtime/session.h"
#include "ops/nn/linear/linear.h"
#include "tests/cuda/cuda_test_util.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/linear/linear_gemv_cuda.h"
#endif
#include "tests/testing/session_logits.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

std::span<const float> span_of(const Tensor& t) {
  return {t.data<float>(), static_cast<size_t>(t.numel())};
}

proto::Node linear_node(const std::string& name, bool bias, float scale,
                        const std::vector<int64_t>& features) {
  proto::Node node;
  node.set_name(name);
  node.set_op("linear");
  node.mutable_linear()->set_has_bias(bias);
  if (scale != 1.0f) node.mutable_linear()->set_scale(scale);
  if (features.size() > 1) {
    for (const int64_t n : features) node.mutable_linear()->add_output_features(n);
  }
  for (size_t i = 0; i < features.size(); ++i) node.add_outputs(fmt::format("y{}", i));
  return node;
}

// fp64 (x w[first, first + n)ᵀ + b) * scale.
std::vector<float> reference_block(const Tensor& x, const Tensor& w, const Tensor* b, int64_t first,
                                   int64_t n, float scale) {
  const int64_t rows = x.dim(0), in = x.dim(1);
  std::vector<float> y(static_cast<size_t>(rows * n));
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0.0;
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x.data<float>()[t * in + i]) *
               w.data<float>()[(first + o) * in + i];
      }
      if (b) acc += b->data<float>()[first + o];
      y[static_cast<size_t>(t * n + o)] = static_cast<float>(acc * scale);
    }
  }
  return y;
}

TEST(CudaFusedLinear, EachOutputIsTheUnfusedLinearOfItsRows) {
  MG_REQUIRE_GPU();
  struct Shape3 {
    int64_t in;
    std::vector<int64_t> features;
  };
  const std::vector<Shape3> shapes = {
      {2048, {1024, 256, 256}},  // q/k/v of a GQA layer, scaled down
      {2048, {2048, 256, 256}},  // a wide q block: cuBLASLt alone from 3 rows
      {2048, {512, 512}},        // two narrow blocks: several warps per feature each
      {64, {32, 16, 16}},        // the test decoders' q/k/v
      {256, {40, 24, 8, 8}},     // small blocks, four outputs
      {96, {7, 5}},              // rows of odd widths: cuBLAS per block, no split GEMV
  };
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const Shape3& s : shapes) {
      int64_t out = 0;
      for (const int64_t n : s.features) out += n;
      for (const int64_t rows : {1, 2, 3, 4, 5, 17}) {
        for (const bool bias : {false, true}) {
          for (const float scale : {1.0f, 0.5f}) {
            SCOPED_TRACE(fmt::format("{} rows x in {} -> [{}], {}, bias {}, scale {}", rows, s.in,
                                     fmt::join(s.features, ", "), dtype_name(d.dtype), bias,
                                     scale));
            const uint32_t seed = static_cast<uint32_t>(s.in * 31 + out * 7 + rows);
            const Tensor x =
                testing::round_through(testing::random_tensor({rows, s.in}, seed), d.dtype);
            const Tensor w =
                testing::round_through(testing::random_tensor({out, s.in}, seed + 1), d.dtype);
            const Tensor b =
                testing::round_through(testing::random_tensor({out}, seed + 2), d.dtype);
            std::vector<Tensor> inputs = {x, w};
            if (bias) inputs.push_back(b);
            testing::DeviceOp fused(linear_node("qkv", bias, scale, s.features), inputs, d.dtype);
            const bool aligned = (s.in * static_cast<int64_t>(dtype_size(d.dtype))) % 16 == 0 &&
                                 std::all_of(s.features.begin(), s.features.end(), [&](int64_t n) {
                                   return (n * static_cast<int64_t>(dtype_size(d.dtype))) % 16 == 0;
                                 });
            // The split GEMV's rows: every block's own rule, at least kGemvSplitChosenRows.
            int64_t split_rows = cuda::kGemvMaxRows;
            for (const int64_t n : s.features) {
              split_rows = std::min(split_rows, cuda::gemv_chosen_rows(n));
            }
            split_rows = std::max(split_rows, cuda::kGemvSplitChosenRows);
            EXPECT_EQ(fused.kernel().describe().find(
                          fmt::format("one GEMV up to {} rows", split_rows)) != std::string::npos,
                      aligned)
                << fused.kernel().describe();
            const bool fused_gemv = aligned && rows <= split_rows;
            const std::vector<Tensor> got = fused.run(inputs);
            ASSERT_EQ(got.size(), s.features.size());
            int64_t first = 0;
            for (size_t i = 0; i < s.features.size(); ++i) {
              const int64_t n = s.features[i];
              SCOPED_TRACE(
                  fmt::format("output {} (rows {}..{} of the weight)", i, first, first + n));
              std::vector<Tensor> alone = {x, w.slice_rows(first, first + n)};
              if (bias) alone.push_back(b.slice_rows(first, first + n));
              testing::DeviceOp unfused(linear_node("proj", bias, scale, {n}), alone, d.dtype);
              const std::vector<Tensor> want = unfused.run(alone);
              // Where both take the GEMV, or both cuBLAS, the unfused kernels' own reduction order
              // and rounding: the same values (a bound only so a reordered float sum would not
              // hide behind a crash; in practice 0).
              if (fused_gemv == (aligned && rows <= cuda::gemv_chosen_rows(n))) {
                EXPECT_LE(testing::normalized_error(span_of(got[i]), span_of(want[0])), 1e-6);
              }
              EXPECT_LE(
                  testing::normalized_error(
                      span_of(got[i]), reference_block(x, w, bias ? &b : nullptr, first, n, scale)),
                  d.tolerance);
              first += n;
            }
          }
        }
      }
    }
  }
}

proto::Model model_of(const std::filesystem::path& model) {
  if (model.extension() == ".pbtxt") return load_graph(model);
  return import_hf_checkpoint(model).model;
}

// Prompt logits, then three one-token decode steps (the split GEMV), concatenated.
std::vector<float> device_logits(const proto::Model& model, const std::filesystem::path& path,
                                 DType dtype, bool cuda_graph) {
  CompileOptions options;
  options.fuse_ops = false;  // the linear rewrite alone: applied by hand or not at all
  options.device = Device::cuda(0);
  options.activation_dtype = dtype;
  options.max_tokens = 64;
  SessionOptions so;
  so.threads = 2;
  so.cuda_graph = cuda_graph;
  Session s(
      compile_model(model, path.extension() == ".pbtxt" ? path : path / "model.pbtxt", options),
      so);
  return testing::prompt_and_decode_logits(s);
}

TEST(CudaFusedLinear, ModelLogitsAreTheSameWithQkvFusedAndNot) {
  MG_REQUIRE_GPU();
  const std::filesystem::path src(MG_SOURCE_DIR);
  for (const auto& path : {src / "models/tiny-moe/model.pbtxt", src / "tests/fixtures/hf/qwen3_moe",
                           src / "tests/fixtures/hf/qwen2_moe", src / "tests/fixtures/hf/mixtral",
                           src / "tests/fixtures/hf/deepseek_v2_lite"}) {
    const proto::Model unfused = model_of(path);
    proto::Model fused = unfused;
    ASSERT_GT(fuse_sibling_linears(fused), 0) << path;
    for (const DType dtype : {DType::kBF16, DType::kF32}) {
      for (const bool graph : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} cuda_graph {}", path.string(), dtype_name(dtype), graph));
        const std::vector<float> off = device_logits(unfused, path, dtype, graph);
        const std::vector<float> on = device_logits(fused, path, dtype, graph);
        ASSERT_EQ(on.size(), off.size());
        // Every output of the fused linear is computed as its unfused linear computed it:
        // equal in practice; the bound leaves room for a reordered float sum only.
        EXPECT_LE(testing::normalized_error(on, off), 1e-6);
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
