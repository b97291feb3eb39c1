#include "framework/import/hf_checkpoint.h"

#include <system_error>

#include "framework/core/error.h"
#include "framework/io/json.h"

namespace mg {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

}  // namespace

HfCheckpoint::HfCheckpoint(const std::filesystem::path& dir) : dir_(dir) {
  std::error_code ec;
  MG_CHECK(std::filesystem::is_directory(dir_, ec),
           "'{}' is not a directory (expected a Hugging "
           "Face checkpoint folder holding config.json and safetensors weights)",
           dir_.string());
  config_path_ = dir_ / "config.json";
  MG_CHECK(std::filesystem::exists(config_path_, ec), "{}: no config.json in this folder",
           dir_.string());
  config_ = load_json_file(config_path_);
  MG_CHECK(config_.is_object(), "{}: expected a JSON object, found {}", config_path_.string(),
           json_type_phrase(config_));

  const std::filesystem::path index_path = dir_ / kIndexFile;
  if (std::filesystem::exists(index_path, ec)) {
    const nlohmann::json index = load_json_file(index_path);
    const std::string label = index_path.string();
    MG_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "{}: expected an object with a \"weight_map\" object (tensor name -> shard file)",
             label);
    const nlohmann::json& map = index["weight_map"];
    MG_CHECK(!map.empty(), "{}: \"weight_map\" lists no tensors", label);
    for (auto it = map.begin(); it != map.end(); ++it) {
      MG_CHECK(it.value().is_string(), "{}: weight_map['{}']: expected a file name, found {}",
               label, it.key(), json_brief(it.value()));
      const std::filesystem::path shard(it.value().get<std::string>());
      MG_CHECK(!shard.empty() && shard.is_relative() &&
                   shard.lexically_normal().string().rfind("..", 0) != 0,
               "{}: weight_map['{}']: shard '{}' must be a file name inside the folder", label,
               it.key(), shard.string());
      if (!files_.contains(shard)) add_file(shard);
      const SafetensorsFile& file = *files_.at(shard);
      const SafetensorsEntry* entry = file.find(it.key());
      MG_CHECK(entry != nullptr,
               "{}: weight_map says tensor '{}' is in '{}', but that shard does "
               "not hold it",
               label, it.key(), shard.string());
      entries_[it.key()] = Entry{shard, entry};
    }
  } else {
    MG_CHECK(std::filesystem::exists(dir_ / kSingleFile, ec),
             "{}: no weights: expected {} or {} (sharded)", dir_.string(), kSingleFile, kIndexFile);
    add_file(kSingleFile);
    const SafetensorsFile& file = *files_.at(kSingleFile);
    for (const SafetensorsEntry& entry : file.entries()) {
      entries_[entry.name] = Entry{kSingleFile, &entry};
    }
  }
  for (const auto& [name, e] : entries_) total_bytes_ += e.entry->nbytes();
}

void HfCheckpoint::add_file(const std::filesystem::path& relative) {
  const std::filesystem::path full = dir_ / relative;
  std::error_code ec;
  MG_CHECK(std::filesystem::exists(full, ec), "{}: weight file '{}' is missing", dir_.string(),
           relative.string());
  // SafetensorsFile::open validates the header against the file size, so a truncated shard
  // fails here with a message naming it.
  files_.emplace(relative, SafetensorsFile::open(full));
}

const HfCheckpoint::Entry* HfCheckpoint::find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

Tensor HfCheckpoint::tensor(const Entry& e) const {
  return files_.at(e.file)->tensor(*e.entry);
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

std::vector<std::filesystem::path> HfCheckpoint::files() const {
  std::vector<std::filesystem::path> out;
  for (const auto& [path, f] : files_) out.push_back(path);
  return out;
}

}  // namespace mg
