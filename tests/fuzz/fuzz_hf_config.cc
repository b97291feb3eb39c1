// libFuzzer target: bytes -> a Hugging Face checkpoint folder -> build_hf_graph (the importer
// without the compile check that import_hf_checkpoint adds).
//
// Input layout: byte 0 picks one committed fixture family (tests/fixtures/hf/<family>, whose
// model.safetensors the folder links to); the rest is config.json, optionally followed by
// kIndexSeparator and a model.safetensors.index.json. The importer must either refuse with
// mg::Error or return a graph; any crash, sanitizer report or other exception type is a
// finding. (import_hf_checkpoint then runs the compiler's checks on the graph; linking them
// here would instrument every op.)
//
// The fixtures are found under $MG_FUZZ_HF_FIXTURES, else the source tree this was built from.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "framework/core/error.h"
#include "framework/import/hf_importer.h"

namespace {

constexpr std::string_view kIndexSeparator = "\n#index#\n";

std::filesystem::path fixtures_root() {
  if (const char* env = std::getenv("MG_FUZZ_HF_FIXTURES")) return env;
  return std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";
}

const std::vector<std::filesystem::path>& families() {
  static const std::vector<std::filesystem::path> dirs = [] {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(fixtures_root())) {
      if (std::filesystem::exists(e.path() / "model.safetensors")) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    if (out.empty()) {
      std::fprintf(stderr, "fuzz_hf_config: no fixtures under %s (set MG_FUZZ_HF_FIXTURES)\n",
                   fixtures_root().c_str());
      std::abort();
    }
    return out;
  }();
  return dirs;
}

std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / fmt::format("fuzz_hf_{}", ::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::filesystem::path& family = families()[data[0] % families().size()];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t sep = rest.find(kIndexSeparator);

  const std::filesystem::path dir = scratch_dir();
  std::error_code ec;
  std::filesystem::remove(dir / "model.safetensors.index.json", ec);
  std::filesystem::remove(dir / "model.safetensors", ec);
  std::filesystem::create_symlink(family / "model.safetensors", dir / "model.safetensors");
  write_file(dir / "config.json", rest.substr(0, sep));
  if (sep != std::string_view::npos) {
    write_file(dir / "model.safetensors.index.json", rest.substr(sep + kIndexSeparator.size()));
  }

  try {
    const mg::HfImportResult result = mg::build_hf_graph(dir);
    // An accepted import names layers and weights that exist.
    if (result.num_layers < 0 || result.model.tensors_size() == 0) std::abort();
  } catch (const mg::Error&) {
  }
  return 0;
}
