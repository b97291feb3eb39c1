#include "framework/io/json.h"

#include <algorithm>
#include <limits>

#include "framework/core/error.h"
#include "framework/io/mmap_file.h"

namespace mg {

namespace {

// Deeper JSON is refused while parsing: no config needs it, and printing a value recurses.
constexpr int kMaxJsonDepth = 256;

std::string escape_for_message(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  return out;
}

// The value under `key`, or nullptr when it is missing or null.
const nlohmann::json* lookup(const nlohmann::json& obj, std::string_view key,
                             const std::filesystem::path& file) {
  MG_CHECK(obj.is_object(), "{}: expected a JSON object holding key '{}', found {}", file.string(),
           key, json_type_phrase(obj));
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json& require(const nlohmann::json& obj, std::string_view key,
                              const std::filesystem::path& file, std::string_view expected) {
  const nlohmann::json* value = lookup(obj, key, file);
  if (value == nullptr) {
    MG_CHECK(!obj.contains(std::string(key)), "{}: key '{}': expected {}, found null",
             file.string(), key, expected);
    MG_FAIL("{}: missing key '{}' (expected {})", file.string(), key, expected);
  }
  return *value;
}

[[noreturn]] void fail_type(const nlohmann::json& value, std::string_view key,
                            const std::filesystem::path& file, std::string_view expected) {
  MG_FAIL("{}: key '{}': expected {}, found {} {}", file.string(), key, expected,
          json_type_phrase(value), json_brief(value));
}

int64_t as_int(const nlohmann::json& value, std::string_view key,
               const std::filesystem::path& file) {
  if (!value.is_number_integer()) fail_type(value, key, file, "an integer");
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    MG_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
             "{}: key '{}': integer {} is out of range (at most {})", file.string(), key, u,
             std::numeric_limits<int64_t>::max());
    return static_cast<int64_t>(u);
  }
  return value.get<int64_t>();
}

double as_double(const nlohmann::json& value, std::string_view key,
                 const std::filesystem::path& file) {
  if (!value.is_number()) fail_type(value, key, file, "a number");
  return value.get<double>();
}

bool as_bool(const nlohmann::json& value, std::string_view key, const std::filesystem::path& file) {
  if (!value.is_boolean()) fail_type(value, key, file, "true or false");
  return value.get<bool>();
}

std::string as_string(const nlohmann::json& value, std::string_view key,
                      const std::filesystem::path& file) {
  if (!value.is_string()) fail_type(value, key, file, "a string");
  return value.get<std::string>();
}

}  // namespace

std::string_view json_type_phrase(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::binary:
      return "binary data";
    case nlohmann::json::value_t::discarded:
      return "nothing";
  }
  return "an unknown JSON value";
}

std::string json_brief(const nlohmann::json& value, size_t max_chars) {
  std::string text =
      value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_chars) {
    text.resize(max_chars);
    text += "...";
  }
  return text;
}

std::string json_parse_error_message(const nlohmann::json::parse_error& e) {
  // "[json.exception.parse_error.101] parse error at line 2, column 10: <message>"
  std::string_view message = e.what();
  if (const size_t at = message.find("column "); at != std::string_view::npos) {
    if (const size_t colon = message.find(": ", at); colon != std::string_view::npos) {
      message.remove_prefix(colon + 2);
    }
  } else if (const size_t bracket = message.find("] "); bracket != std::string_view::npos) {
    message.remove_prefix(bracket + 2);
  }
  return escape_for_message(message);
}

nlohmann::json parse_json(std::string_view text, std::string_view name) {
  const auto limit_depth = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      MG_FAIL("{}: JSON nested deeper than {} levels", name, kMaxJsonDepth);
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), limit_depth);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the bytes read, the offending one included.
    const size_t pos = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    const std::string_view before = text.substr(0, pos);
    const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
    const size_t line_start = before.rfind('\n');
    const size_t column = line_start == std::string_view::npos ? pos + 1 : pos - line_start;
    MG_FAIL("{}:{}:{}: {}", name, line, column, json_parse_error_message(e));
  } catch (const nlohmann::json::exception& e) {
    MG_FAIL("{}: invalid JSON: {}", name, escape_for_message(e.what()));
  }
}

nlohmann::json load_json_file(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> file = MappedFile::open(path);
  return parse_json(file->text(), path.string());
}

int64_t json_int(const nlohmann::json& obj, std::string_view key,
                 const std::filesystem::path& file) {
  return as_int(require(obj, key, file, "an integer"), key, file);
}

double json_double(const nlohmann::json& obj, std::string_view key,
                   const std::filesystem::path& file) {
  return as_double(require(obj, key, file, "a number"), key, file);
}

bool json_bool(const nlohmann::json& obj, std::string_view key, const std::filesystem::path& file) {
  return as_bool(require(obj, key, file, "true or false"), key, file);
}

std::string json_string(const nlohmann::json& obj, std::string_view key,
                        const std::filesystem::path& file) {
  return as_string(require(obj, key, file, "a string"), key, file);
}

std::vector<int64_t> json_int_array(const nlohmann::json& obj, std::string_view key,
                                    const std::filesystem::path& file) {
  const nlohmann::json& value = require(obj, key, file, "an array of integers");
  if (!value.is_array()) fail_type(value, key, file, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const nlohmann::json& element = value[i];
    MG_CHECK(element.is_number_integer(),
             "{}: key '{}': element {}: expected an integer, found {} {}", file.string(), key, i,
             json_type_phrase(element), json_brief(element));
    out.push_back(as_int(element, key, file));
  }
  return out;
}

std::optional<int64_t> json_int_opt(const nlohmann::json& obj, std::string_view key,
                                    const std::filesystem::path& file) {
  const nlohmann::json* value = lookup(obj, key, file);
  if (value == nullptr) return std::nullopt;
  return as_int(*value, key, file);
}

std::optional<double> json_double_opt(const nlohmann::json& obj, std::string_view key,
                                      const std::filesystem::path& file) {
  const nlohmann::json* value = lookup(obj, key, file);
  if (value == nullptr) return std::nullopt;
  return as_double(*value, key, file);
}

std::optional<bool> json_bool_opt(const nlohmann::json& obj, std::string_view key,
                                  const std::filesystem::path& file) {
  const nlohmann::json* value = lookup(obj, key, file);
  if (value == nullptr) return std::nullopt;
  return as_bool(*value, key, file);
}

std::optional<std::string> json_string_opt(const nlohmann::json& obj, std::string_view key,
                                           const std::filesystem::path& file) {
  const nlohmann::json* value = lookup(obj, key, file);
  if (value == nullptr) return std::nullopt;
  return as_string(*value, key, file);
}

}  // namespace mg
