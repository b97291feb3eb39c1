#include "framework/text/tokenizer_json.h"

#include "framework/core/error.h"
#include "framework/io/json.h"
#include "framework/text/utf8.h"

namespace mg::text {

void json_fail(const std::string& where, std::string_view what) {
  MG_FAIL("{}: {}", where, what);
}

std::string json_path(const std::string& where, std::string_view key) {
  // The first field after the file name is joined with ": ", later ones with ".".
  if (where.ends_with(".json")) return fmt::format("{}: {}", where, key);
  return fmt::format("{}.{}", where, key);
}

std::string json_path(const std::string& where, size_t index) {
  return fmt::format("{}[{}]", where, index);
}

const nlohmann::json* json_field_opt(const nlohmann::json& obj, std::string_view key,
                                     const std::string& where) {
  if (!obj.is_object()) {
    json_fail(where, fmt::format("expected an object, found {} {}", json_type_phrase(obj),
                                 json_brief(obj)));
  }
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json& json_field(const nlohmann::json& obj, std::string_view key,
                                 const std::string& where) {
  if (!obj.is_object()) {
    json_fail(where, fmt::format("expected an object, found {} {}", json_type_phrase(obj),
                                 json_brief(obj)));
  }
  auto it = obj.find(std::string(key));
  if (it == obj.end()) json_fail(json_path(where, key), "missing");
  return *it;
}

std::string json_string_field(const nlohmann::json& obj, std::string_view key,
                              const std::string& where) {
  const nlohmann::json& v = json_field(obj, key, where);
  if (!v.is_string()) {
    json_fail(json_path(where, key),
              fmt::format("expected a string, found {} {}", json_type_phrase(v), json_brief(v)));
  }
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > static_cast<size_t>(kMaxTokenBytes)) {
    json_fail(json_path(where, key),
              fmt::format("string of {} bytes (at most {} are taken)", s.size(), kMaxTokenBytes));
  }
  if (!is_valid_utf8(s)) json_fail(json_path(where, key), "string is not valid UTF-8");
  return s;
}

bool json_bool_field(const nlohmann::json& obj, std::string_view key, const std::string& where,
                     bool fallback) {
  const nlohmann::json* v = json_field_opt(obj, key, where);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    json_fail(json_path(where, key), fmt::format("expected true or false, found {} {}",
                                                 json_type_phrase(*v), json_brief(*v)));
  }
  return v->get<bool>();
}

int64_t json_int_field(const nlohmann::json& obj, std::string_view key, const std::string& where,
                       int64_t lo, int64_t hi) {
  const nlohmann::json& v = json_field(obj, key, where);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) ||
      v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    json_fail(json_path(where, key),
              fmt::format("expected an integer in [{}, {}], found {}", lo, hi, json_brief(v)));
  }
  return v.get<int64_t>();
}

const nlohmann::json& json_array_field(const nlohmann::json& obj, std::string_view key,
                                       const std::string& where, size_t max_items) {
  const nlohmann::json& v = json_field(obj, key, where);
  if (!v.is_array()) {
    json_fail(json_path(where, key),
              fmt::format("expected an array, found {} {}", json_type_phrase(v), json_brief(v)));
  }
  if (v.size() > max_items) {
    json_fail(json_path(where, key),
              fmt::format("{} entries (at most {} are taken)", v.size(), max_items));
  }
  return v;
}

std::pair<std::string, bool> json_pattern(const nlohmann::json& obj, std::string_view key,
                                          const std::string& where) {
  const std::string path = json_path(where, key);
  const nlohmann::json& p = json_field(obj, key, where);
  if (p.is_object() && p.size() == 1) {
    if (p.contains("String")) return {json_string_field(p, "String", path), true};
    if (p.contains("Regex")) return {json_string_field(p, "Regex", path), false};
  }
  json_fail(path, fmt::format("expected {{\"String\": ...}} or {{\"Regex\": ...}}, found {}",
                              json_brief(p)));
}

}  // namespace mg::text
