// MappedFile: a whole file mapped read-only into memory, unmapped when the last owner lets go.
//
// Weight files are mapped rather than read so that tensors can be zero-copy views of the file:
// a Tensor's Buffer holds a shared_ptr to the MappedFile, keeping the mapping alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>

namespace mg {

class MappedFile {
 public:
  // Maps `path` read-only. Throws mg::Error naming the path when it is missing, not a regular
  // file (a FIFO, directory or device: see regular_file.h), unreadable or empty.
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The mapped bytes; writing through them faults (the mapping is PROT_READ).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  std::string_view text() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::filesystem::path path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace mg
