#include "framework/io/weight_store.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <vector>

#include "framework/core/checked_math.h"
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

  if (info.parts_size() > 0) return load_parts(info, context, expected_dtype, expected_shape);

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

Tensor WeightStore::load_parts(const proto::TensorInfo& info, const std::string& context,
                               DType dtype, const Shape& shape) {
  MG_CHECK(info.key().empty(),
           "{}: field 'key' ('{}') must be empty when the tensor is assembled from {} parts",
           context, info.key(), info.parts_size());
  const std::optional<size_t> expected_bytes = checked_nbytes(shape, dtype);
  MG_CHECK(expected_bytes.has_value(), "{}: the declared shape {} is too large", context,
           shape_str(shape));

  // Resolve and check every part before copying anything.
  struct Resolved {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
    size_t offset;  // first byte inside the entry (row ranges)
    size_t nbytes;
  };
  std::vector<Resolved> parts;
  parts.reserve(static_cast<size_t>(info.parts_size()));
  size_t total = 0;
  for (int i = 0; i < info.parts_size(); ++i) {
    const proto::TensorPart& part = info.parts(i);
    const std::string& file_name = part.file().empty() ? info.file() : part.file();
    const std::string part_context = fmt::format("{}: part {} ('{}')", context, i, part.key());
    MG_CHECK(!part.key().empty(), "{}: part {} names no key", context, i);
    const SafetensorsFile& file = open_file(file_name, part_context);
    const SafetensorsEntry* entry = file.find(part.key());
    MG_CHECK(entry != nullptr, "{}: key '{}' not found in weight file '{}' (it holds: {})",
             part_context, part.key(), file_name, some_names(file));
    MG_CHECK(entry->dtype == dtype,
             "{}: dtype mismatch: the graph expects every part as {} but '{}' holds '{}' as {}{}",
             part_context, dtype_name(dtype), file_name, part.key(), dtype_name(entry->dtype),
             shape_str(entry->shape));
    size_t offset = 0;
    size_t nbytes = entry->nbytes();
    if (part.row_begin() != 0 || part.row_end() != 0) {
      const int64_t rows = entry->shape.empty() ? 0 : entry->shape[0];
      MG_CHECK(0 <= part.row_begin() && part.row_begin() < part.row_end() && part.row_end() <= rows,
               "{}: rows [{}, {}) are not a range inside '{}' {}{} (0 <= begin < end <= {})",
               part_context, part.row_begin(), part.row_end(), part.key(), dtype_name(entry->dtype),
               shape_str(entry->shape), rows);
      const size_t row_bytes = entry->nbytes() / static_cast<size_t>(rows);
      offset = static_cast<size_t>(part.row_begin()) * row_bytes;
      nbytes = static_cast<size_t>(part.row_end() - part.row_begin()) * row_bytes;
    }
    MG_CHECK(nbytes <= *expected_bytes - total,
             "{}: the parts hold more than the {} bytes of {}{} (part {} ends at byte {})", context,
             *expected_bytes, dtype_name(dtype), shape_str(shape), i, total + nbytes);
    total += nbytes;
    parts.push_back({&file, entry, offset, nbytes});
  }
  MG_CHECK(total == *expected_bytes, "{}: the {} parts hold {} bytes but {}{} needs {} bytes",
           context, info.parts_size(), total, dtype_name(dtype), shape_str(shape), *expected_bytes);

  // One whole entry viewed in another shape (GPT-OSS's MXFP4 blocks [E, R, C/32, 16] as codes
  // [E, R, C/2]): the mapped bytes themselves, read-only like every loaded weight, not a copy (the
  // experts of GPT-OSS-120B hold 60 GB).
  if (parts.size() == 1 && parts[0].nbytes == parts[0].entry->nbytes()) {
    return parts[0].file->tensor(*parts[0].entry).reshape(shape);
  }
  Tensor out = Tensor::empty_cpu(dtype, shape);
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (const Resolved& part : parts) {
    const Tensor src = part.file->tensor(*part.entry);
    if (part.nbytes > 0) {
      std::memcpy(dst, static_cast<const uint8_t*>(src.raw()) + part.offset, part.nbytes);
    }
    dst += part.nbytes;
  }
  return out;
}

}  // namespace mg
