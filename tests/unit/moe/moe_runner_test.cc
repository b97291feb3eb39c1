// MoERunner's side stream: whatever way a step ends, the main stream waits for the shared experts
// queued on the side stream. An experts kernel that refuses a batch throws after the shared
// experts were queued; without the join, a GPU would keep running them into the next forward's
// reuse of the same workspace (the kernel-variants CUDA test saw wrong outputs of the first
// accepted batch that way when other processes slowed the GPU).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "framework/device/stream.h"
#include "ops/moe/experts/cpu_monolithic_experts.h"
#include "ops/moe/kernel/fused_moe_kernel.h"
#include "ops/moe/kernel/prepare_finalize.h"
#include "ops/moe/moe_params.h"
#include "ops/moe/router/router.h"
#include "ops/moe/runner/moe_runner.h"
#include "ops/moe/runner/shared_experts.h"
#include "tests/testing/test_util.h"
#include "tests/unit/moe/moe_node_util.h"

namespace mg {
namespace {

// A CPU stream that only has a name, and events that log which stream they touch.
class NamedStream final : public Stream {
 public:
  explicit NamedStream(std::string name) : name(std::move(name)) {}
  Device device() const override { return Device::cpu(); }
  void synchronize() override {}
  std::string name;
};

class LoggingEvent final : public Event {
 public:
  LoggingEvent(std::string name, std::vector<std::string>* log)
      : name_(std::move(name)), log_(log) {}
  void record(Stream& s) override { log_->push_back(name_ + " recorded on " + named(s)); }
  void wait_on(Stream& s) override { log_->push_back(named(s) + " waits for " + name_); }
  void synchronize() override {}
  double elapsed_us_since(const Event&) const override { return 0.0; }

 private:
  static std::string named(Stream& s) { return static_cast<NamedStream&>(s).name; }
  std::string name_;
  std::vector<std::string>* log_;
};

// Monolithic experts that refuse every batch, as a forced CUDA kernel refuses a token count.
class RefusingExperts final : public ExpertsMonolithic {
 public:
  RefusingExperts() : ExpertsMonolithic(cpu_monolithic_backend()) {}
  size_t workspace_bytes(int64_t) const override { return 0; }
  void apply(const DispatchedLogits&, Workspace&, const MoEExecContext&) override {
    MG_FAIL("this kernel refuses {} tokens", 3);
  }
};

TEST(MoERunnerSideStream, TheMainStreamWaitsForTheSharedExpertsWhenTheExpertsThrow) {
  const moe_test::MoENode n = moe_test::make_moe_node("qwen2_moe", 8100);
  const MoEConfig config = moe_config_from_params(n.node.moe());
  ASSERT_TRUE(config.shared().present());
  const int64_t H = config.hidden_size();
  const std::vector<Tensor>& in = n.inputs;
  const ParallelConfig parallel;
  const ExpertsShape shape = local_experts_shape(config, parallel);
  MoERunner runner(
      config, parallel,
      make_router(Device::cpu(), config.routing(), H, DType::kF32, in[moe_input::kRouterWeight],
                  in[moe_input::kRouterBias], in[moe_input::kScoreCorrectionBias]),
      std::make_unique<FusedMoEKernel>(make_prepare_finalize(parallel, shape),
                                       std::make_unique<RefusingExperts>()),
      make_shared_experts(Device::cpu(), config.shared(), H, DType::kF32, 1, 0,
                          in[moe_input::kSharedGate], in[moe_input::kSharedUp],
                          in[moe_input::kSharedDown], in[moe_input::kSharedExpertGate],
                          std::nullopt));

  std::vector<std::string> log;
  NamedStream main_stream("main"), side_stream("side");
  LoggingEvent fork("fork", &log), join("join", &log);
  ThreadPool pool(1);
  MoERunContext ctx;
  ctx.pool = &pool;
  ctx.stream = &main_stream;
  ctx.side_stream = &side_stream;
  ctx.fork = &fork;
  ctx.join = &join;

  const int64_t M = 3;
  const Tensor x = testing::random_tensor({M, H}, 8101);
  Tensor out = Tensor::empty_cpu(DType::kF32, {M, H});
  std::vector<std::byte> ws(runner.workspace_bytes(M));
  try {
    runner.forward(x.raw(), M, out.raw(), ws.data(), ws.size(), ctx);
    ADD_FAILURE() << "the refusing experts did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refuses 3 tokens"), std::string::npos) << e.what();
  }
  const std::vector<std::string> expected = {"fork recorded on main", "side waits for fork",
                                             "join recorded on side", "main waits for join"};
  EXPECT_EQ(log, expected);
}

}  // namespace
}  // namespace mg
