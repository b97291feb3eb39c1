// The checkpoint files that turn ids into text and back, copied next to an imported graph so
// `moegraph run --prompt` and `moegraph tokenize` find them beside model.pbtxt: tokenizer.json
// (docs/tokenizer.md), tokenizer_config.json (chat template, special tokens),
// generation_config.json (eos ids that stop generation) and chat_template.jinja (the chat
// template newer checkpoints keep in a file of its own; docs/server.md).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mg {

inline constexpr const char* kHfTextFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                               "generation_config.json", "chat_template.jinja"};

// Copies those of kHfTextFiles that `hf_dir` holds into `out_dir` (nothing when both are the
// same folder); returns the names copied. Only regular files are read, each at most 512 MiB;
// anything else is an mg::Error naming the file.
std::vector<std::string> copy_hf_text_files(const std::filesystem::path& hf_dir,
                                            const std::filesystem::path& out_dir);

}  // namespace mg
