// Tiny decoder models written to a temp dir, for tests that need a whole graph on disk.
#pragma once

#include <filesystem>
#include <functional>

#include "framework/core/tensor.h"
#include "models/builders/decoder_builder.h"
#include "proto/model.pb.h"

namespace mg::testing {

// A small DecoderSpec of `family` (its configure() applied), quick to compile and run.
DecoderSpec small_spec(const std::string& family = "llama");

// Writes the model for `spec` to dir (model.pbtxt + model.safetensors); returns the graph path.
std::filesystem::path write_model(const std::filesystem::path& dir, const DecoderSpec& spec);

// Loads dir/model.pbtxt, applies `edit`, writes it back as `name` (.pbtxt or .pb) in dir.
std::filesystem::path edit_graph(const std::filesystem::path& graph_file,
                                 const std::function<void(proto::Model&)>& edit,
                                 const std::string& name = "edited.pbtxt");

// Rewrites the safetensors file `weights` in place: every tensor is copied to the host, passed to
// `edit` with its name (which may change its bytes, e.g. write NaN: all-ones bytes are a NaN in
// F32, BF16 and F16 alike), and written back.
void edit_weights(const std::filesystem::path& weights,
                  const std::function<void(const std::string& name, Tensor& tensor)>& edit);

// The node named `name` (fails the test if absent).
proto::Node& find_node(proto::Model& model, const std::string& name);

}  // namespace mg::testing
