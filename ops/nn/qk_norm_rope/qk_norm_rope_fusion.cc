// The graph rewrites that write qk_norm_rope (registered with the fuse-ops pass,
// framework/compile/fuse_ops.h, by register_qk_norm_rope):
//   rms_norm (q -> qn) per head, rope (qn -> q_out), and the same chain of k, both read by one
//   node (attention's q and k)  =>  qk_norm_rope (q, k, positions, q_weight, k_weight ->
//   q_out, k_out).
// A chain qualifies when the norm's groups are the rope's heads (group_size == head_dim, at most
// kQkNormRopeMaxHeadDim) and nothing else reads the normed value. Every rope variant the rope op
// runs (half-split / interleaved pairing, partial rotary, offset, every frequency scaling) is
// fused: the fused kernels reuse the rope op's frequency math and rotation. Left as written:
//   - OLMoE's norm over the whole q / k projection (group_size 0; and its clip_qkv puts a clamp
//     between norm and rope): a whole-row norm would need a block-wide reduction per tensor (its
//     two ropes are then fused by fuse_qk_rope, below);
//   - a norm -> rope chain with no partner (q without k, or k read by another node than q);
//   - Llama-4's weightless L2 norm, which comes after the rope (rope -> rms_norm).
// The two ropes must agree on everything but num_heads, and read the same positions.
// fuse_qk_rope (run after it): the two ropes of q and k with no norm before them, read by one node
// (attention's q and k), under the same conditions  =>  qk_norm_rope (q, k, positions -> q_out,
// k_out) with both norms unset. A rope whose partner is not read by the same node (Llama-4's
// ropes, each read by its own L2 norm) stays a rope.
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "framework/compile/fuse_ops.h"
#include "ops/nn/qk_norm_rope/qk_norm_rope.h"

