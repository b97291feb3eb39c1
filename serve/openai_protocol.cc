#include "serve/openai_protocol.h"

#include <atomic>
#include <chrono>
#include <random>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace mg::serve {

namespace {

// A request body's JSON: nesting depth and members of one object at most (check_body_shape). An
// OpenAI request nests ~10 deep (a tool's JSON schema the most) and its objects have a few to a
// few dozen members. The members bound sets the cost of ordered_json's per-insert key scan:
// tools/json_body_parse_bench.cc parses a 32 MiB body of 256-member objects in 3.4 s against 1.6 s
// for 16-member ones and 13.5 s for 1024 (docs/server.md); one object of millions took hours.
constexpr size_t kMaxBodyDepth = 64;
constexpr size_t kMaxObjectMembers = 256;

// Stop strings per request at most (OpenAI allows 4; vLLM any number).
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopLength = 1024;

std::string type_phrase(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return "null";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return "an integer";
    case ojson::value_t::number_float:
      return "a number";
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::array:
      return "an array";
    case ojson::value_t::object:
      return "an object";
    case ojson::value_t::binary:
    case ojson::value_t::discarded:
      break;
  }
  return "an unknown value";
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

const ojson* field(const ojson& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> number_field(const ojson& body, const char* key, double lo, double hi) {
  const ojson* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) {
    bad(key, fmt::format("'{}' must be a number, got {}", key, type_phrase(*v)));
  }
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) {
    bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, d));
  }
  return d;
}

std::optional<int64_t> int_field(const ojson& body, const char* key, int64_t lo, int64_t hi) {
  const ojson* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) {
    bad(key, fmt::format("'{}' must be an integer, got {}", key, type_phrase(*v)));
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    bad(key, fmt::format("'{}' is out of range", key));
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) {
    bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, i));
  }
  return i;
}

bool bool_field(const ojson& body, const char* key, bool def) {
  const ojson* v = field(body, key);
  if (v == nullptr) return def;
  if (!v->is_boolean())
    bad(key, fmt::format("'{}' must be a boolean, got {}", key, type_phrase(*v)));
  return v->get<bool>();
}

void check_model(const ojson& body, const std::string& served_model) {
  const ojson* v = field(body, "model");
  if (v == nullptr) return;
  if (!v->is_string())
    bad("model", fmt::format("'model' must be a string, got {}", type_phrase(*v)));
  if (v->get<std::string>() != served_model) {
    throw ApiError(404,
                   fmt::format("The model `{}` does not exist. This server serves `{}`.",
                               v->get<std::string>(), served_model),
                   "model", "model_not_found");
  }
}

// Fields we do not implement are refused when set to anything but their neutral value, so a
// client never gets a silently different result.
void refuse_unsupported(const ojson& body) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (number_field(body, key, -2.0, 2.0).value_or(0.0) != 0.0) {
      bad(key, fmt::format("'{}' is not supported by this server (only 0)", key));
    }
  }
  if (const ojson* v = field(body, "logprobs"); v != nullptr) {
    if (!(v->is_boolean() && !v->get<bool>()) && !(v->is_number_integer() && v->get<int>() == 0)) {
      bad("logprobs", "'logprobs' is not supported by this server");
    }
  }
  if (const ojson* v = field(body, "top_logprobs"); v != nullptr && !(*v == 0)) {
    bad("top_logprobs", "'top_logprobs' is not supported by this server");
  }
  if (const ojson* v = field(body, "logit_bias"); v != nullptr && !(v->is_object() && v->empty())) {
    bad("logit_bias", "'logit_bias' is not supported by this server");
  }
  if (int_field(body, "n", 1, 128).value_or(1) != 1) {
    bad("n", "'n' must be 1: this server returns one choice per request");
  }
  if (int_field(body, "best_of", 1, 128).value_or(1) != 1) {
    bad("best_of", "'best_of' must be 1 on this server");
  }
  if (const ojson* v = field(body, "suffix"); v != nullptr) {
    bad("suffix", "'suffix' is not supported by this server");
  }
}

