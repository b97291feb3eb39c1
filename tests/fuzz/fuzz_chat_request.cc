// libFuzzer target: bytes -> an HTTP request body for /v1/chat/completions or /v1/completions ->
// parse_body, parse_chat_request / parse_completion_request, then the chat request rendered by a
// committed family template (tests/fixtures/chat_templates), as `moegraph serve` does.
//
// Input layout: the first byte picks the template (and, odd or even, which endpoint parses the
// body); the rest is the body. An ApiError (the server's 4xx) or mg::Error (a template's refusal)
// is the expected outcome of a bad request; any crash, sanitizer report or other exception type
// is a finding.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/text/chat_template.h"
#include "serve/openai_protocol.h"

namespace {

const std::vector<mg::text::ChatTemplate>& family_templates() {
  static const std::vector<mg::text::ChatTemplate> templates = [] {
    std::vector<mg::text::ChatTemplate> out;
    const std::string dir = std::string(MG_SOURCE_DIR) + "/tests/fixtures/chat_templates/";
    for (const char* family : {"deepseek_v2", "deepseek_v3", "gpt_oss", "granitemoe", "llama4",
                               "mixtral", "olmoe", "qwen2_moe", "qwen3_moe"}) {
      std::ifstream in(dir + family + ".jinja", std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      out.emplace_back(text.str(), family);
      out.back().set_special_tokens("<s>", "</s>");
    }
    out.emplace_back(mg::text::kDefaultChatTemplate, "chatml");
    return out;
  }();
  return templates;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& templates = family_templates();
  const mg::text::ChatTemplate& tmpl = templates[data[0] % templates.size()];
  const bool chat = data[0] % 2 == 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const mg::serve::ojson request = mg::serve::parse_body(body);
    if (!chat) {
      (void)mg::serve::parse_completion_request(request, "m");
      return 0;
    }
    const mg::serve::ChatRequest r = mg::serve::parse_chat_request(request, "m");
    mg::text::ChatRenderOptions options;
    options.add_generation_prompt = r.add_generation_prompt;
    options.tools = r.tools;
    options.kwargs = r.template_kwargs;
    options.now = 1741953600;
    options.work_limit = 200'000;
    (void)tmpl.render(r.messages, options);
  } catch (const mg::serve::ApiError&) {
  } catch (const mg::Error&) {
  }
  return 0;
}
