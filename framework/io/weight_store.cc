#include "framework/io/weight_store.h"

#include <algorithm>
#include <system_error>

#include "framework/core/error.h"
#include "framework/io/proto_dtype.h"

namespace mg {

namespace {

// "a, b, c, ... (12 in all)": the names a file holds, for "key not found" errors.
std::string some_names(const SafetensorsFile& file) {
  constexpr size_t kShown = 8;
  std::string out;
  const auto& entries = file.entries();
  for (size_t i = 0; i < entries.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += entries[i].name;
  }
  if (entries.size() > kShown) out += fmt::format(", ... ({} in all)", entries.size());
  return out.empty() ? "none" : out;
}

}  // namespace

WeightStore::WeightStore(std::filesystem::path graph_file) : graph_file_(std::move(graph_file)) {
  base_dir_ = graph_file_.parent_path();
  if (base_dir_.empty()) base_dir_ = ".";
}

const SafetensorsFile& WeightStore::open_file(const std::string& relative,
                                              const std::string& context) {
  const std::filesystem::path rel(relative);
  MG_CHECK(!rel.is_absolute(),
           "{}: weight file '{}' must be a path relative to the graph file's directory", context,
           relative);
  const std::filesystem::path full = base_dir_ / rel;

  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(full, ec);
  if (ec) {
    std::error_code ignored;
    const std::filesystem::path dir =
        std::filesystem::absolute(full, ignored).lexically_normal().parent_path();
    MG_CHECK(ec != std::errc::no_such_file_or_directory,
             "{}: weight file '{}' not found (looked in {})", context, relative, dir.string());
    MG_FAIL("{}: cannot open weight file '{}' in {} ({})", context, relative, dir.string(),
            ec.message());
  }
  auto it = files_.find(canonical);
  if (it != files_.end()) return *it->second;

  std::shared_ptr<SafetensorsFile> file;
  try {
    file = SafetensorsFile::open(full);
  } catch (const Error& e) {
    MG_FAIL("{}: cannot use weight file '{}': {}", context, relative, e.what());
  }
  return *files_.emplace(canonical, std::move(file)).first->second;
}

Tensor WeightStore::load(const proto::TensorInfo& info) {
  const std::string graph = graph_file_.string();
  MG_CHECK(!info.name().empty(), "{}: a weight tensor has an empty name", graph);
  const std::string context = fmt::format("{}: tensor '{}'", graph, info.name());
  MG_CHECK(!info.file().empty(), "{}: no weight file given (field 'file' is empty)", context);

  const DType expected_dtype = from_proto(info.dtype(), context);
  const Shape expected_shape(info.shape().begin(), info.shape().end());
  const std::string expected =
      fmt::format("{}{}", dtype_name(expected_dtype), shape_str(expected_shape));

  const SafetensorsFile& file = open_file(info.file(), context);
  const std::string& key = info.key().empty() ? info.name() : info.key();
  const SafetensorsEntry* entry = file.find(key);
  MG_CHECK(entry != nullptr, "{}: key '{}' not found in weight file '{}' (it holds: {})", context,
           key, info.file(), some_names(file));

  const std::string found = fmt::format("{}{}", dtype_name(entry->dtype), shape_str(entry->shape));
  MG_CHECK(entry->dtype == expected_dtype,
           "{}: dtype mismatch: the graph expects {} but '{}' holds '{}' as {}", context, expected,
           info.file(), key, found);
  MG_CHECK(entry->shape == expected_shape,
           "{}: shape mismatch: the graph expects {} but '{}' holds '{}' as {}", context, expected,
           info.file(), key, found);
  return file.tensor(*entry);
}

}  // namespace mg