GenerationParams parse_params(const ojson& body, const char* max_tokens_key) {
  refuse_unsupported(body);
  GenerationParams p;
  // max_completion_tokens is the chat API's newer name; it wins over max_tokens.
  for (const char* key : {"max_tokens", max_tokens_key}) {
    if (auto v = int_field(body, key, 1, INT32_MAX)) p.max_tokens = static_cast<int>(*v);
  }
  p.sampling.temperature =
      static_cast<float>(number_field(body, "temperature", 0.0, 2.0).value_or(1.0));
  p.sampling.top_p = static_cast<float>(number_field(body, "top_p", 0.0, 1.0).value_or(1.0));
  if (p.sampling.top_p <= 0.0f) bad("top_p", "'top_p' must be in (0, 1], got 0");
  // vLLM's top_k: -1 or 0 keep every token.
  const int64_t top_k = int_field(body, "top_k", -1, INT32_MAX).value_or(0);
  p.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  if (auto seed = int_field(body, "seed", INT64_MIN, INT64_MAX))
    p.seed = static_cast<uint64_t>(*seed);
  if (const ojson* stop = field(body, "stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const ojson& s : *stop) {
        if (!s.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}",
                              type_phrase(*stop)));
    }
    if (p.stop.size() > kMaxStopStrings) {
      bad("stop", fmt::format("at most {} stop strings, got {}", kMaxStopStrings, p.stop.size()));
    }
    for (const std::string& s : p.stop) {
      if (s.empty() || s.size() > kMaxStopLength) {
        bad("stop", fmt::format("stop strings must be 1 to {} bytes long", kMaxStopLength));
      }
    }
  }
  p.ignore_eos = bool_field(body, "ignore_eos", false);
  p.stream = bool_field(body, "stream", false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!p.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    p.include_usage = bool_field(*so, "include_usage", false);
  }
  return p;
}

// A message's content: a string, null, or text parts (flattened into one string, joined by "\n",
// as vLLM does for templates that take strings).
ojson flatten_content(const ojson& content, size_t index) {
  if (content.is_null() || content.is_string()) return content;
  const std::string param = fmt::format("messages[{}].content", index);
  if (!content.is_array()) {
    bad(param, fmt::format("'{}' must be a string, null or an array of text parts, got {}", param,
                           type_phrase(content)));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      bad(param, fmt::format("'{}[{}]' must be {{\"type\": \"text\", \"text\": ...}} (this server "
                             "takes text only)",
                             param, i));
    }
    if (i > 0) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

ojson error_body(const ApiError& e) {
  ojson err = ojson::object();
  err["message"] = e.what();
  err["type"] = e.type;
  err["param"] = e.param.empty() ? ojson() : ojson(e.param);
  err["code"] = e.code.empty() ? ojson() : ojson(e.code);
  return ojson{{"error", err}};
}

// Checks the nesting and the object sizes of a request body before nlohmann parses it: copying
// and converting JSON recurse once per level (so 16 M nested '[' overflow a request thread's
// stack), and an ordered_json object finds each new key by a linear scan (so one object of a few
// million keys takes hours). Bytes inside strings are skipped; malformed JSON is left to the
// parser.
void check_body_shape(std::string_view body) {
  std::vector<size_t> members;  // per open array/object: commas seen so far + 1
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (members.size() >= kMaxBodyDepth) {
          throw ApiError(400,
                         fmt::format("the request body nests more than {} arrays or objects "
                                     "(byte {})",
                                     kMaxBodyDepth, i),
                         "", "invalid_json");
        }
        members.push_back(c == '{' ? 1 : 0);  // arrays: not counted
        break;
      case ',':
        if (!members.empty() && members.back() > 0 && ++members.back() > kMaxObjectMembers) {
          throw ApiError(400,
                         fmt::format("an object in the request body has more than {} members "
                                     "(byte {})",
                                     kMaxObjectMembers, i),
                         "", "invalid_json");
        }
        break;
      case ']':
      case '}':
        if (!members.empty()) members.pop_back();
        break;
      default:
        break;
    }
  }
}

ojson parse_body(const std::string& body) {
  check_body_shape(body);
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const ojson::parse_error& e) {
    throw ApiError(400, fmt::format("the request body is not valid JSON (byte {})", e.byte), "",
                   "invalid_json");
  } catch (const ojson::exception& e) {
    // A number past a double's range (1e400) is nlohmann's out_of_range, not a parse_error: a bad
    // body all the same (found by fuzz_chat_request; it was a 500). The message without
    // nlohmann's "[json.exception.out_of_range.406] " prefix.
    const std::string what = e.what();
    const size_t cut = what.find("] ");
    throw ApiError(400,
                   fmt::format("the request body is not valid JSON ({})",
                               cut == std::string::npos ? what : what.substr(cut + 2)),
                   "", "invalid_json");
  }
  if (!j.is_object()) {
    throw ApiError(400,
                   fmt::format("the request body must be a JSON object, got {}", type_phrase(j)));
  }
  return j;
}

CompletionRequest parse_completion_request(const ojson& body, const std::string& served_model) {
  check_model(body, served_model);
  CompletionRequest r;
  r.params = parse_params(body, "max_tokens");
  r.echo = bool_field(body, "echo", false);
  const ojson* prompt = field(body, "prompt");
  if (prompt == nullptr) bad("prompt", "'prompt' is required");
  const ojson* p = prompt;
  // A list holding one prompt is that prompt; several prompts per request are not served.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    p = &(*p)[0];
  }
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) bad("prompt", "'prompt' is empty");
    for (const ojson& id : *p) {
      if (!id.is_number_integer()) {
        bad("prompt",
            prompt->size() > 1 && (id.is_string() || id.is_array())
                ? "one prompt per request: 'prompt' must be a string or an array of token ids"
                : "'prompt' must be a string or an array of token ids");
      }
      if (id.is_number_unsigned() ? id.get<uint64_t>() > INT32_MAX
                                  : (id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)) {
        bad("prompt", fmt::format("token id {} is out of range", id.dump()));
      }
      r.prompt_ids.push_back(id.get<int32_t>());
    }
  } else {
    bad("prompt",
        fmt::format("'prompt' must be a string or an array of token ids, got {}", type_phrase(*p)));
  }
  return r;
}

