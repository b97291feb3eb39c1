#include "framework/text/chat_template.h"

#include <fstream>
#include <sstream>

#include "framework/core/error.h"
#include "framework/io/json.h"
#include "framework/io/regular_file.h"
#include "framework/text/jinja/ast.h"
#include "framework/text/jinja/interpreter.h"

namespace mg::text {

const char* const kDefaultChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

namespace {

// Template files above this are not chat templates.
constexpr std::uintmax_t kMaxTemplateFileBytes = 64u << 20;

std::string read_small_file(const std::filesystem::path& path) {
  // open_regular_file_for_reading refuses FIFOs, directories and devices with a clear message.
  (void)open_regular_file_for_reading(path);
  MG_CHECK(std::filesystem::file_size(path) <= kMaxTemplateFileBytes, "{}: larger than {} bytes",
           path.string(), kMaxTemplateFileBytes);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// bos_token / eos_token: a string, or an AddedToken object {"content": ...}.
std::string special_token(const nlohmann::json& config, const char* key,
                          const std::filesystem::path& file) {
  if (!config.contains(key) || config[key].is_null()) return "";
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  MG_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(),
           "{}: '{}' must be a string or an object with a string 'content', found {}",
           file.string(), key, json_type_phrase(v));
  return v["content"].get<std::string>();
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string name)
    : source_(std::move(source)), name_(std::move(name)) {
  try {
    body_ = std::make_unique<jinja::Body>(jinja::parse_template(source_));
  } catch (const Error& e) {
    MG_FAIL("{}: chat template: {}", name_, e.what());
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::optional<ChatTemplate> ChatTemplate::load_for_model(const std::filesystem::path& model_dir) {
  const std::filesystem::path config_path = model_dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (std::filesystem::exists(config_path)) config = load_json_file(config_path);
  MG_CHECK(config.is_object(), "{}: expected a JSON object, found {}", config_path.string(),
           json_type_phrase(config));
  std::optional<ChatTemplate> result;
  const std::filesystem::path jinja_path = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) {
    result.emplace(read_small_file(jinja_path), jinja_path.string());
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    const nlohmann::json& t = config["chat_template"];
    std::optional<std::string> source;
    if (t.is_string()) {
      source = t.get<std::string>();
    } else {
      MG_CHECK(t.is_array(), "{}: 'chat_template' must be a string or a list, found {}",
               config_path.string(), json_type_phrase(t));
      for (const nlohmann::json& entry : t) {
        MG_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                     entry.contains("template") && entry["template"].is_string(),
                 "{}: 'chat_template' list entries must be {{\"name\": ..., \"template\": ...}}",
                 config_path.string());
        if (entry["name"] == "default") source = entry["template"].get<std::string>();
      }
      MG_CHECK(source.has_value(), "{}: 'chat_template' lists no template named 'default'",
               config_path.string());
    }
    result.emplace(std::move(*source), config_path.string());
  } else {
    return std::nullopt;
  }
  result->set_special_tokens(special_token(config, "bos_token", config_path),
                             special_token(config, "eos_token", config_path));
  return result;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const ChatRenderOptions& options) const {
  using jinja::Value;
  jinja::ValueDict globals;
  // Render variables as transformers passes them: kwargs first, so the fixed names win.
  if (options.kwargs.is_object()) {
    for (const auto& [k, v] : options.kwargs.items()) globals.set(k, Value::from_json(v));
  }
  globals.set("messages", Value::from_json(messages));
  globals.set("tools", options.tools.is_null() ? Value::none() : Value::from_json(options.tools));
  globals.set("documents", Value::none());
  globals.set("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  globals.set("bos_token", Value::string(bos_token_));
  globals.set("eos_token", Value::string(eos_token_));
  globals.set("raise_exception", Value::callable([](const jinja::CallArgs& args) -> Value {
                MG_FAIL("raise_exception: {}",
                        args.positional.empty() ? "" : jinja::to_str(args.positional[0]));
              }));
  const std::optional<std::time_t> now = options.now;
  globals.set("strftime_now", Value::callable([now](const jinja::CallArgs& args) {
                MG_CHECK(args.positional.size() == 1 && args.positional[0].is_string(),
                         "strftime_now takes one format string");
                const std::time_t t = now.value_or(std::time(nullptr));
                std::tm tm{};
                localtime_r(&t, &tm);
                char buf[256];
                const size_t n =
                    std::strftime(buf, sizeof(buf), args.positional[0].as_string().c_str(), &tm);
                return Value::string(std::string(buf, n));
              }));
  try {
    return jinja::render(*body_, globals, options.work_limit.value_or(jinja::kMaxRenderWork));
  } catch (const Error& e) {
    MG_FAIL("{}: chat template: {}", name_, e.what());
  }
}

}  // namespace mg::text
