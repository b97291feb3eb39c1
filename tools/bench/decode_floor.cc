#include "tools/bench/decode_floor.h"

#include <algorithm>
#include <chrono>
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

DecodeWeightBytes decode_weight_bytes(const proto::Model& model, DType activation_dtype) {
  const double act = static_cast<double>(dtype_size(activation_dtype));
  std::map<std::string, const proto::TensorInfo*> tensors;
  for (const proto::TensorInfo& t : model.tensors()) tensors[t.name()] = &t;
  auto numel = [](const proto::TensorInfo& t) {
    double n = 1;
    for (int64_t d : t.shape()) n *= static_cast<double>(d);
    return n;
  };
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

  // Routed-expert tensors, with the fraction of them a decode step reads.
  std::map<std::string, double> expert_fraction;
  std::set<std::string> embedding_only, used_elsewhere;
  for (const proto::Node& node : model.nodes()) {
    if (node.op() == "embedding" && node.inputs_size() > 1) {
      embedding_only.insert(node.inputs(1));
    } else {
      for (const std::string& in : node.inputs()) used_elsewhere.insert(in);
    }
    if (!node.has_moe()) continue;
    const double fraction = static_cast<double>(node.moe().top_k()) /
                            static_cast<double>(std::max<int64_t>(1, node.moe().num_experts()));
    for (size_t k : {moe_input::kW13, moe_input::kW13Bias, moe_input::kW2, moe_input::kW2Bias}) {
      if (static_cast<int>(k) >= node.inputs_size() || node.inputs(static_cast<int>(k)).empty()) {
        continue;
      }
      const std::string& name = node.inputs(static_cast<int>(k));
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

}  // namespace mg
