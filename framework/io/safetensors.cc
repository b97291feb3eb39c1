#include "framework/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "framework/core/checked_math.h"
#include "framework/core/error.h"
#include "framework/io/json.h"
#include "framework/io/mmap_file.h"
#include "framework/io/regular_file.h"

namespace mg {

namespace {

// ordered_json keeps the header's key order, which is the order entries() reports.
using Json = nlohmann::ordered_json;

constexpr size_t kHeaderLengthBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string known_dtype_names() {
  std::string names;
  for (int i = 0; i <= static_cast<int>(DType::kF8E5M2); ++i) {
    if (!names.empty()) names += ", ";
    names += dtype_name(static_cast<DType>(i));
  }
  return names;
}

// Parses the header JSON, refusing duplicate keys (the JSON library would keep the last silently)
// and any container deeper than a valid header has: entries are objects (depth 1) whose shape and
// data_offsets are arrays of integers (depth 2).
Json parse_header(std::string_view text, const std::string& file, size_t header_offset) {
  std::string entry;                 // key at depth 1: the tensor being parsed
  std::set<std::string> top_keys;    // keys seen at depth 1
  std::set<std::string> entry_keys;  // keys seen at depth 2 within `entry`
  std::string field;                 // key at depth 2
  // "tensor 'x'" or "__metadata__": what the key at depth 1 names.
  const auto where = [&] {
    return entry == kMetadataKey ? std::string(kMetadataKey) : fmt::format("tensor '{}'", entry);
  };
  const auto check = [&](int depth, Json::parse_event_t event, Json& value) {
    switch (event) {
      case Json::parse_event_t::key:
        if (depth == 1) {
          entry = value.get<std::string>();
          MG_CHECK(top_keys.insert(entry).second, "{}: header lists {} twice", file, where());
          entry_keys.clear();
          field.clear();
        } else if (depth == 2) {
          field = value.get<std::string>();
          MG_CHECK(entry_keys.insert(field).second, "{}: {}: key '{}' appears twice", file, where(),
                   field);
        }
        break;
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        MG_CHECK(depth < 3 || !entry.empty(),
                 "{}: header nests arrays or objects deeper than a safetensors header does", file);
        MG_CHECK(depth < 3,
                 "{}: {}: {}holds a nested array or object (expected a string or an array of "
                 "integers)",
                 file, where(), field.empty() ? "" : fmt::format("'{}' ", field));
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const Json::parse_error& e) {
    const size_t pos = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    MG_FAIL("{}: header is not valid JSON at byte {} of the file: {}", file, header_offset + pos,
            json_parse_error_message(e));
  } catch (const Json::exception& e) {
    MG_FAIL("{}: header is not valid JSON: {}", file, e.what());
  }
}

// A non-negative JSON integer that fits int64, or nullopt.
std::optional<int64_t> as_count(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

SafetensorsEntry parse_entry(const std::string& name, const Json& value, const std::string& file,
                             size_t data_size) {
  MG_CHECK(!name.empty(), "{}: header has a tensor with an empty name", file);
  MG_CHECK(value.is_object(),
           "{}: tensor '{}': expected an object with dtype, shape and data_offsets, found {} {}",
           file, name, json_type_phrase(value), json_brief(value));
  for (const auto& [key, field] : value.items()) {
    MG_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
             "{}: tensor '{}': unknown field '{}' (expected dtype, shape and data_offsets)", file,
             name, key);
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    MG_CHECK(value.contains(key), "{}: tensor '{}': missing field '{}'", file, name, key);
  }

  SafetensorsEntry entry;
  entry.name = name;

  const Json& dtype = value["dtype"];
  MG_CHECK(dtype.is_string(), "{}: tensor '{}': dtype must be a string, found {} {}", file, name,
           json_type_phrase(dtype), json_brief(dtype));
  const std::optional<DType> parsed = dtype_from_name(dtype.get<std::string>());
  MG_CHECK(parsed.has_value(), "{}: tensor '{}': unknown dtype {} (known: {})", file, name,
           json_brief(dtype), known_dtype_names());
  entry.dtype = *parsed;

  const Json& shape = value["shape"];
  MG_CHECK(shape.is_array(),
           "{}: tensor '{}': shape must be an array of non-negative integers, found {} {}", file,
           name, json_type_phrase(shape), json_brief(shape));
  for (const Json& dim : shape) {
    const std::optional<int64_t> d = as_count(dim);
    MG_CHECK(d.has_value(),
             "{}: tensor '{}': shape must be an array of non-negative integers, found {}", file,
             name, json_brief(shape));
    entry.shape.push_back(*d);
  }
  const std::optional<size_t> bytes = checked_nbytes(entry.shape, entry.dtype);

  const Json& offsets = value["data_offsets"];
  const bool offsets_ok = offsets.is_array() && offsets.size() == 2 &&
                          as_count(offsets[0]).has_value() && as_count(offsets[1]).has_value();
  MG_CHECK(
      offsets_ok,
      "{}: tensor '{}': data_offsets must be [begin, end] with non-negative integers, found {}",
      file, name, json_brief(offsets));
  entry.begin = static_cast<size_t>(*as_count(offsets[0]));
  entry.end = static_cast<size_t>(*as_count(offsets[1]));
  MG_CHECK(entry.begin <= entry.end, "{}: tensor '{}': data_offsets [{}, {}] begin after they end",
           file, name, entry.begin, entry.end);
  MG_CHECK(entry.end <= data_size,
           "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes)",
           file, name, entry.begin, entry.end, data_size);

  const std::string type_str = fmt::format("{}{}", dtype_name(entry.dtype), shape_str(entry.shape));
  MG_CHECK(bytes.has_value(), "{}: tensor '{}': {} is too large to address", file, name, type_str);
  MG_CHECK(entry.nbytes() == *bytes,
           "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {} needs {}", file, name,
           entry.begin, entry.end, entry.nbytes(), type_str, *bytes);
  return entry;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& file) {
  MG_CHECK(value.is_object(), "{}: __metadata__ must be an object of strings, found {} {}", file,
           json_type_phrase(value), json_brief(value));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    MG_CHECK(v.is_string(), "{}: __metadata__ key '{}': expected a string, found {} {}", file, key,
             json_type_phrase(v), json_brief(v));
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

// Entries must not share bytes. Empty entries hold no bytes and overlap nothing.
void check_no_overlap(const std::vector<SafetensorsEntry>& entries, const std::string& file) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& e : entries) {
    if (e.nbytes() > 0) sorted.push_back(&e);
  }
  std::sort(sorted.begin(), sorted.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin < b->begin;
  });
  const SafetensorsEntry* furthest = nullptr;  // the entry reaching furthest so far
  for (const SafetensorsEntry* e : sorted) {
    if (furthest != nullptr) {
      MG_CHECK(e->begin >= furthest->end,
               "{}: tensor '{}': data_offsets [{}, {}] overlap those of tensor '{}' [{}, {}]", file,
               e->name, e->begin, e->end, furthest->name, furthest->begin, furthest->end);
    }
    if (furthest == nullptr || e->end > furthest->end) furthest = e;
  }
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> mapping = MappedFile::open(path);
  const std::span<const uint8_t> bytes = mapping->bytes();
  std::shared_ptr<SafetensorsFile> file = parse(bytes, path.string(), std::move(mapping));
  file->path_ = path;
  return file;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes,
                                                        std::string name,
                                                        std::shared_ptr<void> owner) {
  const std::string& file = name;
  MG_CHECK(bytes.size() >= kHeaderLengthBytes,
           "{}: not a safetensors file: expected at least {} bytes (the header length), found {}",
           file, kHeaderLengthBytes, bytes.size());
  const uint64_t header_len = read_u64_le(bytes.data());
  const size_t room = bytes.size() - kHeaderLengthBytes;
  MG_CHECK(header_len <= room,
           "{}: header length {} runs past the end of the file (file has {} bytes, room for a "
           "header of at most {})",
           file, header_len, bytes.size(), room);
  MG_CHECK(header_len <= kMaxSafetensorsHeaderBytes,
           "{}: header length {} exceeds the limit of {} bytes", file, header_len,
           kMaxSafetensorsHeaderBytes);

  const std::string_view header_text(
      reinterpret_cast<const char*>(bytes.data()) + kHeaderLengthBytes,
      static_cast<size_t>(header_len));
  const Json header = parse_header(header_text, file, kHeaderLengthBytes);
  MG_CHECK(header.is_object(), "{}: header must be a JSON object, found {} {}", file,
           json_type_phrase(header), json_brief(header));

  std::shared_ptr<SafetensorsFile> out(new SafetensorsFile());
  out->path_ = name;
  out->owner_ = std::move(owner);
  out->data_offset_ = kHeaderLengthBytes + static_cast<size_t>(header_len);
  out->data_ = bytes.data() + out->data_offset_;
  out->data_size_ = bytes.size() - out->data_offset_;

  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      out->metadata_ = parse_metadata(value, file);
      continue;
    }
    out->index_.emplace(key, out->entries_.size());
    out->entries_.push_back(parse_entry(key, value, file, out->data_size_));
  }
  check_no_overlap(out->entries_, file);
  return out;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry* entry = find(name);
  MG_CHECK(entry != nullptr, "{}: no tensor named '{}' (the file holds {} tensors)", path_.string(),
           name, entries_.size());
  return tensor(*entry);
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& entry) const {
  MG_ASSERT(entry.end <= data_size_, "entry '{}' outside {}", entry.name, path_.string());
  const uint8_t* p = data_ + entry.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(entry.dtype) != 0) {
    Tensor copy = Tensor::empty_cpu(entry.dtype, entry.shape);
    if (entry.nbytes() > 0) std::memcpy(copy.raw(), p, entry.nbytes());
    return copy;
  }
  // The mapping is read-only; Buffer's pointer is not const because Buffer serves every memory.
  auto buffer =
      std::make_shared<Buffer>(const_cast<uint8_t*>(p), entry.nbytes(), Device::cpu(), owner_);
  return Tensor(std::move(buffer), entry.dtype, entry.shape);
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }

  std::set<std::string_view> seen;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MG_CHECK(!name.empty(), "{}: cannot write a tensor with an empty name", file);
    MG_CHECK(name != kMetadataKey, "{}: '{}' is reserved and cannot name a tensor", file, name);
    MG_CHECK(seen.insert(name).second, "{}: tensor '{}' is listed twice", file, name);
    MG_CHECK(t.defined(), "{}: tensor '{}' is undefined", file, name);
    MG_CHECK(t.device().is_cpu(), "{}: tensor '{}' is on {} (expected a CPU tensor)", file, name,
             t.device().str());
    const size_t end = offset + t.nbytes();
    header[name] = Json::object({{"dtype", std::string(dtype_name(t.dtype()))},
                                 {"shape", t.shape()},
                                 {"data_offsets", Json::array({offset, end})}});
    offset = end;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {
    MG_FAIL("{}: cannot write header: {} (names and metadata must be valid UTF-8)", file, e.what());
  }
  // The data section starts 8-byte aligned: pad the header with spaces, as the format allows.
  const size_t padded = (kHeaderLengthBytes + text.size() + 7) / 8 * 8 - kHeaderLengthBytes;
  text.resize(padded, ' ');

  uint8_t len_bytes[kHeaderLengthBytes];
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) {
    len_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  }
  std::vector<std::span<const uint8_t>> pieces;
  pieces.emplace_back(len_bytes, kHeaderLengthBytes);
  pieces.emplace_back(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  for (const auto& [name, t] : tensors) {
    if (t.nbytes() > 0) pieces.emplace_back(static_cast<const uint8_t*>(t.raw()), t.nbytes());
  }
  write_file_atomically(path, pieces);
}

}  // namespace mg
