// libFuzzer target: bytes -> parse_graph_text and parse_graph_binary.
//
// Expected failures are mg::Error. Anything else is a finding: a crash, a sanitizer report, an
// exception of another type, or a broken round trip below (checked with abort()).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>

#include "framework/core/error.h"
#include "framework/io/graph_loader.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

std::string to_text(const mg::proto::Model& model) {
  std::string text;
  require(google::protobuf::TextFormat::PrintToString(model, &text));
  return text;
}

// A graph that loaded must survive save and load in both encodings.
void check_round_trips(const mg::proto::Model& model) {
  const std::string text = to_text(model);
  const mg::proto::Model from_text = mg::parse_graph_text(text, "roundtrip.pbtxt");
  require(to_text(from_text) == text);
  const std::string binary = model.SerializeAsString();
  const mg::proto::Model from_binary = mg::parse_graph_binary(binary, "roundtrip.pb");
  require(from_binary.SerializeAsString() == binary);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // protobuf logs some parse failures (invalid UTF-8) to stderr; the fuzzer needs no such noise.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  mg::proto::Model model;
  bool loaded = false;
  try {
    model = mg::parse_graph_text(bytes, "fuzz.pbtxt");
    loaded = true;
  } catch (const mg::Error&) {
  }
  if (loaded) check_round_trips(model);

  loaded = false;
  try {
    model = mg::parse_graph_binary(bytes, "fuzz.pb");
    loaded = true;
  } catch (const mg::Error&) {
  }
  if (loaded) check_round_trips(model);
  return 0;
}
