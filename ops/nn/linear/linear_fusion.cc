// The graph rewrite that merges sibling linears (registered with the fuse-ops pass,
// framework/compile/fuse_ops.h, by register_linear):
//   linear (x, W_q, b_q -> q), linear (x, W_k, b_k -> k), linear (x, W_v, b_v -> v)
//   =>  linear (x, [W_q; W_k; W_v], [b_q; b_k; b_v] -> q, k, v), output_features [n_q, n_k, n_v]
// A decoder layer's q/k/v projections read the same normed hidden state (MLA: q_a with kv_a's
// latent and rope-key row ranges; kv_b's k_nope and v read the normed latent); at one token each
// is a memory-bound GEMV whose launch and ramp cost more than its bytes, so one GEMV over the
// concatenated weight saves two launches a layer.
//
// Why outputs of their own rather than one [T, n_q + n_k + n_v] value with strided column views
// or a `split` op after it: the consumers (qk_norm_rope, rope, rms_norm, attention) read dense
// [T, n] rows, and the graph IR's values are dense tensors with their own arena ranges; views
// would need a stride in every consumer and aliasing in the memory plan, and a split op would
// add back a launch and a copy of q/k/v. A linear with one output per row block keeps every
// downstream op and value unchanged; its kernels write each block where the unfused linear
// wrote it (one GEMV launch on CUDA, the unfused per-block GEMMs otherwise), so the fused graph
// computes the same floats.
//
// The weight (and bias) is a new TensorInfo whose parts are the originals' bytes in order: the
// weight store assembles it once at compile time, and the originals, no longer read by any node,
// are dropped from the graph, so they are never loaded beside the concatenation.
//
// Siblings merge when they read the same x and agree on everything else: weight dtype, bias
// present or not (and its dtype), scale. Left as written:
//   - quantized weights (their codes and scales would have to be concatenated per scheme);
//   - a weight or bias that another node also reads (a tied weight would be held twice);
//   - rows of x that are not a multiple of 8 elements: the GEMV needs 16-byte weight rows, and
//     with them every block of the concatenation starts 16-byte aligned as the unfused weights do,
//     so each GEMM path sees the operands it saw unfused;
//   - linears that already have output_features.
// More than kLinearMaxOutputs siblings are merged kLinearMaxOutputs at a time.
#include <algorithm>
#include <compare>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "framework/compile/fuse_ops.h"
#include "ops/nn/linear/linear.h"

namespace mg {

namespace {

// x rows (the weight's columns) must be a multiple of this many elements (see above).
constexpr int64_t kFusedRowMultiple = 8;

// What siblings must share to be merged (besides x).
struct SiblingKey {
  std::string x;
  int weight_dtype = 0;
  int bias_dtype = -1;  // -1: no bias
  bool has_scale = false;
  float scale = 1.0f;
  auto operator<=>(const SiblingKey&) const = default;
};

// Appends `t`'s bytes, as parts, to `fused`.
void append_parts(const proto::TensorInfo& t, proto::TensorInfo& fused) {
  if (t.parts_size() == 0) {
    proto::TensorPart* part = fused.add_parts();
    part->set_file(t.file());
    part->set_key(t.key().empty() ? t.name() : t.key());
    return;
  }
  for (const proto::TensorPart& p : t.parts()) {
    proto::TensorPart* part = fused.add_parts();
    *part = p;
    if (part->file().empty()) part->set_file(t.file());
  }
}

// A TensorInfo holding `infos` concatenated along their first dimension.
proto::TensorInfo concatenated(const std::vector<const proto::TensorInfo*>& infos,
                               const std::string& name) {
  proto::TensorInfo fused;
  fused.set_name(name);
  fused.set_dtype(infos[0]->dtype());
  fused.set_file(infos[0]->file());
  int64_t rows = 0;
  for (const proto::TensorInfo* t : infos) {
    rows += t->shape(0);
    append_parts(*t, fused);
  }
  fused.add_shape(rows);
  for (int d = 1; d < infos[0]->shape_size(); ++d) fused.add_shape(infos[0]->shape(d));
  return fused;
}

std::string joined_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : "+") + n;
  return out;
}

}  // namespace

