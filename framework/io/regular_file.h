// Opening user-named paths safely: inputs only when they are regular files, outputs only onto
// regular files or missing paths.
//
// Every file moegraph reads (graphs, safetensors, npy, Hugging Face config.json and index, bench
// JSON) and every file it writes (--dump-logits, --trace, make-model and import-hf outputs, bench
// --json/--png) goes through this header. A FIFO opened for reading blocks until a writer comes,
// possibly forever; a device node or a symlink at an output path would be replaced by the
// rename of an atomic write (as root that replaced /dev/full). So both directions check the kind
// of file first and refuse anything else with a message that names the path and what it is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

namespace mg {

// An open file descriptor, closed on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&&) = delete;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// "a FIFO", "a directory", "a character device", ... for the st_mode of a file.
std::string_view file_kind_name(uint32_t st_mode);

// Opens `path` read-only when it is a regular file (symlinks to regular files are fine). The open
// is non-blocking, so a FIFO does not wait for a writer; its type is checked on the descriptor
// (no window between check and open). Throws mg::Error "<path>: is a FIFO, not a regular file"
// (or "file not found", "cannot open for reading (...)").
UniqueFd open_regular_file_for_reading(const std::filesystem::path& path);

// Throws mg::Error unless `path` is a regular file that is not a symlink, or is missing from a
// folder that exists. `flag` names
// the option or config the path came from (e.g. "--dump-logits"); empty when there is none.
// Call it before long work so a bad output path fails fast; write_file_atomically calls it too.
void check_output_path(const std::filesystem::path& path, std::string_view flag = {});

// Throws mg::Error unless `dir` is missing (it is created later) or a directory (a symlink to one
// is fine): "--out: /tmp/x: is a FIFO, not a directory".
void check_output_dir(const std::filesystem::path& dir, std::string_view flag = {});

// Writes the concatenated `pieces` to `path` through a new temporary file in the same directory
// renamed over `path`, so readers that still map an older version of the file keep a valid
// mapping (truncating a mapped file in place would make them fault). Only regular files or
// missing paths are replaced (check_output_path). Throws mg::Error naming the path on I/O errors.
void write_file_atomically(const std::filesystem::path& path,
                           std::span<const std::span<const uint8_t>> pieces,
                           std::string_view flag = {});

// The same for a single piece of text.
void write_file_atomically(const std::filesystem::path& path, std::string_view text,
                           std::string_view flag = {});

}  // namespace mg
