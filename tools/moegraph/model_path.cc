#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <stdlib.h>

#include "framework/core/error.h"
#include "framework/import/hf_importer.h"
#include "framework/text/generation_config.h"
#include "tools/moegraph/commands.h"

namespace mg::cli {

namespace {

// Where the bundled model may be: $MOEGRAPH_BUNDLED_MODEL, next to the binary (install or build
// tree), or the source tree this binary was built from.
std::filesystem::path bundled_model() {
  if (const char* env = std::getenv("MOEGRAPH_BUNDLED_MODEL")) return env;
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "models" / MG_BUNDLED_MODEL_NAME);
    candidates.push_back(exe.parent_path().parent_path() / "models" / MG_BUNDLED_MODEL_NAME);
  }
  candidates.push_back(std::filesystem::path(MG_SOURCE_DIR) / "models" / MG_BUNDLED_MODEL_NAME);
  for (const auto& c : candidates) {
    if (std::filesystem::exists(c / "model.pbtxt")) return c / "model.pbtxt";
  }
  MG_FAIL(
      "the bundled model '{}' was not found (looked next to the binary and in {}); pass a "
      "MODEL path or set MOEGRAPH_BUNDLED_MODEL",
      MG_BUNDLED_MODEL_NAME, candidates.back().string());
}

// Graphs imported on the fly from Hugging Face folders live in temporary directories that are
// removed when the program exits.
class ImportedGraphs {
 public:
  ~ImportedGraphs() {
    std::error_code ec;
    for (const auto& dir : dirs_) std::filesystem::remove_all(dir, ec);
  }

  std::filesystem::path import(const std::filesystem::path& hf_dir) {
    // TMPDIR is the user's environment: a missing or unwritable one is their error (exit 2),
    // with what to do, not a std::filesystem_error.
    std::error_code ec;
    const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
    const char* tmpdir = std::getenv("TMPDIR");
    MG_CHECK(!ec,
             "cannot import '{}': TMPDIR ('{}') is not a directory; set TMPDIR to a writable "
             "directory, or import once with 'moegraph import-hf' and run the result",
             hf_dir.string(), tmpdir ? tmpdir : "");
    std::string pattern = (tmp / "moegraph-hf-XXXXXX").string();
    MG_CHECK(mkdtemp(pattern.data()) != nullptr,
             "cannot import '{}': cannot create a directory in {} ({}); set TMPDIR to a writable "
             "directory, or import once with 'moegraph import-hf' and run the result",
             hf_dir.string(), tmp.string(), std::strerror(errno));
    dirs_.emplace_back(pattern);
    return import_hf_to_dir(hf_dir, dirs_.back());
  }

 private:
  std::vector<std::filesystem::path> dirs_;
};

}  // namespace

std::filesystem::path resolve_model(const std::string& model) {
  if (model.empty()) return bundled_model();
  std::filesystem::path p(model);
  MG_CHECK(std::filesystem::exists(p), "model '{}' does not exist", model);
  if (std::filesystem::is_directory(p)) {
    for (const char* name : {"model.pbtxt", "model.pb"}) {
      if (std::filesystem::exists(p / name)) return p / name;
    }
    // A Hugging Face checkpoint folder: import it (weights stay where they are).
    if (is_hf_checkpoint_dir(p)) {
      static ImportedGraphs imported;
      return imported.import(p);
    }
    MG_FAIL("directory '{}' holds no model.pbtxt, model.pb or Hugging Face config.json", model);
  }
  return p;
}

std::filesystem::path resolve_tokenizer(const std::filesystem::path& graph,
                                        const std::string& flag_path) {
  if (!flag_path.empty()) return flag_path;
  const std::filesystem::path beside = graph.parent_path() / "tokenizer.json";
  std::error_code ec;
  MG_CHECK(std::filesystem::exists(beside, ec),
           "no tokenizer for {}: {} does not exist; pass --tokenizer PATH (a Hugging Face "
           "tokenizer.json), or token ids with --prompt-ids",
           graph.string(), beside.string());
  return beside;
}

std::vector<int32_t> generation_eos_ids(const std::filesystem::path& graph) {
  const std::filesystem::path file = graph.parent_path() / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return {};
  return text::read_generation_eos_ids(file);
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    const size_t b = item.find_first_not_of(' ');
    const size_t e = item.find_last_not_of(' ');
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    MG_CHECK(!item.empty() && ec == std::errc() && ptr == item.data() + item.size() && v >= 0,
             "{}: '{}' is not a non-negative integer token id (expected e.g. 1,2,3)", flag, item);
    ids.push_back(v);
    pos = comma + 1;
  }
  return ids;
}

DType parse_activation_dtype(const std::string& text) {
  if (text == "bf16") return DType::kBF16;
  if (text == "f16") return DType::kF16;
  if (text == "f32") return DType::kF32;
  MG_FAIL("--dtype: unknown dtype '{}' (expected bf16, f16 or f32)", text);
}

}  // namespace mg::cli
