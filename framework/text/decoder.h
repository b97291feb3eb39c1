// tokenizer.json "decoder": turns token strings back into text. Supported: ByteLevel, Metaspace,
// Replace, ByteFallback, Fuse, Strip and Sequence of them (each as tokenizers' decode_chain:
// a list of strings in, a list out; the text is their concatenation). Any other type is refused
// when the file is loaded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& value, const std::string& where,
                                       int depth = 0);

}  // namespace mg::text
