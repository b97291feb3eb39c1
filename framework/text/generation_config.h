// generation_config.json of a Hugging Face checkpoint: the ids that end generation.
// "eos_token_id" may be one integer or a list (Llama-4, Qwen3 and GPT-OSS list several); all of
// them stop `moegraph run`, beside the graph's info.eos_token_id.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace mg::text {

// A list longer than this comes from a broken file.
inline constexpr size_t kMaxEosIds = 1024;

// The eos ids of `path`; empty when the file has no eos_token_id (or null). Throws mg::Error
// naming the file and the key for bad JSON or a value that is not an id or a list of ids.
std::vector<int32_t> read_generation_eos_ids(const std::filesystem::path& path);

}  // namespace mg::text
