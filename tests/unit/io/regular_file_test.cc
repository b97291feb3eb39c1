// Inputs open only when they are regular files (a FIFO must not block), outputs replace only
// regular files or missing paths (issue 18, classes 3 and 4).
#include "framework/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>

#include <gtest/gtest.h>

#include "framework/io/mmap_file.h"
#include "framework/io/npy.h"
#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg {
namespace {

using testing::throws_error_with;

std::filesystem::path fifo_in(const std::filesystem::path& dir, const char* name) {
  const auto path = dir / name;
  std::filesystem::remove(path);
  EXPECT_EQ(::mkfifo(path.c_str(), 0644), 0);
  return path;
}

TEST(RegularFile, ReadingRefusesAFifoWithoutBlocking) {
  const auto dir = testing::temp_dir("regular-file-fifo");
  const auto fifo = fifo_in(dir, "graph.pbtxt");
  const auto start = std::chrono::steady_clock::now();
  // No writer ever comes: a blocking open would hang here.
  EXPECT_TRUE(throws_error_with([&] { open_regular_file_for_reading(fifo); },
                                {fifo.string(), ": is a FIFO, not a regular file"}));
  EXPECT_TRUE(throws_error_with([&] { MappedFile::open(fifo); }, {"is a FIFO"}));
  EXPECT_TRUE(throws_error_with([&] { read_npy(fifo); }, {"is a FIFO"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(RegularFile, ReadingNamesDirectoriesAndMissingFiles) {
  const auto dir = testing::temp_dir("regular-file-kinds");
  EXPECT_TRUE(throws_error_with([&] { open_regular_file_for_reading(dir); },
                                {dir.string(), "is a directory, not a regular file"}));
  EXPECT_TRUE(throws_error_with([&] { open_regular_file_for_reading(dir / "absent"); },
                                {"absent: file not found"}));
  // A symlink to a regular file is read through; the descriptor is blocking again.
  testing::write_bytes(dir / "real.bin", "abc");
  std::filesystem::create_symlink(dir / "real.bin", dir / "link.bin");
  const UniqueFd fd = open_regular_file_for_reading(dir / "link.bin");
  char buf[4] = {};
  EXPECT_EQ(::read(fd.get(), buf, sizeof buf), 3);
  EXPECT_EQ(::fcntl(fd.get(), F_GETFL) & O_NONBLOCK, 0);
}

TEST(RegularFile, FileKindNames) {
  EXPECT_EQ(file_kind_name(S_IFIFO | 0644), "a FIFO");
  EXPECT_EQ(file_kind_name(S_IFCHR | 0644), "a character device");
  EXPECT_EQ(file_kind_name(S_IFBLK | 0644), "a block device");
  EXPECT_EQ(file_kind_name(S_IFSOCK | 0644), "a socket");
  EXPECT_EQ(file_kind_name(S_IFLNK | 0777), "a symbolic link");
  EXPECT_EQ(file_kind_name(S_IFDIR | 0755), "a directory");
}

TEST(RegularFile, OutputPathsMustBeRegularOrMissing) {
  const auto dir = testing::temp_dir("regular-file-out");
  check_output_path(dir / "new.npy", "--dump-logits");  // missing: fine
  EXPECT_TRUE(throws_error_with([&] { check_output_path(dir / "no" / "x.npy", "--dump-logits"); },
                                {"--dump-logits: ", "x.npy: the folder ", "does not exist"}));
  testing::write_bytes(dir / "old.npy", "old");
  check_output_path(dir / "old.npy", "--dump-logits");  // regular: fine
  const auto fifo = fifo_in(dir, "fifo.npy");
  EXPECT_TRUE(
      throws_error_with([&] { check_output_path(fifo, "--dump-logits"); },
                        {"--dump-logits: ", fifo.string(), "is a FIFO, not a regular file"}));
  std::filesystem::create_symlink(dir / "old.npy", dir / "link.npy");
  EXPECT_TRUE(throws_error_with([&] { check_output_path(dir / "link.npy", "--trace"); },
                                {"--trace: ", "link.npy: is a symbolic link"}));
  // A dangling symlink is refused too (the rename would replace the link).
  std::filesystem::create_symlink(dir / "nowhere", dir / "dangling.npy");
  EXPECT_TRUE(throws_error_with([&] { check_output_path(dir / "dangling.npy"); },
                                {"dangling.npy: is a symbolic link"}));
  EXPECT_TRUE(throws_error_with([&] { check_output_path(dir, "--png"); }, {"is a directory"}));
}

TEST(RegularFile, OutputFoldersMustBeFoldersOrMissing) {
  const auto dir = testing::temp_dir("regular-file-dirs");
  check_output_dir(dir / "new", "--out");
  check_output_dir(dir, "--out");
  std::filesystem::create_directory_symlink(dir, dir / "link");
  check_output_dir(dir / "link", "--out");
  const auto fifo = fifo_in(dir, "fifo");
  EXPECT_TRUE(throws_error_with([&] { check_output_dir(fifo, "-o"); },
                                {"-o: ", "fifo: is a FIFO, not a directory"}));
}

TEST(RegularFile, AtomicWritesNeverReplaceSpecialFiles) {
  const auto dir = testing::temp_dir("regular-file-atomic");
  const auto fifo = fifo_in(dir, "out.npy");
  testing::write_bytes(dir / "precious", "keep");
  std::filesystem::create_symlink(dir / "precious", dir / "link");
  for (const auto& target : {fifo, dir / "link"}) {
    EXPECT_TRUE(throws_error_with([&] { write_file_atomically(target, "data", "--out"); },
                                  {"--out: ", target.string(), "not a regular file"}));
  }
  EXPECT_TRUE(std::filesystem::is_fifo(std::filesystem::symlink_status(fifo)));
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link"));
  EXPECT_EQ(testing::read_bytes(dir / "precious"), "keep");
  // Regular files are replaced and no temporary file stays behind.
  write_file_atomically(dir / "precious", "new text");
  EXPECT_EQ(testing::read_bytes(dir / "precious"), "new text");
  write_file_atomically(dir / "fresh", "fresh");
  EXPECT_EQ(testing::read_bytes(dir / "fresh"), "fresh");
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST(RegularFile, AtomicWriteDoesNotFollowAPlantedTemporaryName) {
  // A symlink planted under the first temporary name is skipped (O_EXCL), not written through.
  const auto dir = testing::temp_dir("regular-file-planted");
  testing::write_bytes(dir / "victim", "safe");
  const auto planted = dir / fmt::format("out.bin.tmp{}.0", ::getpid());
  std::filesystem::create_symlink(dir / "victim", planted);
  write_file_atomically(dir / "out.bin", "payload");
  EXPECT_EQ(testing::read_bytes(dir / "out.bin"), "payload");
  EXPECT_EQ(testing::read_bytes(dir / "victim"), "safe");
  std::filesystem::remove(planted);
}

TEST(RegularFile, WritersGoThroughTheCheck) {
  const auto dir = testing::temp_dir("regular-file-writers");
  const auto fifo = fifo_in(dir, "logits.npy");
  EXPECT_TRUE(throws_error_with(
      [&] {
        write_npy(fifo, testing::random_tensor({2, 3}, 1));
      },
      {"is a FIFO"}));
  EXPECT_TRUE(std::filesystem::is_fifo(std::filesystem::symlink_status(fifo)));
}

}  // namespace
}  // namespace mg
