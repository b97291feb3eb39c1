#include "framework/import/hf_text_files.h"

#include <system_error>

#include "framework/core/error.h"
#include "framework/io/mmap_file.h"
#include "framework/io/regular_file.h"

namespace mg {

namespace {

constexpr size_t kMaxTextFileBytes = size_t{512} << 20;

}  // namespace

std::vector<std::string> copy_hf_text_files(const std::filesystem::path& hf_dir,
                                            const std::filesystem::path& out_dir) {
  std::error_code ec;
  if (std::filesystem::equivalent(hf_dir, out_dir, ec)) return {};
  std::vector<std::string> copied;
  for (const char* name : kHfTextFiles) {
    const std::filesystem::path from = hf_dir / name;
    if (!std::filesystem::exists(from, ec)) continue;
    const std::shared_ptr<MappedFile> file = MappedFile::open(from);
    MG_CHECK(file->size() <= kMaxTextFileBytes, "{}: {} bytes; more than the {} MiB taken",
             from.string(), file->size(), kMaxTextFileBytes >> 20);
    write_file_atomically(out_dir / name, file->text());
    copied.emplace_back(name);
  }
  return copied;
}

}  // namespace mg
