// libFuzzer target: bytes -> a tokenizer.json and a text -> Tokenizer::parse, then encode the
// text, decode the ids, decode ids taken from the text's bytes, and stream them.
//
// Input layout: the tokenizer.json, then optionally kTextSeparator and the text. Loading must
// either refuse with mg::Error or give a tokenizer; encoding and decoding must then not crash
// (an mg::Error from a bounded regex match is fine). Any crash, sanitizer report or other
// exception type is a finding.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/error.h"
#include "framework/text/tokenizer.h"

namespace {

constexpr std::string_view kTextSeparator = "\n#text#\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t at = input.find(kTextSeparator);
  const std::string_view json = input.substr(0, at);
  const std::string_view text =
      at == std::string_view::npos ? std::string_view() : input.substr(at + kTextSeparator.size());
  std::unique_ptr<mg::text::Tokenizer> tokenizer;
  try {
    tokenizer = mg::text::Tokenizer::parse(json, "tokenizer.json");
  } catch (const mg::Error&) {
    return 0;
  }
  try {
    for (bool special : {true, false}) {
      const std::vector<int32_t> ids = tokenizer->encode(text, special);
      (void)tokenizer->decode(ids, !special);
    }
    // Arbitrary ids (in and beyond the vocabulary), decoded at once and streamed.
    std::vector<int32_t> ids;
    const int64_t bound = tokenizer->id_bound() + 2;
    for (size_t i = 0; i + 1 < text.size(); i += 2) {
      const int v = (static_cast<uint8_t>(text[i]) << 8) | static_cast<uint8_t>(text[i + 1]);
      ids.push_back(static_cast<int32_t>(v % bound));
    }
    (void)tokenizer->decode(ids, false);
    mg::text::DecodeStream stream(*tokenizer, true);
    for (int32_t id : ids) (void)stream.step(id);
  } catch (const mg::Error&) {
  }
  return 0;
}