ChatRequest parse_chat_request(const ojson& body, const std::string& served_model) {
  check_model(body, served_model);
  ChatRequest r;
  r.params = parse_params(body, "max_completion_tokens");
  const ojson* messages = field(body, "messages");
  if (messages == nullptr) bad("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) {
    bad("messages", "'messages' must be a non-empty array");
  }
  r.messages = ojson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const ojson& m = (*messages)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(param, fmt::format("'{}' must be an object", param));
    if (!m.contains("role") || !m["role"].is_string()) {
      bad(param + ".role", fmt::format("'{}.role' must be a string", param));
    }
    ojson copy = m;
    copy["content"] = flatten_content(m.contains("content") ? m["content"] : ojson(), i);
    r.messages.push_back(std::move(copy));
  }
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "'tools' must be an array");
    if (!tools->empty()) r.tools = *tools;
  }
  if (const ojson* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object())
      bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.template_kwargs = *kwargs;
  }
  r.add_generation_prompt = bool_field(body, "add_generation_prompt", true);
  return r;
}

void check_context(int64_t prompt_tokens, int64_t max_tokens, int64_t max_seq_len,
                   const char* what) {
  if (prompt_tokens + max_tokens > max_seq_len) {
    throw ApiError(
        400,
        fmt::format("This model's maximum context length is {} tokens. However, you "
                    "requested {} tokens ({} in the {}, {} in the completion). Please "
                    "reduce the length of the {} or completion.",
                    max_seq_len, prompt_tokens + max_tokens, prompt_tokens, what, max_tokens, what),
        what, "context_length_exceeded");
  }
}

ojson usage_json(const Usage& u) {
  return ojson{{"prompt_tokens", u.prompt_tokens},
               {"completion_tokens", u.completion_tokens},
               {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

namespace {
ojson finish_json(const std::string& finish_reason) {
  return finish_reason.empty() ? ojson() : ojson(finish_reason);
}
}  // namespace

ojson completion_body(const std::string& id, int64_t created, const std::string& model,
                      const std::string& text, const std::string& finish_reason,
                      const std::optional<Usage>& usage, bool chunk) {
  ojson choice{{"index", 0},
               {"text", text},
               {"logprobs", nullptr},
               {"finish_reason", finish_json(finish_reason)}};
  ojson out{{"id", id},
            {"object", "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", ojson::array({choice})}};
  if (usage) {
    out["usage"] = usage_json(*usage);
  } else if (chunk) {
    out["usage"] = nullptr;
  }
  return out;
}

ojson chat_body(const std::string& id, int64_t created, const std::string& model,
                const std::string& text, const std::string& finish_reason, const Usage& usage) {
  ojson message{{"role", "assistant"}, {"content", text}};
  ojson choice{{"index", 0},
               {"message", message},
               {"logprobs", nullptr},
               {"finish_reason", finish_json(finish_reason)}};
  return ojson{{"id", id},       {"object", "chat.completion"},       {"created", created},
               {"model", model}, {"choices", ojson::array({choice})}, {"usage", usage_json(usage)}};
}

ojson chat_chunk(const std::string& id, int64_t created, const std::string& model,
                 const ojson& delta, const std::string& finish_reason) {
  ojson choice{{"index", 0},
               {"delta", delta},
               {"logprobs", nullptr},
               {"finish_reason", finish_json(finish_reason)}};
  return ojson{{"id", id},
               {"object", "chat.completion.chunk"},
               {"created", created},
               {"model", model},
               {"choices", ojson::array({choice})}};
}

ojson usage_chunk(const std::string& id, int64_t created, const std::string& model,
                  const char* object, const Usage& usage) {
  return ojson{{"id", id},       {"object", object},          {"created", created},
               {"model", model}, {"choices", ojson::array()}, {"usage", usage_json(usage)}};
}

ojson models_body(const std::string& model, int64_t created, int64_t max_model_len) {
  ojson entry{{"id", model},
              {"object", "model"},
              {"created", created},
              {"owned_by", "moegraph"},
              {"max_model_len", max_model_len}};
  return ojson{{"object", "list"}, {"data", ojson::array({entry})}};
}

std::string new_request_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt =
      std::random_device{}() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmt::format("{}-{:016x}{:08x}", prefix, salt, counter.fetch_add(1) & 0xffffffffu);
}

}  // namespace mg::serve
