#include "framework/text/byte_level_tokenizer.h"

#include <nlohmann/json.hpp>

#include "framework/text/byte_level.h"

namespace mg::text {

std::string byte_level_tokenizer_json() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<uint8_t>(b))] = b;
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"},
                                             {"add_prefix_space", false},
                                             {"trim_offsets", false},
                                             {"use_regex", false}};
  nlohmann::ordered_json root = {{"version", "1.0"},
                                 {"truncation", nullptr},
                                 {"padding", nullptr},
                                 {"added_tokens", nlohmann::ordered_json::array()},
                                 {"normalizer", nullptr},
                                 {"pre_tokenizer", byte_level},
                                 {"post_processor", nullptr},
                                 {"decoder", byte_level},
                                 {"model",
                                  {{"type", "BPE"},
                                   {"dropout", nullptr},
                                   {"unk_token", nullptr},
                                   {"continuing_subword_prefix", nullptr},
                                   {"end_of_word_suffix", nullptr},
                                   {"fuse_unk", false},
                                   {"byte_fallback", false},
                                   {"ignore_merges", false},
                                   {"vocab", vocab},
                                   {"merges", nlohmann::ordered_json::array()}}}};
  return root.dump(1) + "\n";
}

}  // namespace mg::text
