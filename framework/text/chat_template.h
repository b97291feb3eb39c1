// A checkpoint's chat template: the Jinja program in tokenizer_config.json ("chat_template") or
// chat_template.jinja that turns a conversation into the prompt text, run as transformers'
// apply_chat_template runs it (jinja2 with trim_blocks and lstrip_blocks, the tojson,
// raise_exception and strftime_now it installs). The template is parsed once, when loaded: one
// that uses a Jinja feature outside our subset (docs/chat_templates.md) is an mg::Error then, not
// a wrong prompt later.
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mg::text {

namespace jinja {
struct Node;
}

// A template for models that ship none (the bundled model): ChatML, as Qwen's templates format
// turns, "<|im_start|>role\ncontent<|im_end|>\n".
extern const char* const kDefaultChatTemplate;

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // The request's tools (OpenAI "tools" array), null for none.
  nlohmann::ordered_json tools;
  // Further template variables (vLLM's chat_template_kwargs, e.g. enable_thinking).
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  // strftime_now's clock; unset: the current local time.
  std::optional<std::time_t> now;
  // The render's work bound (jinja/limits.h); unset: kMaxRenderWork. The fuzzer lowers it so
  // that each input stays fast.
  std::optional<int64_t> work_limit;
};

class ChatTemplate {
 public:
  // Parses `source`; `name` stands for it in errors ("<name>: line N: ...").
  ChatTemplate(std::string source, std::string name);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The template of the model in `model_dir`: chat_template.jinja, else tokenizer_config.json's
  // "chat_template" (a string, or a list of {name, template} of which "default" is used), with
  // its bos_token and eos_token. nullopt when neither file holds one. mg::Error for an unreadable
  // file or a template outside the subset.
  static std::optional<ChatTemplate> load_for_model(const std::filesystem::path& model_dir);

  // Renders `messages` (the OpenAI array of {role, content, ...}). mg::Error for a render error,
  // raise_exception's message included (e.g. "roles must alternate").
  std::string render(const nlohmann::ordered_json& messages,
                     const ChatRenderOptions& options = {}) const;

  void set_special_tokens(std::string bos, std::string eos) {
    bos_token_ = std::move(bos);
    eos_token_ = std::move(eos);
  }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string name_;
  std::string bos_token_;
  std::string eos_token_;
  std::unique_ptr<std::vector<std::unique_ptr<jinja::Node>>> body_;
};

}  // namespace mg::text
