#include "framework/io/graph_loader.h"

#include <limits>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/unknown_field_set.h>

#include "framework/core/error.h"
#include "framework/io/mmap_file.h"
#include "framework/io/regular_file.h"

namespace mg {

namespace {

enum class GraphEncoding { kText, kBinary };

GraphEncoding encoding_of(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".pbtxt") return GraphEncoding::kText;
  if (ext == ".pb") return GraphEncoding::kBinary;
  MG_FAIL("{}: unknown graph file extension '{}' (expected .pbtxt for text or .pb for binary)",
          path.string(), ext);
}

// Keeps the first error of the text parser; protobuf reports 0-based lines and columns.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (has_error_) return;
    has_error_ = true;
    line_ = line;
    column_ = column;
    message_ = message;
  }

  // "name:12:5: message", or "name: message" when the parser gave no position.
  std::string describe(std::string_view name) const {
    if (!has_error_) return fmt::format("{}: not a valid text moegraph graph", name);
    if (line_ < 0) return fmt::format("{}: {}", name, message_);
    return fmt::format("{}:{}:{}: {}", name, line_ + 1, column_ + 1, message_);
  }

 private:
  bool has_error_ = false;
  int line_ = -1;
  int column_ = -1;
  std::string message_;
};

void check_version(const proto::Model& model, std::string_view name) {
  MG_CHECK(model.format_version() != 0,
           "{}: missing format_version (expected format_version: {} at the top of the file)", name,
           kGraphFormatVersion);
  MG_CHECK(model.format_version() <= kGraphFormatVersion,
           "{}: format_version {} was written by a newer moegraph (this build reads versions {} to "
           "{})",
           name, model.format_version(), kOldestGraphFormatVersion, kGraphFormatVersion);
}

// Paths of fields the schema does not know, e.g. "nodes[3].#21" (at most `limit` of them).
void collect_unknown_fields(const google::protobuf::Message& message, const std::string& prefix,
                            size_t limit, std::vector<std::string>& out) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count() && out.size() < limit; ++i) {
    out.push_back(fmt::format("{}#{}", prefix, unknown.field(i).number()));
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      const int n = reflection->FieldSize(message, field);
      for (int j = 0; j < n && out.size() < limit; ++j) {
        collect_unknown_fields(reflection->GetRepeatedMessage(message, field, j),
                               fmt::format("{}{}[{}].", prefix, field->name(), j), limit, out);
      }
    } else {
      collect_unknown_fields(reflection->GetMessage(message, field),
                             fmt::format("{}{}.", prefix, field->name()), limit, out);
    }
  }
}

// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF (what protobuf's binary
// parser demands of proto3 strings).
bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the first continuation byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if (k == 1 ? (cc < lo || cc > hi) : (cc < 0x80 || cc > 0xbf)) return false;
    }
    i += n + 1;
  }
  return true;
}

// Text format accepts any bytes in a string ("\xff"); the binary format and every consumer of
// names expect UTF-8. Throws for the first string that is not, naming its field path and, where
// the parser recorded it, its line and column.
void check_strings_are_utf8(const google::protobuf::Message& message,
                            const google::protobuf::TextFormat::ParseInfoTree* tree,
                            const std::string& prefix, std::string_view name) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    const bool repeated = field->is_repeated();
    const int n = repeated ? reflection->FieldSize(message, field) : 1;
    for (int j = 0; j < n; ++j) {
      const int index = repeated ? j : -1;
      const std::string path = repeated ? fmt::format("{}{}[{}]", prefix, field->name(), j)
                                        : fmt::format("{}{}", prefix, field->name());
      if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& value =
            repeated ? reflection->GetRepeatedStringReference(message, field, j, &scratch)
                     : reflection->GetStringReference(message, field, &scratch);
        if (is_valid_utf8(value)) continue;
        const google::protobuf::TextFormat::ParseLocation at =
            tree != nullptr ? tree->GetLocation(field, index)
                            : google::protobuf::TextFormat::ParseLocation();
        MG_CHECK(at.line < 0, "{}:{}:{}: {} is not valid UTF-8 (graph strings must be UTF-8)", name,
                 at.line + 1, at.column + 1, path);
        MG_FAIL("{}: {} is not valid UTF-8 (graph strings must be UTF-8)", name, path);
      }
      if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        const google::protobuf::Message& child =
            repeated ? reflection->GetRepeatedMessage(message, field, j)
                     : reflection->GetMessage(message, field);
        check_strings_are_utf8(child,
                               tree != nullptr ? tree->GetTreeForNested(field, index) : nullptr,
                               path + ".", name);
      }
    }
  }
}

