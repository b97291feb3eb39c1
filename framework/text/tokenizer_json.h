// Reading the fields of a tokenizer.json with errors that name the file and the field path:
// "tokenizer.json: pre_tokenizer.pretokenizers[1].behavior: expected a string, found number 3".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mg::text {

// Bounds of a tokenizer.json: larger values come from a broken or hostile file (the largest
// real vocabularies have ~260k entries and ~1k added tokens, the largest files ~30 MB).
inline constexpr int64_t kMaxTokenizerFileBytes = 512ll << 20;
inline constexpr int64_t kMaxVocabEntries = 4'000'000;
inline constexpr int64_t kMaxMerges = 4'000'000;
inline constexpr int64_t kMaxAddedTokens = 1 << 20;
inline constexpr int64_t kMaxTokenBytes = 64 * 1024;
// Added tokens are searched for at every position of the text: each at most 1 KiB (the longest
// in real files are ~50 bytes), all together at most 16 MiB.
inline constexpr int64_t kMaxAddedTokenBytes = 1024;
inline constexpr int64_t kMaxAddedTokensTotalBytes = 16 << 20;
// Nested Sequence normalizers/pre-tokenizers/decoders/post-processors, and items of one.
inline constexpr int kMaxNesting = 8;
inline constexpr size_t kMaxSequenceItems = 64;

[[noreturn]] void json_fail(const std::string& where, std::string_view what);

// `obj[key]` where `obj` must be an object and the key present (null counts as present).
const nlohmann::json& json_field(const nlohmann::json& obj, std::string_view key,
                                 const std::string& where);
// The same, nullptr when missing or null.
const nlohmann::json* json_field_opt(const nlohmann::json& obj, std::string_view key,
                                     const std::string& where);

std::string json_string_field(const nlohmann::json& obj, std::string_view key,
                              const std::string& where);
// Missing or null: `fallback`; a value of another type is an error.
bool json_bool_field(const nlohmann::json& obj, std::string_view key, const std::string& where,
                     bool fallback);
int64_t json_int_field(const nlohmann::json& obj, std::string_view key, const std::string& where,
                       int64_t lo, int64_t hi);
// The array under `key`, at most `max_items` long.
const nlohmann::json& json_array_field(const nlohmann::json& obj, std::string_view key,
                                       const std::string& where, size_t max_items);

// "<where>.<key>".
std::string json_path(const std::string& where, std::string_view key);
// "<where>[<i>]".
std::string json_path(const std::string& where, size_t index);

// A Split/Replace "pattern": {"String": "..."} or {"Regex": "..."}. Returns the text and whether
// it is a literal string.
std::pair<std::string, bool> json_pattern(const nlohmann::json& obj, std::string_view key,
                                          const std::string& where);

}  // namespace mg::text
