// libFuzzer target: bytes -> a chat template and a conversation -> ChatTemplate (parse), then
// render it twice.
//
// Input layout: the template source, then optionally kMessagesSeparator and the messages as JSON
// (an array of {role, content, ...}; anything else, or JSON that does not parse, renders a fixed
// two-turn conversation). Parsing must either refuse with mg::Error or give a template; rendering
// must give mg::Error or a prompt, the same prompt both times. Any crash, hang past libFuzzer's
// timeout, sanitizer report (stack overflow, leak, undefined behaviour) or other exception type is
// a finding. The work bound is lowered so one input renders in milliseconds.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/text/chat_template.h"

namespace {

constexpr std::string_view kMessagesSeparator = "\n#messages#\n";
constexpr int64_t kFuzzWorkLimit = 200'000;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ojson = nlohmann::ordered_json;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t at = input.find(kMessagesSeparator);
  const std::string_view source = input.substr(0, at);
  ojson messages = ojson::parse(R"([{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Hi there"}])");
  if (at != std::string_view::npos) {
    ojson parsed = ojson::parse(input.substr(at + kMessagesSeparator.size()), nullptr,
                                /*allow_exceptions=*/false);
    if (parsed.is_array()) messages = std::move(parsed);
  }
  std::optional<mg::text::ChatTemplate> tmpl;
  try {
    tmpl.emplace(std::string(source), "fuzz");
  } catch (const mg::Error&) {
    return 0;
  }
  tmpl->set_special_tokens("<s>", "</s>");
  mg::text::ChatRenderOptions options;
  options.now = 1741953600;
  options.work_limit = kFuzzWorkLimit;
  std::string first;
  try {
    first = tmpl->render(messages, options);
  } catch (const mg::Error&) {
    return 0;
  }
  if (tmpl->render(messages, options) != first) __builtin_trap();
  return 0;
}