// protobuf logs some parse problems itself (a string field holding invalid UTF-8: "[libprotobuf
// ERROR ...] String field ... contains invalid UTF-8 data") before the parse returns false, and
// the user would see that line before ours. Our errors say everything, so its log is dropped: a
// null handler discards messages. Set once, from the first parse (a function-local static is
// initialised once even when ranks load graphs on several threads).
void silence_protobuf_log() {
  static const bool silenced = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)silenced;
}

}  // namespace

proto::Model parse_graph_text(std::string_view data, std::string_view name) {
  // ArrayInputStream takes an int size.
  MG_CHECK(data.size() <= static_cast<size_t>(std::numeric_limits<int>::max()),
           "{}: graph file of {} bytes is too large (at most 2 GiB)", name, data.size());
  google::protobuf::io::ArrayInputStream input(data.data(), static_cast<int>(data.size()));
  FirstErrorCollector errors;
  google::protobuf::TextFormat::ParseInfoTree locations;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&locations);
  proto::Model model;
  if (!parser.Parse(&input, &model)) MG_FAIL("{}", errors.describe(name));
  check_strings_are_utf8(model, &locations, "", name);
  check_version(model, name);
  return model;
}

proto::Model parse_graph_binary(std::string_view data, std::string_view name) {
  silence_protobuf_log();
  MG_CHECK(data.size() <= static_cast<size_t>(std::numeric_limits<int>::max()),
           "{}: graph file of {} bytes is too large (at most 2 GiB)", name, data.size());
  proto::Model model;
  MG_CHECK(model.ParseFromArray(data.data(), static_cast<int>(data.size())),
           "{}: not a valid binary moegraph graph (protobuf parse failed)", name);
  check_version(model, name);
  // Random bytes often parse as fields this schema does not know; in a file of a version we read
  // they mean damage, not news.
  std::vector<std::string> unknown;
  collect_unknown_fields(model, "", 5, unknown);
  MG_CHECK(unknown.empty(),
           "{}: not a valid binary moegraph graph (fields unknown to format version {}: {})", name,
           kGraphFormatVersion, fmt::join(unknown, ", "));
  return model;
}

proto::Model load_graph(const std::filesystem::path& path) {
  const GraphEncoding encoding = encoding_of(path);
  std::shared_ptr<MappedFile> file = MappedFile::open(path);
  switch (encoding) {
    case GraphEncoding::kText:
      return parse_graph_text(file->text(), path.string());
    case GraphEncoding::kBinary:
      return parse_graph_binary(file->text(), path.string());
  }
  MG_ASSERT(false, "unknown graph encoding");
  return {};
}

void save_graph(const std::filesystem::path& path, const proto::Model& model) {
  const GraphEncoding encoding = encoding_of(path);
  std::string bytes;
  bool ok = false;
  switch (encoding) {
    case GraphEncoding::kText:
      ok = google::protobuf::TextFormat::PrintToString(model, &bytes);
      break;
    case GraphEncoding::kBinary:
      ok = model.SerializeToString(&bytes);
      break;
  }
  MG_CHECK(ok, "{}: cannot serialize the graph", path.string());
  const std::span<const uint8_t> piece(reinterpret_cast<const uint8_t*>(bytes.data()),
                                       bytes.size());
  write_file_atomically(path, std::span<const std::span<const uint8_t>>(&piece, 1));
}

}  // namespace mg
