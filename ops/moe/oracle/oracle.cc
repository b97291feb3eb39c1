#include "ops/moe/oracle/oracle.h"

#include <optional>

#include "framework/core/logging.h"
#include "framework/device/allocator.h"
#include "ops/moe/kernel/prepare_finalize.h"
#include "ops/moe/oracle/fp4.h"
#include "ops/moe/oracle/fp8.h"
#include "ops/moe/oracle/unquantized.h"
#include "ops/moe/oracle/wna16.h"

namespace mg {

namespace {

bool is_auto(std::string_view requested) {
  return requested.empty() || requested == "auto";
}

std::string names_of(std::span<const ExpertsBackend* const> priority) {
  std::string names;
  for (const ExpertsBackend* b : priority) {
    if (!names.empty()) names += ", ";
    names += b->name();
  }
  return names.empty() ? "none" : names;
}

std::string verdict_list(const std::vector<BackendVerdict>& verdicts) {
  std::string s;
  for (const BackendVerdict& v : verdicts) s += fmt::format("\n  {}: {}", v.name, v.reason);
  return s;
}

// Expert codes made on a GPU (random weights: place-weights makes integer and FP4 codes there)
// reach only the backends that repack them there, and only whole layers (`whole`: every expert
// and the full width on this rank); anything else gets them in host memory.
RawExpertWeights for_backend(const RawExpertWeights& raw, const ExpertsBackend& backend,
                             bool whole) {
  if (whole && backend.takes_device_codes()) return raw;
  RawExpertWeights out = raw;
  for (Tensor* t : {&out.w13, &out.w13_bias, &out.w2, &out.w2_bias, &out.w13_quant.scale,
                    &out.w13_quant.zero_point, &out.w2_quant.scale, &out.w2_quant.zero_point}) {
    *t = to_host_tensor(*t);
  }
  return out;
}

}  // namespace

BackendRequest split_backend_request(std::string_view requested) {
  const size_t colon = requested.find(':');
  if (colon == std::string_view::npos) return {requested, {}};
  return {requested.substr(0, colon), requested.substr(colon + 1)};
}

std::string check_backend(const ExpertsBackend& b, const OracleQuery& q) {
  auto failed = [](std::string_view check, std::string reason) {
    return reason.empty() ? reason : fmt::format("{}: {}", check, reason);
  };
  std::string r;
  if (!(r = failed("device", b.check_device(q.device))).empty()) return r;
  if (!(r = failed("quant", b.check_quant(q.quant))).empty()) return r;
  if (!(r = failed("activation", b.check_activation(q.config.activation()))).empty()) return r;
  if (b.is_monolithic()) {
    if (!(r = failed("routing", b.check_routing(q.config.routing()))).empty()) return r;
  }
  if (!(r = failed("parallel", b.check_parallel(q.parallel))).empty()) return r;
  if (!(r = failed("shape", b.check_shape(q.shape))).empty()) return r;
  if (q.weights != nullptr) {
    if (!(r = failed("weights", b.check_weights(*q.weights, q.shape))).empty()) return r;
  }
  const ActivationFormat format = prepare_finalize_format(q.parallel);
  if (b.activation_format() != format) {
    return fmt::format("activation format: takes {} tokens, but prepare/finalize {} ({}) gives {}",
                       activation_format_name(b.activation_format()),
                       prepare_finalize_name(q.parallel), q.parallel.str(),
                       activation_format_name(format));
  }
  return {};
}

OracleChoice select_backend(std::span<const ExpertsBackend* const> priority, const OracleQuery& q) {
  OracleChoice choice;
  choice.prepare_finalize = std::string(prepare_finalize_name(q.parallel));
  for (const ExpertsBackend* b : priority) {
    choice.verdicts.push_back({std::string(b->name()), check_backend(*b, q)});
  }
  if (!is_auto(q.requested)) {
    const BackendRequest request = split_backend_request(q.requested);
    for (size_t i = 0; i < priority.size(); ++i) {
      if (priority[i]->name() != request.backend) continue;
      MG_CHECK(choice.verdicts[i].reason.empty(),
               "MoE backend '{}' was requested but cannot run "
               "this node: {}",
               request.backend, choice.verdicts[i].reason);
      const std::string why = priority[i]->check_kernel(request.kernel, q.shape, q.device);
      MG_CHECK(why.empty(), "MoE backend '{}' was requested with kernel '{}', which cannot run: {}",
               request.backend, request.kernel, why);
      choice.backend = priority[i];
      choice.requested = true;
      choice.kernel = std::string(request.kernel);
      return choice;
    }
    MG_FAIL("unknown MoE backend '{}' for {}; known backends: {}", request.backend, q.device.str(),
            names_of(priority));
  }
  for (size_t i = 0; i < priority.size(); ++i) {
    if (!choice.verdicts[i].reason.empty()) {
      MG_LOG_DEBUG("oracle", "MoE backend {} rejected: {}", priority[i]->name(),
                   choice.verdicts[i].reason);
      continue;
    }
    choice.backend = priority[i];
    return choice;
  }
  MG_FAIL("no MoE backend can run this node on {} ({}; quant {}; {}):{}", q.device.str(),
          q.config.str(), q.quant.str(), q.parallel.str(),
          priority.empty() ? std::string(" no backend is built for this device")
                           : verdict_list(choice.verdicts));
}

std::string OracleChoice::describe() const {
  std::string s =
      fmt::format("{} ({}{}, prepare/finalize {})", backend ? backend->name() : "none",
                  requested ? "requested" : "auto",
                  kernel.empty() ? std::string() : ", kernel " + kernel, prepare_finalize);
  for (const BackendVerdict& v : verdicts) {
    if (backend && v.name == backend->name()) continue;
    s += fmt::format(
        "\n  {}: {}", v.name,
        v.reason.empty() ? std::string("fits, lower priority") : "rejected, " + v.reason);
  }
  return s;
}

void check_quant_scheme_supported(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kUnquantized:
    case QuantScheme::kFp8PerTensor:
    case QuantScheme::kFp8Block:
    case QuantScheme::kFp8PerChannel:
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
    case QuantScheme::kInt8WeightOnly:
    case QuantScheme::kInt4WeightOnly:
      return;
  }
}

