#include "framework/compile/compiler.h"

#include <chrono>

#include "framework/compile/fuse_ops.h"
#include "framework/compile/pass.h"
#include "framework/core/checked_math.h"
#include "framework/core/logging.h"
#include "framework/device/allocator.h"
#include "framework/io/graph_loader.h"

namespace mg {

std::unique_ptr<ExecutionPlan> compile_model(proto::Model model,
                                             const std::filesystem::path& source_file,
                                             const CompileOptions& options) {
  MG_CHECK(options.max_tokens >= 1 && options.max_tokens <= kMaxTokensPerForward,
           "max_tokens (--max-tokens): {} is out of range [1, {}]", options.max_tokens,
           kMaxTokensPerForward);
  MG_CHECK(options.max_seq_len >= 0 && options.max_seq_len <= kMaxSeqLen,
           "max_seq_len (--max-seq-len): {} is out of range [0, {}] (0: the model's own)",
           options.max_seq_len, kMaxSeqLen);
  check_device_exists(options.device);
  const DeviceScope on_device(options.device);  // weight uploads and conversions run on it
  CompileState state{Graph(std::move(model), source_file), options,
                     std::make_unique<WeightStore>(source_file), nullptr};
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_verify_pass());
  if (options.fuse_ops) passes.push_back(make_fuse_ops_pass());
  passes.push_back(make_infer_shapes_pass());
  passes.push_back(make_place_weights_pass());
  passes.push_back(make_select_kernels_pass());
  passes.push_back(make_plan_memory_pass());
  for (const auto& pass : passes) {
    const auto start = std::chrono::steady_clock::now();
    pass->run(state);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    MG_LOG_INFO("compile", "{}: {} took {:.1f} ms", state.graph.file_label(), pass->name(), ms);
  }
  return std::move(state.plan);
}

std::unique_ptr<ExecutionPlan> compile_graph_file(const std::filesystem::path& graph_file,
                                                  const CompileOptions& options) {
  return compile_model(load_graph(graph_file), graph_file, options);
}

}  // namespace mg
