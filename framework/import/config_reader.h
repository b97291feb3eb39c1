// Typed access to a Hugging Face config.json object, with defaults the way transformers applies
// them, and errors that name the file and the key ("…/config.json: missing key 'hidden_size'
// (expected an integer)"). Nested objects (rope_parameters, text_config) get their own reader
// whose label names the parent key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg {

// The bound of size-like config values (hidden, intermediate, vocab, layers, heads, windows):
// 2^24, above every released model's (the largest vocabularies are ~262k entries).
inline constexpr int64_t kMaxConfigSize = int64_t{1} << 24;
// The bound of expert counts: the importer lists every expert's tensors before it finds one
// missing, so this bounds that list (released models have at most a few hundred experts).
inline constexpr int64_t kMaxConfigExperts = 65536;

class ConfigReader {
 public:
  // `obj` must outlive the reader. `label` names the file (and nested key) in errors.
  ConfigReader(const nlohmann::json& obj, std::filesystem::path label);

  const std::filesystem::path& label() const { return label_; }
  const nlohmann::json& json() const { return *obj_; }

  // True when `key` is present and not null.
  bool has(std::string_view key) const;
  // The first of `keys` that is present (transformers' attribute_map aliases, e.g.
  // num_experts / num_local_experts), or the first one when none is (errors then name it).
  std::string_view pick(std::initializer_list<std::string_view> keys) const;

  // Required values (missing or null is an error).
  int64_t integer(std::string_view key) const;
  double number(std::string_view key) const;
  std::string string(std::string_view key) const;
  // A positive integer, at most `max`: every size-like config value is bounded before anything is
  // sized from it (the fuzzer found an olmoe num_experts of 4e10 that sized a 6 TB vector).
  int64_t positive(std::string_view key, int64_t max = kMaxConfigSize) const;

  // Optional values: the default when missing or null; a value of the wrong type is an error.
  int64_t integer_or(std::string_view key, int64_t fallback) const;
  double number_or(std::string_view key, double fallback) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  std::string string_or(std::string_view key, std::string fallback) const;
  std::optional<int64_t> integer_opt(std::string_view key) const;
  std::optional<double> number_opt(std::string_view key) const;
  // A list of integers, or nullopt when missing or null.
  std::optional<std::vector<int64_t>> integers_opt(std::string_view key) const;
  // A list of strings, or nullopt when missing or null.
  std::optional<std::vector<std::string>> strings_opt(std::string_view key) const;
  // An integer, or the first element of a list of integers (eos_token_id), or nullopt.
  std::optional<int64_t> first_integer_opt(std::string_view key) const;

  // The nested object under `key`; nullopt when missing or null; error when not an object.
  std::optional<ConfigReader> object_opt(std::string_view key) const;

  // Throws mg::Error "<label>: key '<key>': <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;

 private:
  const nlohmann::json* obj_;
  std::filesystem::path label_;
};

}  // namespace mg
