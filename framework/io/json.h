// JSON files (Hugging Face config.json and friends) with errors that name the file and the key.
//
// A thin layer over nlohmann::json: load_json_file turns parse errors into mg::Error
// "config.json:3:14: <what went wrong>", and the typed getters turn a missing key or a value of the
// wrong type into "config.json: key 'hidden_size': expected an integer, found string \"4096\"".
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg {

// Reads and parses `path`. Throws mg::Error "<path>:<line>:<column>: <message>" on bad JSON and
// the MappedFile errors (missing, directory, empty) otherwise.
nlohmann::json load_json_file(const std::filesystem::path& path);
// Parses `text`; `name` stands for the file in error messages.
nlohmann::json parse_json(std::string_view text, std::string_view name);

// The message of a parse error without nlohmann's "[json.exception...] parse error at ...:" prefix,
// bytes that are not printable ASCII escaped so the message is safe to print.
std::string json_parse_error_message(const nlohmann::json::parse_error& e);
// `value` as compact JSON, cut to at most `max_chars` characters (for "found ..." in errors).
std::string json_brief(const nlohmann::json& value, size_t max_chars = 60);
// "an integer", "a string", "null", ... for "found ..." in errors.
std::string_view json_type_phrase(const nlohmann::json& value);

// Required values: throw mg::Error naming `file` and `key` when `obj` is not an object, the key is
// missing or null, or the value has the wrong type. Integers must be JSON integers (4096, not
// 4096.0); doubles accept integers too.
int64_t json_int(const nlohmann::json& obj, std::string_view key,
                 const std::filesystem::path& file);
double json_double(const nlohmann::json& obj, std::string_view key,
                   const std::filesystem::path& file);
bool json_bool(const nlohmann::json& obj, std::string_view key, const std::filesystem::path& file);
std::string json_string(const nlohmann::json& obj, std::string_view key,
                        const std::filesystem::path& file);
std::vector<int64_t> json_int_array(const nlohmann::json& obj, std::string_view key,
                                    const std::filesystem::path& file);

// Optional values: nullopt when the key is missing or null (Hugging Face writes null for "unset");
// a present value of the wrong type is still an error.
std::optional<int64_t> json_int_opt(const nlohmann::json& obj, std::string_view key,
                                    const std::filesystem::path& file);
std::optional<double> json_double_opt(const nlohmann::json& obj, std::string_view key,
                                      const std::filesystem::path& file);
std::optional<bool> json_bool_opt(const nlohmann::json& obj, std::string_view key,
                                  const std::filesystem::path& file);
std::optional<std::string> json_string_opt(const nlohmann::json& obj, std::string_view key,
                                           const std::filesystem::path& file);

}  // namespace mg
