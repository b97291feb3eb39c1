#include "tests/testing/model_fixture.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "framework/io/graph_loader.h"
#include "framework/io/safetensors.h"

namespace mg::testing {

DecoderSpec small_spec(const std::string& family) {
  DecoderSpec spec;
  spec.family = family;
  find_family(family).configure(spec);
  spec.vocab = 96;
  spec.hidden = 32;
  spec.layers = 2;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 8;
  spec.intermediate = 48;
  spec.max_seq_len = 64;
  spec.seed = 7;
  return spec;
}

std::filesystem::path write_model(const std::filesystem::path& dir, const DecoderSpec& spec) {
  build_decoder(spec).write(dir);
  return dir / GraphBuilder::kGraphFile;
}

void edit_weights(const std::filesystem::path& weights,
                  const std::function<void(const std::string& name, Tensor& tensor)>& edit) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    const auto file = SafetensorsFile::open(weights);
    for (const SafetensorsEntry& e : file->entries()) {
      const Tensor src = file->tensor(e);
      Tensor copy = Tensor::empty_cpu(src.dtype(), src.shape());
      std::memcpy(copy.raw(), src.raw(), src.nbytes());
      edit(e.name, copy);
      tensors.emplace_back(e.name, copy);
    }
  }
  write_safetensors(weights, tensors);
}

std::filesystem::path edit_graph(const std::filesystem::path& graph_file,
                                 const std::function<void(proto::Model&)>& edit,
                                 const std::string& name) {
  proto::Model model = load_graph(graph_file);
  edit(model);
  const auto out = graph_file.parent_path() / name;
  save_graph(out, model);
  return out;
}

proto::Node& find_node(proto::Model& model, const std::string& name) {
  for (proto::Node& n : *model.mutable_nodes()) {
    if (n.name() == name) return n;
  }
  ADD_FAILURE() << "no node " << name;
  return *model.mutable_nodes(0);
}

}  // namespace mg::testing
