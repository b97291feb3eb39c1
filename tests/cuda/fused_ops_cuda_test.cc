// The fused ops on the GPU: add_rms_norm's kernel against the fp64 reference in every dtype
// (rows of up to 1024 take a warp, longer rows a block; odd and prime widths; 1..8 rows and many),
// and whole models compiled with the fuse-ops pass on and off giving the same logits on the
// device (the fused kernel repeats the unfused kernels' rounding and reduction order).
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/compile/fuse_ops.h"
#include "framework/import/hf_importer.h"
#include "framework/runtime/session.h"
#include "ops/nn/add_rms_norm/add_rms_norm.h"
#include "tests/cuda/cuda_test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

TEST(CudaFusedOps, AddRmsNormMatchesTheReferenceInEveryDtype) {
  MG_REQUIRE_GPU();
  struct Dims {
    int64_t rows, dim;
  };
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const Dims s : {Dims{1, 1}, Dims{1, 7}, Dims{3, 33}, Dims{2, 1024}, Dims{6, 1025},
                         Dims{8, 2048}, Dims{5, 4099}, Dims{300, 131}, Dims{4, 2047}}) {
      for (const bool weight : {true, false}) {
        SCOPED_TRACE(
            fmt::format("{} rows x {}, {}, weight {}", s.rows, s.dim, dtype_name(d.dtype), weight));
        proto::Node node;
        node.set_name("add+norm");
        node.set_op("add_rms_norm");
        node.mutable_rms_norm()->set_eps(1e-5f);
        node.mutable_rms_norm()->set_has_weight(weight);
        const uint32_t seed = static_cast<uint32_t>(s.rows * 977 + s.dim);
        const Tensor a = testing::round_through(
            testing::random_tensor({s.rows, s.dim}, seed, -3.0f, 2.0f), d.dtype);
        const Tensor b = testing::round_through(
            testing::random_tensor({s.rows, s.dim}, seed + 1, -1.0f, 1.0f), d.dtype);
        const Tensor w =
            testing::round_through(testing::random_tensor({s.dim}, seed + 2, 0.5f, 1.5f), d.dtype);
        std::vector<Tensor> inputs = {a, b};
        if (weight) inputs.push_back(w);
        testing::DeviceOp op(node, inputs, d.dtype);
        const std::vector<Tensor> out = op.run(inputs);
        ASSERT_EQ(out.size(), 2u);
        std::vector<float> sum(static_cast<size_t>(s.rows * s.dim)), y(sum.size());
        add_rms_norm_reference(a.data<float>(), b.data<float>(), 1.0f, s.rows, s.dim,
                               weight ? w.data<float>() : nullptr, 1e-5f, sum.data(), y.data());
        const auto span_of = [](const Tensor& t) {
          return std::span<const float>(t.data<float>(), static_cast<size_t>(t.numel()));
        };
        EXPECT_LE(testing::normalized_error(span_of(out[0]), sum), d.tolerance);
        EXPECT_LE(testing::normalized_error(span_of(out[1]), y), d.tolerance);
      }
    }
  }
}

std::shared_ptr<const ExecutionPlan> compile_for_gpu(const std::filesystem::path& model,
                                                     DType dtype, bool fuse) {
  const FuseOpsScope scope(fuse);
  CompileOptions options;
  options.device = Device::cuda(0);
  options.activation_dtype = dtype;
  options.max_tokens = 64;
  if (model.extension() == ".pbtxt") return compile_graph_file(model, options);
  HfImportResult imported = import_hf_checkpoint(model);
  return compile_model(std::move(imported.model), model / "model.pbtxt", options);
}

// Prompt logits, then three one-token decode steps (the GEMV path), concatenated.
std::vector<float> device_logits(std::shared_ptr<const ExecutionPlan> plan, bool cuda_graph) {
  SessionOptions so;
  so.threads = 2;
  so.cuda_graph = cuda_graph;
  Session s(std::move(plan), so);
  const std::vector<int32_t> prompt = {5, 17, 3, 9, 42, 8, 6, 1, 33};
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& t = s.forward(prompt, pos);
  std::vector<float> out(t.data<float>(), t.data<float>() + t.numel());
  for (int step = 0; step < 3; ++step) {
    const int32_t id = prompt[static_cast<size_t>(step)] + 1;
    const int32_t p = static_cast<int32_t>(prompt.size()) + step;
    const Tensor& d = s.forward(std::span(&id, 1), std::span(&p, 1));
    out.insert(out.end(), d.data<float>(), d.data<float>() + d.numel());
  }
  return out;
}

TEST(CudaFusedOps, LogitsAreTheSameWithTheFuseOpsPassOnAndOff) {
  MG_REQUIRE_GPU();
  const std::filesystem::path src(MG_SOURCE_DIR);
  for (const auto& model :
       {src / "models/tiny-llama/model.pbtxt", src / "models/tiny-moe/model.pbtxt",
        src / "tests/fixtures/hf/qwen3_moe", src / "tests/fixtures/hf/qwen3_moe_odd"}) {
    for (const DType dtype : {DType::kBF16, DType::kF32}) {
      for (const bool graph : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} cuda_graph {}", model.string(), dtype_name(dtype), graph));
        const std::vector<float> off = device_logits(compile_for_gpu(model, dtype, false), graph);
        const std::vector<float> on = device_logits(compile_for_gpu(model, dtype, true), graph);
        ASSERT_EQ(on.size(), off.size());
        // Same rounding and reduction order as the unfused kernels: equal up to the last bit in
        // practice; the bound leaves room for a reordered float sum without hiding a real bug.
        EXPECT_LE(testing::normalized_error(on, off), 1e-6);
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
