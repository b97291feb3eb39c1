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

namespace mg {

namespace {

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    MG_CHECK(err != ENOENT, "{}: file not found", name);
    MG_FAIL("{}: cannot open for reading ({})", name, errno_text(err));
  }
  FdCloser closer(fd);

  struct stat st {};
  MG_CHECK(::fstat(fd, &st) == 0, "{}: cannot stat ({})", name, errno_text(errno));
  MG_CHECK(!S_ISDIR(st.st_mode), "{}: expected a regular file, found a directory", name);
  MG_CHECK(S_ISREG(st.st_mode), "{}: expected a regular file, found a special file", name);
  MG_CHECK(st.st_size > 0, "{}: expected a non-empty file, found 0 bytes", name);

  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  MG_CHECK(p != MAP_FAILED, "{}: cannot map {} bytes ({})", name, size, errno_text(errno));
  // The mapping stays valid after the descriptor is closed.
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(p), size));
}

MappedFile::~MappedFile() {
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

void write_file_atomically(const std::filesystem::path& path,
                           std::span<const std::span<const uint8_t>> pieces) {
  const std::string name = path.string();
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp{}", ::getpid());

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MG_CHECK(fd >= 0, "{}: cannot create {} for writing ({})", name, tmp.string(), errno_text(errno));
  for (std::span<const uint8_t> piece : pieces) {
    const uint8_t* p = piece.data();
    size_t left = piece.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        ::close(fd);
        ::unlink(tmp.c_str());
        MG_FAIL("{}: write failed ({})", name, errno_text(err));
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MG_FAIL("{}: close failed ({})", name, errno_text(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MG_FAIL("{}: cannot rename {} over it ({})", name, tmp.string(), errno_text(err));
  }
}

}  // namespace mg
