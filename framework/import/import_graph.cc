#include "framework/import/import_graph.h"

#include <algorithm>
#include <set>
#include <system_error>

#include "framework/core/error.h"
#include "framework/io/proto_dtype.h"

namespace mg {

namespace {

bool is_supported_weight_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

// "model.layers.0.self_attn." for "model.layers.0.self_attn.q_proj.weight": the module that
// holds the tensor's own module.
std::string parent_module(const std::string& key) {
  const size_t last = key.rfind('.');
  if (last == std::string::npos || last == 0) return "";
  const size_t before = key.rfind('.', last - 1);
  return before == std::string::npos ? "" : key.substr(0, before + 1);
}

// " (under 'P' it holds 'a', 'b' and 2 more)": names next to a missing tensor, to show a rename.
std::string siblings(const HfCheckpoint& checkpoint, const std::string& key) {
  const std::string prefix = parent_module(key);
  std::vector<std::string> near;
  for (const std::string& name : checkpoint.names()) {
    if (!prefix.empty() && name.rfind(prefix, 0) == 0) near.push_back(name);
  }
  if (near.empty()) return "";
  std::string out;
  for (size_t i = 0; i < near.size() && i < 4; ++i) {
    out += fmt::format("{}'{}'", i == 0 ? "" : ", ", near[i]);
  }
  if (near.size() > 4) out += fmt::format(" and {} more", near.size() - 4);
  return fmt::format(" (under '{}' it holds {})", prefix, out);
}

}  // namespace

ImportGraph::ImportGraph(const HfCheckpoint& checkpoint, std::filesystem::path graph_dir)
    : checkpoint_(checkpoint), graph_dir_(std::move(graph_dir)) {}

bool ImportGraph::has(const std::string& key) const {
  return checkpoint_.find(key) != nullptr;
}

const HfCheckpoint::Entry& ImportGraph::require(const std::string& key, const Shape& shape) const {
  const std::string dir = checkpoint_.dir().string();
  const HfCheckpoint::Entry* e = checkpoint_.find(key);
  MG_CHECK(e != nullptr, "{}: tensor '{}' is missing from the checkpoint{}", dir, key,
           siblings(checkpoint_, key));
  MG_CHECK(is_supported_weight_dtype(e->entry->dtype),
           "{}: tensor '{}' in '{}' is {}, expected F32, BF16 or F16 (quantized checkpoints are "
           "not supported yet)",
           dir, key, e->file.string(), dtype_name(e->entry->dtype));
  MG_CHECK(e->entry->shape == shape,
           "{}: tensor '{}' in '{}' has shape {}, but config.json implies {}", dir, key,
           e->file.string(), shape_str(e->entry->shape), shape_str(shape));
  return *e;
}

std::string ImportGraph::relative_file(const std::filesystem::path& file) const {
  const std::filesystem::path full = checkpoint_.dir() / file;
  std::error_code ec;
  std::filesystem::path rel = std::filesystem::relative(full, graph_dir_, ec);
  MG_CHECK(!ec && !rel.empty(), "cannot express weight file '{}' relative to '{}' ({})",
           full.string(), graph_dir_.string(), ec.message());
  return rel.generic_string();
}

std::string ImportGraph::weight(const std::string& key, const Shape& shape) {
  if (std::find(declared_.begin(), declared_.end(), key) != declared_.end()) return key;
  const HfCheckpoint::Entry& e = require(key, shape);
  proto::TensorInfo* t = model_.add_tensors();
  t->set_name(key);
  t->set_dtype(to_proto(e.entry->dtype));
  for (int64_t d : shape) t->add_shape(d);
  t->set_file(relative_file(e.file));
  declared_.push_back(key);
  used_keys_.push_back(key);
  return key;
}

std::string ImportGraph::assembled(const std::string& name, const Shape& shape,
                                   const std::vector<PartRef>& parts) {
  MG_ASSERT(!parts.empty(), "assembled tensor '{}' without parts", name);
  MG_ASSERT(std::find(declared_.begin(), declared_.end(), name) == declared_.end(),
            "assembled tensor '{}' declared twice", name);
  proto::TensorInfo* t = model_.add_tensors();
  t->set_name(name);
  for (int64_t d : shape) t->add_shape(d);
  std::optional<DType> dtype;
  std::string first_key;
  for (const PartRef& part : parts) {
    const HfCheckpoint::Entry& e = require(part.key, part.shape);
    if (!dtype) {
      dtype = e.entry->dtype;
      first_key = part.key;
      t->set_dtype(to_proto(*dtype));
      t->set_file(relative_file(e.file));
    }
    MG_CHECK(e.entry->dtype == *dtype,
             "{}: tensors '{}' ({}) and '{}' ({}) are stacked into one weight and must share a "
             "dtype",
             checkpoint_.dir().string(), first_key, dtype_name(*dtype), part.key,
             dtype_name(e.entry->dtype));
    proto::TensorPart* p = t->add_parts();
    const std::string file = relative_file(e.file);
    if (file != t->file()) p->set_file(file);
    p->set_key(part.key);
    p->set_row_begin(part.row_begin);
    p->set_row_end(part.row_end);
    used_keys_.push_back(part.key);
  }
  declared_.push_back(name);
  return name;
}

proto::Node& ImportGraph::node(const std::string& name, const std::string& op,
                               std::vector<std::string> inputs) {
  proto::Node* n = model_.add_nodes();
  n->set_name(name);
  n->set_op(op);
  // Trailing absent optional inputs are dropped; inner ones stay as "" to keep positions.
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  for (std::string& in : inputs) n->add_inputs(std::move(in));
  n->add_outputs(name + ".out");
  return *n;
}

std::string ImportGraph::linear(const std::string& name, const std::string& x,
                                const std::string& weight, const std::string& bias,
                                std::optional<float> scale) {
  proto::Node& n = node(name, "linear", {x, weight, bias});
  n.mutable_linear()->set_has_bias(!bias.empty());
  if (scale) n.mutable_linear()->set_scale(*scale);
  return name + ".out";
}

std::string ImportGraph::rms_norm(const std::string& name, const std::string& x,
                                  const std::string& weight, float eps, int64_t group) {
  proto::Node& n = node(name, "rms_norm", {x, weight});
  n.mutable_rms_norm()->set_eps(eps);
  n.mutable_rms_norm()->set_group_size(group);
  n.mutable_rms_norm()->set_has_weight(!weight.empty());
  return name + ".out";
}

std::string ImportGraph::add(const std::string& name, const std::string& a, const std::string& b,
                             std::optional<float> scale) {
  proto::Node& n = node(name, "add", {a, b});
  n.mutable_add();
  if (scale) n.mutable_add()->set_scale(*scale);
  return name + ".out";
}

std::vector<std::string> ImportGraph::unused_keys() const {
  const std::set<std::string> used(used_keys_.begin(), used_keys_.end());
  std::vector<std::string> out;
  for (const std::string& name : checkpoint_.names()) {
    if (!used.contains(name)) out.push_back(name);
  }
  return out;
}

}  // namespace mg