MoEKernelBuild build_moe_kernel(const MoEConfig& config, const ParallelConfig& parallel,
                                Device device, DType activation_dtype, std::string_view requested,
                                const RawExpertWeights& raw, const Tensor& score_correction_bias,
                                bool quantize_activations) {
  check_quant_scheme_supported(config.quant_scheme());
  ExpertsShape shape = local_experts_shape(config, parallel);
  shape.dtype = activation_dtype;
  const bool quantized = config.quant_scheme() != QuantScheme::kUnquantized;
  const bool fp4 = is_fp4_scheme(config.quant_scheme());  // ops/moe/oracle/fp4.h
  const bool wna16 = is_wna16_scheme(config.quant_scheme());
  const MoEQuantConfig quant =
      fp4         ? fp4_quant_config(config, raw, activation_dtype)
      : wna16     ? wna16_quant_config(config, raw, activation_dtype)
      : quantized ? fp8_quant_config(config, raw, activation_dtype, quantize_activations)
                  : MoEQuantConfig::unquantized(activation_dtype);
  const std::vector<const ExpertsBackend*> priority = fp4         ? fp4_priority(device)
                                                      : wna16     ? wna16_priority(device)
                                                      : quantized ? fp8_priority(device)
                                                                  : unquantized_priority(device);
  // WNA16 backends check each matrix's groups and act-order, FP4 ones that every scale has a
  // byte (ExpertsBackend::check_weights).
  const std::optional<ExpertWeightFacts> facts =
      fp4     ? std::optional(fp4_weight_facts(raw, config.quant_scheme()))
      : wna16 ? std::optional(wna16_weight_facts(raw))
              : std::nullopt;
  const OracleQuery query{
      device, config, quant, parallel, shape, requested, facts ? &*facts : nullptr};
  MoEKernelBuild out;
  out.choice = select_backend(priority, query);
  ExpertsBuild build{config, shape, device, {}, score_correction_bias, out.choice.kernel, quant};
  const bool whole = is_whole_layer(config, shape);
  if (fp4) {
    build.quantized =
        convert_fp4_weights(config, parallel, shape, for_backend(raw, *out.choice.backend, whole));
  } else if (wna16) {
    build.quantized = convert_wna16_weights(config, parallel, shape,
                                            for_backend(raw, *out.choice.backend, whole));
  } else if (quantized) {
    build.quantized = convert_fp8_weights(config, parallel, shape, raw);
  } else {
    build.weights = convert_unquantized_weights(config, parallel, shape, raw);
  }
  std::unique_ptr<Experts> experts = out.choice.backend->create(std::move(build));
  out.kernel =
      std::make_unique<FusedMoEKernel>(make_prepare_finalize(parallel, shape), std::move(experts));
  return out;
}

}  // namespace mg
