#include "framework/import/config_reader.h"

#include "framework/core/error.h"
#include "framework/io/json.h"

namespace mg {

ConfigReader::ConfigReader(const nlohmann::json& obj, std::filesystem::path label)
    : obj_(&obj), label_(std::move(label)) {
  MG_CHECK(obj_->is_object(), "{}: expected a JSON object, found {}", label_.string(),
           json_type_phrase(*obj_));
}

bool ConfigReader::has(std::string_view key) const {
  auto it = obj_->find(std::string(key));
  return it != obj_->end() && !it->is_null();
}

std::string_view ConfigReader::pick(std::initializer_list<std::string_view> keys) const {
  for (std::string_view key : keys) {
    if (has(key)) return key;
  }
  return *keys.begin();
}

int64_t ConfigReader::integer(std::string_view key) const {
  return json_int(*obj_, key, label_);
}

double ConfigReader::number(std::string_view key) const {
  return json_double(*obj_, key, label_);
}

std::string ConfigReader::string(std::string_view key) const {
  return json_string(*obj_, key, label_);
}

int64_t ConfigReader::positive(std::string_view key, int64_t max) const {
  const int64_t v = integer(key);
  if (v <= 0 || v > max) {
    fail(key, fmt::format("expected a positive integer of at most {}, found {}", max, v));
  }
  return v;
}

int64_t ConfigReader::integer_or(std::string_view key, int64_t fallback) const {
  return json_int_opt(*obj_, key, label_).value_or(fallback);
}

double ConfigReader::number_or(std::string_view key, double fallback) const {
  return json_double_opt(*obj_, key, label_).value_or(fallback);
}

bool ConfigReader::boolean_or(std::string_view key, bool fallback) const {
  return json_bool_opt(*obj_, key, label_).value_or(fallback);
}

std::string ConfigReader::string_or(std::string_view key, std::string fallback) const {
  return json_string_opt(*obj_, key, label_).value_or(std::move(fallback));
}

std::optional<int64_t> ConfigReader::integer_opt(std::string_view key) const {
  return json_int_opt(*obj_, key, label_);
}

std::optional<double> ConfigReader::number_opt(std::string_view key) const {
  return json_double_opt(*obj_, key, label_);
}

std::optional<std::vector<int64_t>> ConfigReader::integers_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return json_int_array(*obj_, key, label_);
}

std::optional<std::vector<std::string>> ConfigReader::strings_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const nlohmann::json& value = obj_->at(std::string(key));
  if (!value.is_array()) {
    fail(key, fmt::format("expected a list of strings, found {} {}", json_type_phrase(value),
                          json_brief(value)));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      fail(key, fmt::format("element {}: expected a string, found {}", i, json_brief(value[i])));
    }
    out.push_back(value[i].get<std::string>());
  }
  return out;
}

std::optional<int64_t> ConfigReader::first_integer_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const nlohmann::json& value = obj_->at(std::string(key));
  if (value.is_array()) {
    const std::vector<int64_t> all = json_int_array(*obj_, key, label_);
    if (all.empty()) return std::nullopt;
    return all.front();
  }
  return integer(key);
}

std::optional<ConfigReader> ConfigReader::object_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const nlohmann::json& value = obj_->at(std::string(key));
  if (!value.is_object()) {
    fail(key, fmt::format("expected an object, found {} {}", json_type_phrase(value),
                          json_brief(value)));
  }
  return ConfigReader(value, std::filesystem::path(fmt::format("{} ({})", label_.string(), key)));
}

void ConfigReader::fail(std::string_view key, std::string_view message) const {
  MG_FAIL("{}: key '{}': {}", label_.string(), key, message);
}

}  // namespace mg
