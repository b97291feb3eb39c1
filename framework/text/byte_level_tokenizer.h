// The tokenizer.json of models whose first 256 ids are the 256 bytes (the bundled models and
// every make-model model): byte-level BPE without merges, so any text encodes to its UTF-8 bytes
// and any id sequence decodes to text (bytes that are not UTF-8 shown as U+FFFD).
#pragma once

#include <string>

namespace mg::text {

// The JSON text (Hugging Face tokenizers format; `tokenizers` loads it and encodes as we do:
// tests/unit/text/byte_level_tokenizer_test.cc).
std::string byte_level_tokenizer_json();

}  // namespace mg::text
