// WeightStore: resolves the graph file's weight references (proto::TensorInfo) to Tensors.
//
// Each safetensors file is opened (mapped and validated) once, keyed by its canonical path, and
// every Tensor handed out is a zero-copy view that keeps its file mapped. Not thread-safe.
#pragma once

#include <filesystem>
#include <map>
#include <memory>

#include "framework/core/tensor.h"
#include "framework/io/safetensors.h"
#include "proto/model.pb.h"

namespace mg {

class WeightStore {
 public:
  // Weight file paths are resolved relative to the directory of `graph_file`, which also names
  // the graph in error messages.
  explicit WeightStore(std::filesystem::path graph_file);

  // The tensor `info` describes: file `info.file()`, entry `info.key()` (or `info.name()` when the
  // key is empty). Throws mg::Error naming the graph file, the tensor and what was expected vs
  // found when the file is missing or invalid, the key is absent, or dtype or shape differ.
  //
  // A tensor with `parts` is assembled: the parts' bytes (a whole entry, or a range of its rows)
  // are copied, in order, into one new host buffer viewed as the declared dtype and shape (the
  // only case that copies; a single whole entry is viewed in the declared shape instead). Each part
  // must hold the declared dtype and the part sizes must add up to the declared size; errors name
  // the graph tensor and the part (index, file and key).
  Tensor load(const proto::TensorInfo& info);

  const std::filesystem::path& graph_file() const { return graph_file_; }
  const std::filesystem::path& base_dir() const { return base_dir_; }
  // Number of distinct weight files opened so far.
  size_t num_open_files() const { return files_.size(); }

 private:
  const SafetensorsFile& open_file(const std::string& relative, const std::string& context);
  Tensor load_parts(const proto::TensorInfo& info, const std::string& context, DType dtype,
                    const Shape& shape);

  std::filesystem::path graph_file_;
  std::filesystem::path base_dir_;
  std::map<std::filesystem::path, std::shared_ptr<SafetensorsFile>> files_;  // canonical path →
};

}  // namespace mg
