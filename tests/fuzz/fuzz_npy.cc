// libFuzzer target: bytes -> parse_npy.
//
// Expected failures are mg::Error. Anything else is a finding: a crash, a sanitizer report, an
// exception of another type, or a broken round trip below (checked with abort()).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <unistd.h>

#include "framework/core/error.h"
#include "framework/io/npy.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

std::filesystem::path scratch_path() {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / fmt::format("fuzz_npy_{}.npy", ::getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mg::Tensor t;
  try {
    t = mg::parse_npy({data, size}, "fuzz.npy");
  } catch (const mg::Error&) {
    return 0;
  }
  // What was read can be written and read back unchanged.
  mg::write_npy(scratch_path(), t);
  const mg::Tensor back = mg::read_npy(scratch_path());
  require(back.dtype() == t.dtype() && back.shape() == t.shape());
  require(t.nbytes() == 0 || std::memcmp(back.raw(), t.raw(), t.nbytes()) == 0);
  return 0;
}
