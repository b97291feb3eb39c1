// libFuzzer target: bytes -> SafetensorsFile::parse.
//
// Expected failures are mg::Error. Anything else is a finding: a crash, a sanitizer report, an
// exception of another type, or a broken invariant below (checked with abort()).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <unistd.h>

#include "framework/core/error.h"
#include "framework/io/safetensors.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

volatile uint8_t sink;  // keeps the reads of tensor bytes from being optimised away

// Where accepted inputs are written back, one file per fuzzing process.
std::filesystem::path scratch_path() {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      fmt::format("fuzz_safetensors_{}.safetensors", ::getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<mg::SafetensorsFile> file;
  try {
    file = mg::SafetensorsFile::parse({data, size}, "fuzz.safetensors");
  } catch (const mg::Error&) {
    return 0;
  }

  // Every accepted entry is a view inside the input of exactly its size: read all of it, so
  // AddressSanitizer sees any view that strays outside.
  std::vector<std::pair<std::string, mg::Tensor>> tensors;
  for (const mg::SafetensorsEntry& entry : file->entries()) {
    require(file->find(entry.name) == &entry);
    mg::Tensor t = file->tensor(entry);
    require(t.nbytes() == entry.nbytes() && t.shape() == entry.shape && t.dtype() == entry.dtype);
    const auto* p = static_cast<const uint8_t*>(t.raw());
    uint8_t sum = 0;
    for (size_t i = 0; i < t.nbytes(); ++i) sum = static_cast<uint8_t>(sum + p[i]);
    sink = sum;
    tensors.emplace_back(entry.name, std::move(t));
  }

  // What was accepted can be written and read back unchanged (writer errors are findings too).
  mg::write_safetensors(scratch_path(), tensors, file->metadata());
  auto back = mg::SafetensorsFile::open(scratch_path());
  require(back->metadata() == file->metadata());
  require(back->entries().size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const mg::SafetensorsEntry& e = back->entries()[i];
    require(e.name == tensors[i].first && e.dtype == tensors[i].second.dtype() &&
            e.shape == tensors[i].second.shape());
    const mg::Tensor t = back->tensor(e);
    require(t.nbytes() == 0 || std::memcmp(t.raw(), tensors[i].second.raw(), t.nbytes()) == 0);
  }
  return 0;
}
