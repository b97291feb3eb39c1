// safetensors: the weight file format of Hugging Face checkpoints and of moegraph models.
//
// Layout: u64 little-endian N | N bytes of JSON header | data section. The header maps tensor
// names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section)
// plus an optional "__metadata__" object of strings. Files are untrusted input: open() validates
// the whole header before any tensor is handed out (docs/formats.md lists the rules), so every
// Tensor it returns lies inside the file and has exactly the bytes its dtype and shape need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/core/dtype.h"
#include "framework/core/tensor.h"

namespace mg {

// Largest header open() accepts; the reference implementation uses the same bound.
inline constexpr size_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  // Byte range [begin, end) relative to the start of the data section.
  size_t begin = 0;
  size_t end = 0;

  size_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps `path` and validates its header; throws mg::Error naming the file (and the tensor, where
  // one is at fault) on any problem.
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);

  // Validates `bytes` as a whole safetensors file; `name` stands for the file in error messages.
  // `owner` keeps `bytes` alive and is shared by every returned Tensor; with a null owner the
  // caller keeps `bytes` alive as long as the file object and its tensors are used.
  static std::shared_ptr<SafetensorsFile> parse(std::span<const uint8_t> bytes, std::string name,
                                                std::shared_ptr<void> owner = nullptr);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Entries in the order the header lists them.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // nullptr when absent.
  const SafetensorsEntry* find(std::string_view name) const;

  // A CPU Tensor viewing the entry's bytes; its Buffer keeps the file mapping alive. The view is
  // read-only memory: writing through it faults. An entry whose bytes are not aligned to its
  // element size (legal in the format, never produced by write_safetensors) is copied instead.
  // Throws mg::Error naming the file when `name` is absent.
  Tensor tensor(std::string_view name) const;
  Tensor tensor(const SafetensorsEntry& entry) const;

  // The "__metadata__" map; empty when the header has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The path given to open(), or the name given to parse().
  const std::filesystem::path& path() const { return path_; }
  // File offset of the data section (8 + header length).
  size_t data_offset() const { return data_offset_; }

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  std::shared_ptr<void> owner_;
  const uint8_t* data_ = nullptr;  // start of the data section
  size_t data_size_ = 0;
  size_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes CPU tensors of any dtype, entries in the given order, each tensor's data 8-byte aligned
// (the header is padded with spaces). Names must be unique, non-empty and not "__metadata__".
// The file is written to a temporary name and renamed into place. Throws mg::Error naming the path.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mg