int fuse_sibling_linears(proto::Model& model) {
  std::unordered_map<std::string, int> tensor_index;
  for (int i = 0; i < model.tensors_size(); ++i) tensor_index.emplace(model.tensors(i).name(), i);
  std::unordered_map<std::string, int> readers;
  for (const proto::Node& n : model.nodes()) {
    for (const std::string& in : n.inputs()) ++readers[in];
  }
  // Tensors another tensor's quantization names (scales, zero points, ...): never moved.
  std::unordered_set<std::string> named_by_quantization;
  for (const proto::TensorInfo& t : model.tensors()) {
    if (!t.has_quantization()) continue;
    const proto::TensorQuantization& q = t.quantization();
    for (const std::string& name :
         {q.scale(), q.zero_point(), q.global_scale(), q.activation_scale(), q.g_idx()}) {
      if (!name.empty()) named_by_quantization.insert(name);
    }
  }
  // The plain weight tensor `name` read only by one node, or null.
  auto movable_tensor = [&](const std::string& name, int rank) -> const proto::TensorInfo* {
    auto it = tensor_index.find(name);
    if (it == tensor_index.end() || readers[name] != 1 || named_by_quantization.count(name)) {
      return nullptr;
    }
    const proto::TensorInfo& t = model.tensors(it->second);
    if (t.has_quantization() || t.shape_size() != rank || t.file().empty()) return nullptr;
    for (const int64_t d : t.shape()) {
      if (d <= 0) return nullptr;
    }
    return &t;
  };

  // Candidate linears grouped by what they must share, each group in node order.
  std::map<SiblingKey, std::vector<int>> groups;
  for (int i = 0; i < model.nodes_size(); ++i) {
    const proto::Node& n = model.nodes(i);
    if (n.op() != "linear" || !n.has_linear() || n.outputs_size() != 1 || n.inputs_size() < 2 ||
        n.inputs(0).empty()) {
      continue;
    }
    const proto::LinearParams& p = n.linear();
    if (p.output_features_size() != 0) continue;
    const proto::TensorInfo* weight = movable_tensor(n.inputs(1), 2);
    if (weight == nullptr || weight->shape(1) % kFusedRowMultiple != 0) continue;
    SiblingKey key;
    key.x = n.inputs(0);
    key.weight_dtype = weight->dtype();
    if (p.has_bias()) {
      if (n.inputs_size() < 3) continue;
      const proto::TensorInfo* bias = movable_tensor(n.inputs(2), 1);
      if (bias == nullptr) continue;
      key.bias_dtype = bias->dtype();
    }
    key.has_scale = p.has_scale();
    key.scale = p.has_scale() ? p.scale() : 1.0f;
    groups[key].push_back(i);
  }

  std::vector<bool> drop(static_cast<size_t>(model.nodes_size()), false);
  std::unordered_set<std::string> dropped_tensors;
  std::vector<proto::Node> fused_nodes;
  std::vector<proto::TensorInfo> fused_tensors;
  auto unused_name = [&](const std::string& name) {
    std::string out = name;
    for (int k = 2; tensor_index.count(out) != 0; ++k) out = name + "#" + std::to_string(k);
    tensor_index.emplace(out, -1);
    return out;
  };
  for (const auto& [key, members] : groups) {
    for (size_t begin = 0; begin + 1 < members.size(); begin += kLinearMaxOutputs) {
      const size_t end = std::min(members.size(), begin + kLinearMaxOutputs);
      if (end - begin < 2) break;
      std::vector<const proto::TensorInfo*> weights, biases;
      std::vector<std::string> node_names, weight_names, bias_names;
      proto::Node fused;
      fused.set_op("linear");
      proto::LinearParams* params = fused.mutable_linear();
      params->set_has_bias(key.bias_dtype >= 0);
      if (key.has_scale) params->set_scale(key.scale);
      for (size_t m = begin; m < end; ++m) {
        const proto::Node& n = model.nodes(members[m]);
        node_names.push_back(n.name());
        weights.push_back(&model.tensors(tensor_index.at(n.inputs(1))));
        weight_names.push_back(n.inputs(1));
        if (key.bias_dtype >= 0) {
          biases.push_back(&model.tensors(tensor_index.at(n.inputs(2))));
          bias_names.push_back(n.inputs(2));
        }
        fused.add_outputs(n.outputs(0));
        params->add_output_features(weights.back()->shape(0));
        drop[static_cast<size_t>(members[m])] = true;
      }
      fused.set_name(joined_names(node_names));
      fused.add_inputs(key.x);
      fused_tensors.push_back(concatenated(weights, unused_name(joined_names(weight_names))));
      fused.add_inputs(fused_tensors.back().name());
      if (key.bias_dtype >= 0) {
        fused_tensors.push_back(concatenated(biases, unused_name(joined_names(bias_names))));
        fused.add_inputs(fused_tensors.back().name());
      }
      for (const auto* names : {&weight_names, &bias_names}) {
        dropped_tensors.insert(names->begin(), names->end());
      }
      fused_nodes.push_back(std::move(fused));
    }
  }
  if (fused_nodes.empty()) return 0;

  const int fused = static_cast<int>(fused_nodes.size());
  replace_graph_nodes(model, drop, std::move(fused_nodes));
  // The originals are read by no node now: dropped, so nothing loads them beside their copy.
  google::protobuf::RepeatedPtrField<proto::TensorInfo> kept_tensors;
  for (int i = 0; i < model.tensors_size(); ++i) {
    if (dropped_tensors.count(model.tensors(i).name()) == 0) {
      *kept_tensors.Add() = std::move(*model.mutable_tensors(i));
    }
  }
  for (proto::TensorInfo& t : fused_tensors) *kept_tensors.Add() = std::move(t);
  model.mutable_tensors()->Swap(&kept_tensors);
  return fused;
}

}  // namespace mg