namespace mg {

namespace {

struct Chain {
  int norm = -1;  // node index of the rms_norm
  int rope = -1;  // node index of the rope reading its output
};

bool same_rope_but_heads(proto::RopeParams a, proto::RopeParams b) {
  a.set_num_heads(0);
  b.set_num_heads(0);
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace

int fuse_qk_norm_rope(proto::Model& model) {
  // How many node inputs read each value; graph outputs count as readers that cannot move.
  std::unordered_map<std::string, int> readers;
  for (const proto::Node& n : model.nodes()) {
    for (const std::string& in : n.inputs()) ++readers[in];
  }
  std::unordered_set<std::string> graph_outputs;
  for (const proto::ValueInfo& v : model.outputs()) graph_outputs.insert(v.name());

  std::unordered_map<std::string, int> producer;  // value -> node index
  for (int i = 0; i < model.nodes_size(); ++i) {
    for (const std::string& out : model.nodes(i).outputs()) producer.emplace(out, i);
  }
  // rope output value -> its chain.
  std::unordered_map<std::string, Chain> chain_of;
  for (int i = 0; i < model.nodes_size(); ++i) {
    const proto::Node& rope = model.nodes(i);
    if (rope.op() != "rope" || rope.inputs_size() != 2 || rope.outputs_size() != 1) continue;
    const std::string& normed = rope.inputs(0);
    const int64_t head_dim = rope.rope().head_dim();
    if (head_dim <= 0 || head_dim > kQkNormRopeMaxHeadDim) continue;
    if (readers[normed] != 1 || graph_outputs.count(normed) != 0) continue;
    auto p = producer.find(normed);
    if (p == producer.end()) continue;
    const proto::Node& norm = model.nodes(p->second);
    if (norm.op() != "rms_norm" || norm.inputs_size() < 1 || norm.outputs_size() != 1) continue;
    if (norm.rms_norm().group_size() != head_dim) continue;
    chain_of.emplace(rope.outputs(0), Chain{p->second, i});
  }
  if (chain_of.empty()) return 0;

  std::vector<bool> drop(static_cast<size_t>(model.nodes_size()), false);
  std::vector<proto::Node> fused_nodes;
  for (const proto::Node& reader : model.nodes()) {
    // The first two chain outputs this node reads, in input order: q, then k.
    const Chain* q = nullptr;
    const Chain* k = nullptr;
    for (const std::string& in : reader.inputs()) {
      auto it = chain_of.find(in);
      if (it == chain_of.end() || drop[static_cast<size_t>(it->second.rope)]) continue;
      if (q == nullptr) {
        q = &it->second;
      } else if (k == nullptr && it->second.rope != q->rope) {
        k = &it->second;
      }
    }
    if (q == nullptr || k == nullptr) continue;
    const proto::Node& q_norm = model.nodes(q->norm);
    const proto::Node& q_rope = model.nodes(q->rope);
    const proto::Node& k_norm = model.nodes(k->norm);
    const proto::Node& k_rope = model.nodes(k->rope);
    if (q_rope.inputs(1) != k_rope.inputs(1)) continue;  // different positions
    if (!same_rope_but_heads(q_rope.rope(), k_rope.rope())) continue;
    proto::Node fused;
    fused.set_name(q_norm.name() + "+" + q_rope.name() + "+" + k_norm.name() + "+" + k_rope.name());
    fused.set_op("qk_norm_rope");
    for (const std::string& in : {q_norm.inputs(0), k_norm.inputs(0), q_rope.inputs(1),
                                  q_norm.inputs_size() > 1 ? q_norm.inputs(1) : std::string(),
                                  k_norm.inputs_size() > 1 ? k_norm.inputs(1) : std::string()}) {
      fused.add_inputs(in);
    }
    fused.add_outputs(q_rope.outputs(0));
    fused.add_outputs(k_rope.outputs(0));
    proto::QkNormRopeParams* params = fused.mutable_qk_norm_rope();
    *params->mutable_rope() = q_rope.rope();
    params->set_num_kv_heads(k_rope.rope().num_heads());
    *params->mutable_q_norm() = q_norm.rms_norm();
    *params->mutable_k_norm() = k_norm.rms_norm();
    for (const int i : {q->norm, q->rope, k->norm, k->rope}) drop[static_cast<size_t>(i)] = true;
    fused_nodes.push_back(std::move(fused));
  }
  const int fused = static_cast<int>(fused_nodes.size());
  if (fused > 0) replace_graph_nodes(model, drop, std::move(fused_nodes));
  return fused;
}

int fuse_qk_rope(proto::Model& model) {
  // rope output value -> its node (one input tensor, one output).
  std::unordered_map<std::string, int> rope_of;
  for (int i = 0; i < model.nodes_size(); ++i) {
    const proto::Node& rope = model.nodes(i);
    if (rope.op() != "rope" || rope.inputs_size() != 2 || rope.outputs_size() != 1) continue;
    const int64_t head_dim = rope.rope().head_dim();
    if (head_dim <= 0 || head_dim > kQkNormRopeMaxHeadDim) continue;
    rope_of.emplace(rope.outputs(0), i);
  }
  if (rope_of.empty()) return 0;

  std::vector<bool> drop(static_cast<size_t>(model.nodes_size()), false);
  std::vector<proto::Node> fused_nodes;
  for (const proto::Node& reader : model.nodes()) {
    // The first two rope outputs this node reads, in input order: q, then k.
    int q = -1, k = -1;
    for (const std::string& in : reader.inputs()) {
      auto it = rope_of.find(in);
      if (it == rope_of.end() || drop[static_cast<size_t>(it->second)]) continue;
      if (q < 0) {
        q = it->second;
      } else if (k < 0 && it->second != q) {
        k = it->second;
      }
    }
    if (q < 0 || k < 0) continue;
    const proto::Node& q_rope = model.nodes(q);
    const proto::Node& k_rope = model.nodes(k);
    if (q_rope.inputs(1) != k_rope.inputs(1)) continue;  // different positions
    if (!same_rope_but_heads(q_rope.rope(), k_rope.rope())) continue;
    proto::Node fused;
    fused.set_name(q_rope.name() + "+" + k_rope.name());
    fused.set_op("qk_norm_rope");
    fused.add_inputs(q_rope.inputs(0));
    fused.add_inputs(k_rope.inputs(0));
    fused.add_inputs(q_rope.inputs(1));
    fused.add_outputs(q_rope.outputs(0));
    fused.add_outputs(k_rope.outputs(0));
    proto::QkNormRopeParams* params = fused.mutable_qk_norm_rope();  // no q_norm, no k_norm
    *params->mutable_rope() = q_rope.rope();
    params->set_num_kv_heads(k_rope.rope().num_heads());
    drop[static_cast<size_t>(q)] = drop[static_cast<size_t>(k)] = true;
    fused_nodes.push_back(std::move(fused));
  }
  const int fused = static_cast<int>(fused_nodes.size());
  if (fused > 0) replace_graph_nodes(model, drop, std::move(fused_nodes));
  return fused;
}

}  // namespace mg
