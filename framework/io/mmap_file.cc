#include "framework/io/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "framework/core/error.h"
#include "framework/io/regular_file.h"

namespace mg {

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  // Only regular files: a FIFO would block the open, a directory or device cannot be mapped.
  const UniqueFd fd = open_regular_file_for_reading(path);
  struct stat st {};
  MG_CHECK(::fstat(fd.get(), &st) == 0, "{}: cannot stat ({})", name,
           std::error_code(errno, std::generic_category()).message());
  MG_CHECK(st.st_size > 0, "{}: expected a non-empty file, found 0 bytes", name);

  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  MG_CHECK(p != MAP_FAILED, "{}: cannot map {} bytes ({})", name, size,
           std::error_code(errno, std::generic_category()).message());
  // The mapping stays valid after the descriptor is closed.
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(p), size));
}

MappedFile::~MappedFile() {
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace mg
