// A Hugging Face checkpoint folder: config.json plus safetensors weights, either one
// model.safetensors or shards listed by model.safetensors.index.json ("weight_map").
//
// Opening validates every weight file (header, offsets, file size: a truncated shard is an
// error naming it) and the index (every listed tensor must be in the shard it names). Lookups
// by tensor name then cost nothing; no weight bytes are read.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"
#include "framework/io/safetensors.h"

namespace mg {

class HfCheckpoint {
 public:
  struct Entry {
    std::filesystem::path
        file;  // relative to the checkpoint folder, e.g. "model-00001-of-00002.safetensors"
    const SafetensorsEntry* entry;
  };

  // Throws mg::Error naming the folder or file: not a directory, no config.json, bad JSON, no
  // weights, a bad index, an invalid or truncated weight file.
  explicit HfCheckpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::filesystem::path& config_path() const { return config_path_; }
  const nlohmann::json& config() const { return config_; }

  // nullptr when the checkpoint has no tensor of that name.
  const Entry* find(std::string_view name) const;
  // The bytes of `e` (a zero-copy view of its mapped file), for the few small tensors the import
  // reads (compressed-tensors' weight_shape).
  Tensor tensor(const Entry& e) const;
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  // The weight files, relative to dir().
  std::vector<std::filesystem::path> files() const;
  // Bytes of all tensors.
  size_t total_bytes() const { return total_bytes_; }

 private:
  void add_file(const std::filesystem::path& relative);

  std::filesystem::path dir_;
  std::filesystem::path config_path_;
  nlohmann::json config_;
  std::map<std::filesystem::path, std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> entries_;
  size_t total_bytes_ = 0;
};

}  // namespace mg
