#include "tools/bench/decode_floor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/io/proto_dtype.h"
#include "ops/moe/moe_params.h"
#ifdef MG_WITH_CUDA
#include "framework/device/allocator.h"
#include "ops/moe/bench/moe_bench_cuda.h"
#endif

namespace mg {

namespace {

double numel(const proto::TensorInfo& t) {
  double n = 1;
  for (int64_t d : t.shape()) n *= static_cast<double>(d);
  return n;
}

// Elements of the real values: a quantized tensor's logical shape (integer codes), two per byte
// for FP4 E2M1, else the stored shape.
double logical_numel(const proto::TensorInfo& t) {
  if (!t.has_quantization()) return numel(t);
  const proto::TensorQuantization& q = t.quantization();
  if (q.logical_shape_size() > 0) {
    double n = 1;
    for (int64_t d : q.logical_shape()) n *= static_cast<double>(d);
    return n;
  }
  return q.element() == proto::QUANT_ELEMENT_FP4_E2M1 ? 2 * numel(t) : numel(t);
}

bool is_routed_expert_input(int k) {
  return k == static_cast<int>(moe_input::kW13) || k == static_cast<int>(moe_input::kW13Bias) ||
         k == static_cast<int>(moe_input::kW2) || k == static_cast<int>(moe_input::kW2Bias);
}

// The weight bytes a forward reads: every tensor but those only an embedding looks up, the
// routed experts' at `expert_fraction(moe params)` of their bytes.
template <typename Fraction>
DecodeWeightBytes weight_bytes(const proto::Model& model, DType activation_dtype,
                               Fraction expert_fraction_of) {
  const double act = static_cast<double>(dtype_size(activation_dtype));
  std::map<std::string, const proto::TensorInfo*> tensors;
  for (const proto::TensorInfo& t : model.tensors()) tensors[t.name()] = &t;
  // Quantized tensors and the tensors their quantization names count their stored bytes.
  std::map<std::string, double> stored_bytes;
  auto add_stored = [&](const std::string& name) {
    const auto it = tensors.find(name);
    if (name.empty() || it == tensors.end()) return;
    stored_bytes[name] =
        numel(*it->second) *
        static_cast<double>(dtype_size(from_proto(it->second->dtype(), "decode floor: " + name)));
  };
  std::map<std::string, std::vector<std::string>> aux_of;  // quantized tensor -> its scales etc.
  for (const proto::TensorInfo& t : model.tensors()) {
    if (!t.has_quantization()) continue;
    const proto::TensorQuantization& q = t.quantization();
    add_stored(t.name());
    for (const std::string& aux :
         {q.scale(), q.zero_point(), q.g_idx(), q.global_scale(), q.activation_scale()}) {
      if (aux.empty()) continue;
      add_stored(aux);
      aux_of[t.name()].push_back(aux);
    }
  }
  auto bytes_of = [&](const std::string& name) {
    const auto s = stored_bytes.find(name);
    if (s != stored_bytes.end()) return s->second;
    return numel(*tensors.at(name)) * act;
  };

  // Routed-expert tensors, with the fraction of them a forward reads.
  std::map<std::string, double> expert_fraction;
  std::set<std::string> embedding_only, used_elsewhere;
  for (const proto::Node& node : model.nodes()) {
    if (node.op() == "embedding" && node.inputs_size() > 1) {
      embedding_only.insert(node.inputs(1));
    } else {
      for (const std::string& in : node.inputs()) used_elsewhere.insert(in);
    }
    if (!node.has_moe()) continue;
    const double fraction = expert_fraction_of(node.moe());
    for (int k = 0; k < node.inputs_size(); ++k) {
      if (!is_routed_expert_input(k) || node.inputs(k).empty()) continue;
      const std::string& name = node.inputs(k);
      expert_fraction[name] = fraction;
      for (const std::string& aux : aux_of[name]) expert_fraction[aux] = fraction;
    }
  }

  DecodeWeightBytes out;
  for (const proto::TensorInfo& t : model.tensors()) {
    const std::string& name = t.name();
    if (embedding_only.count(name) && !used_elsewhere.count(name)) continue;
    const double bytes = bytes_of(name);
    const auto e = expert_fraction.find(name);
    const double read = e == expert_fraction.end() ? bytes : bytes * e->second;
    (e == expert_fraction.end() ? out.dense : out.experts) += read;
    if (stored_bytes.count(name)) out.quantized += read;
  }
  return out;
}

// Σ over queries t = 0..T-1 of the keys query t sees: t + 1, at most `window` back, within its
// chunk of `chunk` positions.
double visible_pairs(int64_t T, int64_t window, int64_t chunk) {
  double pairs = 0;
  for (int64_t t = 0; t < T; ++t) {
    int64_t keys = t + 1;
    if (window > 0) keys = std::min(keys, window);
    if (chunk > 0) keys = std::min(keys, t % chunk + 1);
    pairs += static_cast<double>(keys);
  }
  return pairs;
}

}  // namespace

DecodeWeightBytes decode_weight_bytes(const proto::Model& model, DType activation_dtype) {
  return weight_bytes(model, activation_dtype, [](const proto::MoEParams& moe) {
    return static_cast<double>(moe.top_k()) /
           static_cast<double>(std::max<int64_t>(1, moe.num_experts()));
  });
}

PrefillWork prefill_work(const proto::Model& model, DType activation_dtype, int64_t tokens) {
  MG_CHECK(tokens > 0, "prefill floor: {} tokens", tokens);
  const double T = static_cast<double>(tokens);
  PrefillWork w;
  w.bytes = decode_weight_bytes(model, activation_dtype).total();
  w.bytes_uniform = weight_bytes(model, activation_dtype, [T](const proto::MoEParams& moe) {
                      const double E = static_cast<double>(std::max<int64_t>(1, moe.num_experts()));
                      const double k = std::min(static_cast<double>(moe.top_k()), E);
                      return 1.0 - std::pow(1.0 - k / E, T);
                    }).total();

  std::map<std::string, const proto::TensorInfo*> tensors;
  for (const proto::TensorInfo& t : model.tensors()) tensors[t.name()] = &t;
  std::set<std::string> graph_outputs;
  for (const proto::ValueInfo& v : model.outputs()) graph_outputs.insert(v.name());
  for (const proto::Node& node : model.nodes()) {
    if (node.op() == "embedding") continue;
    if (node.has_attention()) {
      const proto::AttentionParams& a = node.attention();
      const double dv = static_cast<double>(a.v_head_dim() > 0 ? a.v_head_dim() : a.head_dim());
      w.flops += 2.0 * (static_cast<double>(a.head_dim()) + dv) *
                 static_cast<double>(a.num_heads()) *
                 visible_pairs(tokens, a.sliding_window(), a.chunk_size());
      continue;
    }
    bool writes_output = false;
    for (const std::string& out : node.outputs()) writes_output |= graph_outputs.count(out) > 0;
    const double rows = writes_output ? 1.0 : T;
    for (int k = 0; k < node.inputs_size(); ++k) {
      const auto it = tensors.find(node.inputs(k));
      if (it == tensors.end() || it->second->shape_size() < 2) continue;  // values, biases, norms
      double r = rows;
      if (node.has_moe() && is_routed_expert_input(k)) {
        r = T * static_cast<double>(node.moe().top_k()) /
            static_cast<double>(std::max<int64_t>(1, node.moe().num_experts()));
      }
      w.flops += 2.0 * r * logical_numel(*it->second);
    }
  }
  return w;
}

double measure_copy_bandwidth(const Device& device) {
#ifdef MG_WITH_CUDA
  if (device.is_cuda()) {
    // Said before any CUDA call, as bench moe does.
    MG_CHECK(cuda_device_count() > 0,
             "--device {}: this machine has no CUDA GPU (--device cpu runs on the CPU)",
             device.str());
    return measure_moe_bench_ceilings().copy_bytes_per_s;
  }
#endif
  (void)device;
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / s);
    a[static_cast<size_t>(i)] = b[bytes - 1];  // keep the copies observable
  }
  return best;
}

DeviceCeilings measure_device_ceilings(const Device& device) {
#ifdef MG_WITH_CUDA
  if (device.is_cuda()) {
    MG_CHECK(cuda_device_count() > 0,
             "--device {}: this machine has no CUDA GPU (--device cpu runs on the CPU)",
             device.str());
    const MoEBenchCeilings c = measure_moe_bench_ceilings();
    return {c.copy_bytes_per_s, c.bf16_flops_per_s};
  }
#endif
  return {measure_copy_bandwidth(device), 0.0};
}

}  // namespace mg
