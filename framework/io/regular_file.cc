#include "framework/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "framework/core/error.h"

namespace mg {

namespace {

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// "--dump-logits: " or "" — the prefix of an output-path error.
std::string flag_prefix(std::string_view flag) {
  return flag.empty() ? std::string() : fmt::format("{}: ", flag);
}

// Writes all of `bytes` to `fd`; returns 0 or the errno of the failure.
int write_all(int fd, std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

// Creates a temporary file next to `path` that did not exist before (O_EXCL: a file or link an
// attacker or a crashed run left under that name is never opened or followed).
UniqueFd create_temporary_beside(const std::filesystem::path& path, std::string_view flag,
                                 std::filesystem::path& tmp) {
  constexpr int kAttempts = 100;
  int err = 0;
  for (int i = 0; i < kAttempts; ++i) {
    tmp = path;
    tmp += fmt::format(".tmp{}.{}", ::getpid(), i);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) return UniqueFd(fd);
    err = errno;
    if (err != EEXIST) break;
  }
  MG_FAIL("{}{}: cannot create a temporary file beside it for writing ({})", flag_prefix(flag),
          path.string(), errno_text(err));
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string_view file_kind_name(uint32_t st_mode) {
  if (S_ISREG(st_mode)) return "a regular file";
  if (S_ISDIR(st_mode)) return "a directory";
  if (S_ISFIFO(st_mode)) return "a FIFO";
  if (S_ISCHR(st_mode)) return "a character device";
  if (S_ISBLK(st_mode)) return "a block device";
  if (S_ISSOCK(st_mode)) return "a socket";
  if (S_ISLNK(st_mode)) return "a symbolic link";
  return "a special file";
}

UniqueFd open_regular_file_for_reading(const std::filesystem::path& path) {
  const std::string name = path.string();
  // Look before opening, so a device node is not even opened (opening one can have effects);
  // the descriptor is checked again below because the path may change in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    MG_CHECK(err != ENOENT, "{}: file not found", name);
    MG_FAIL("{}: cannot open for reading ({})", name, errno_text(err));
  }
  MG_CHECK(S_ISREG(st.st_mode), "{}: is {}, not a regular file", name, file_kind_name(st.st_mode));

  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, maybe forever.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    MG_CHECK(err != ENOENT, "{}: file not found", name);
    MG_FAIL("{}: cannot open for reading ({})", name, errno_text(err));
  }
  MG_CHECK(::fstat(fd.get(), &st) == 0, "{}: cannot stat ({})", name, errno_text(errno));
  MG_CHECK(S_ISREG(st.st_mode), "{}: is {}, not a regular file", name, file_kind_name(st.st_mode));
  const int flags = ::fcntl(fd.get(), F_GETFL);
  MG_CHECK(flags >= 0 && ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) == 0,
           "{}: cannot make the descriptor blocking ({})", name, errno_text(errno));
  return fd;
}

void check_output_path(const std::filesystem::path& path, std::string_view flag) {
  const std::string name = path.string();
  MG_CHECK(!name.empty(), "{}an empty path is not a file name", flag_prefix(flag));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      // A new file: its folder must exist (checked here so the CLI fails before running).
      const std::filesystem::path parent = path.parent_path();
      struct stat dir {};
      MG_CHECK(parent.empty() || (::stat(parent.c_str(), &dir) == 0 && S_ISDIR(dir.st_mode)),
               "{}{}: the folder {} does not exist", flag_prefix(flag), name, parent.string());
      return;
    }
    MG_FAIL("{}{}: cannot inspect the output path ({})", flag_prefix(flag), name, errno_text(err));
  }
  MG_CHECK(S_ISREG(st.st_mode),
           "{}{}: is {}, not a regular file; moegraph only replaces regular files (remove it or "
           "choose another path)",
           flag_prefix(flag), name, file_kind_name(st.st_mode));
}

void check_output_dir(const std::filesystem::path& dir, std::string_view flag) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return;
    MG_FAIL("{}{}: cannot inspect the output folder ({})", flag_prefix(flag), dir.string(),
            errno_text(err));
  }
  MG_CHECK(S_ISDIR(st.st_mode), "{}{}: is {}, not a directory", flag_prefix(flag), dir.string(),
           file_kind_name(st.st_mode));
}

void write_file_atomically(const std::filesystem::path& path,
                           std::span<const std::span<const uint8_t>> pieces,
                           std::string_view flag) {
  check_output_path(path, flag);
  const std::string name = path.string();
  std::filesystem::path tmp;
  UniqueFd fd = create_temporary_beside(path, flag, tmp);
  int err = 0;
  for (std::span<const uint8_t> piece : pieces) {
    err = write_all(fd.get(), piece);
    if (err != 0) break;
  }
  if (err == 0 && ::close(fd.release()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    MG_FAIL("{}{}: write failed ({})", flag_prefix(flag), name, errno_text(err));
  }
  // The target may have become something else while we wrote; look once more right before
  // replacing it (the window left is the rename itself).
  try {
    check_output_path(path, flag);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    MG_FAIL("{}{}: cannot rename {} over it ({})", flag_prefix(flag), name, tmp.string(),
            errno_text(err));
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text,
                           std::string_view flag) {
  const std::span<const uint8_t> piece(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  write_file_atomically(path, std::span<const std::span<const uint8_t>>(&piece, 1), flag);
}

}  // namespace mg
