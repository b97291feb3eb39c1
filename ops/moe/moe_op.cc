// op "moe": parses the node, compiles it (oracle -> FusedMoEKernel -> MoERunner) and runs it.
#include <memory>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/stream.h"
#include "framework/op/op_registry.h"
#include "ops/moe/moe_params.h"
#include "ops/moe/oracle/oracle.h"
#include "ops/moe/runner/moe_runner.h"

namespace mg {

namespace {

// Per session: the side stream the shared experts run on and the events that fork and join it
// (nodes with shared experts), and the router's arrival counters (Router::route_counters: the
// fused gate + route launch; zeroed here once, and every launch leaves them zero). Per session
// rather than per kernel: sessions that share the kernel may run at the same time.
class MoEState final : public OpState {
 public:
  MoEState(Device device, bool side, int64_t route_counters) {
    if (side) {
      side_stream = make_stream(device);
      fork = make_event(device);
      join = make_event(device);
    }
    // A blocking copy of zeros: done before the session's (non-blocking) stream runs anything.
    if (route_counters > 0) {
      counters = to_device_tensor(Tensor::empty_cpu(DType::kI32, {route_counters}), device);
    }
  }
  std::unique_ptr<Stream> side_stream;  // or null
  std::unique_ptr<Event> fork;
  std::unique_ptr<Event> join;
  Tensor counters;  // [route_counters] on the device, or undefined
};

class MoEKernel final : public OpKernel {
 public:
  MoEKernel(std::unique_ptr<MoERunner> runner, DType dtype, int64_t hidden_size, bool has_shared,
            std::string description)
      : runner_(std::move(runner)),
        dtype_(dtype),
        hidden_size_(hidden_size),
        has_shared_(has_shared),
        description_(std::move(description)) {}

  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[moe_input::kX];
    MG_CHECK(x.dtype() == dtype_ && x.rank() == 2 && x.dim(1) == hidden_size_,
             "op moe: input x must be {}[T, {}], got {}", dtype_name(dtype_), hidden_size_,
             x.str());
    MoERunContext rc;
    rc.pool = ctx.pool;
    rc.stream = ctx.stream;
    rc.comm = ctx.comm;
    if (auto* state = dynamic_cast<MoEState*>(ctx.state)) {
      rc.side_stream = state->side_stream.get();
      rc.fork = state->fork.get();
      rc.join = state->join.get();
      if (state->counters.defined()) {
        rc.route_counters = static_cast<unsigned*>(state->counters.raw());
      }
    }
    runner_->forward(x.raw(), x.dim(0), outputs[0].raw(), ctx.workspace, ctx.workspace_bytes, rc);
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    return runner_->workspace_bytes(max_tokens);
  }

  std::unique_ptr<OpState> create_state(const StateOptions& options) const override {
    const int64_t counters = runner_->router().route_counters();
    if (!has_shared_ && counters == 0) return nullptr;
    return std::make_unique<MoEState>(options.device, has_shared_, counters);
  }

  std::string describe() const override { return description_; }
  bool graph_capturable() const override { return runner_->kernel().experts().graph_capturable(); }

 private:
  std::unique_ptr<MoERunner> runner_;
  DType dtype_;
  int64_t hidden_size_;
  bool has_shared_;
  std::string description_;
};

class MoEOp final : public OpDef {
 public:
  std::string_view name() const override { return "moe"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kMoe; }
  std::span<const InputSpec> inputs() const override { return moe_input_specs(); }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const MoEConfig config = moe_config_from_params(node.moe());
    check_quant_scheme_supported(config.quant_scheme());
    check_moe_inputs(config, inputs);
    return {ValueType{DType::kF32, {kTokens, config.hidden_size()}}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    const MoEConfig config = moe_config_from_params(ctx.node.moe());
    check_moe_inputs(config, ctx.input_types);
    const ParallelConfig& parallel = ctx.options.parallel;
    auto weight = [&](size_t i) { return i < ctx.weights.size() ? ctx.weights[i] : Tensor(); };
    const Device device = ctx.options.device;
    const DType dtype = activation_dtype_of(ctx.options);
    // Raw (host, the checkpoint's dtype); the router and the monolithic experts want F32.
    auto raw_f32 = [&](size_t i) {
      const Tensor t = weight(i);
      return t.defined() ? to_f32_cpu(t) : t;
    };
    const Tensor router_bias = raw_f32(moe_input::kRouterBias);
    const Tensor score_bias = raw_f32(moe_input::kScoreCorrectionBias);
    // CompileOptions::moe_backend (moegraph --moe-backend) wins over the node's own choice.
    const std::string& requested =
        ctx.options.moe_backend.empty() ? config.backend() : ctx.options.moe_backend;
    auto quant = [&](size_t i) {
      return i < ctx.weight_quant.size() ? ctx.weight_quant[i] : WeightQuantization();
    };
    const RawExpertWeights raw{weight(moe_input::kW13), weight(moe_input::kW13Bias),
                               weight(moe_input::kW2),  weight(moe_input::kW2Bias),
                               quant(moe_input::kW13),  quant(moe_input::kW2)};
    MoEKernelBuild build = build_moe_kernel(config, parallel, device, dtype, requested, raw,
                                            score_bias, ctx.options.quantize_activations);
    std::unique_ptr<Router> router =
        make_router(device, config.routing(), config.hidden_size(), dtype,
                    weight(moe_input::kRouterWeight), router_bias, score_bias);
    std::unique_ptr<SharedExperts> shared;
    if (config.shared().present()) {
      // FP8 shared experts (their weights arrive dequantized) quantize their activations as the
      // checkpoint says when dense activations are quantized (CompileOptions).
      const std::optional<Fp8MlpActivationQuant> shared_act_quant = fp8_mlp_activation_quant(
          quant(moe_input::kSharedUp), quant(moe_input::kSharedDown),
          ctx.options.quantize_activations && ctx.options.quantize_dense_activations);
      shared = make_shared_experts(
          device, config.shared(), config.hidden_size(), dtype, parallel.tp_size(),
          parallel.tp_rank(), weight(moe_input::kSharedGate), weight(moe_input::kSharedUp),
          weight(moe_input::kSharedDown), weight(moe_input::kSharedExpertGate), shared_act_quant);
    }
    std::string description = build.choice.describe();
    if (!parallel.is_single_rank()) description += "\n  parallel: " + parallel.str();
    auto runner = std::make_unique<MoERunner>(config, parallel, std::move(router),
                                              std::move(build.kernel), std::move(shared));
    return std::make_unique<MoEKernel>(std::move(runner), dtype, config.hidden_size(),
                                       config.shared().present(), std::move(description));
  }
};

}  // namespace

void register_moe(OpRegistry& registry) {
  registry.add(std::make_unique<MoEOp>());
}

}  // namespace mg
