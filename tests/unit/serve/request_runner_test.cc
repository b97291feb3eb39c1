// The server's pieces without HTTP: run_request over a scripted backend (stop strings across
// token boundaries, held-back text, a client that goes away must cancel and wait for the
// backend's last event), and the OpenAI request validation with its statuses and params.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "framework/text/tokenizer.h"
#include "serve/openai_protocol.h"
#include "serve/request_runner.h"

namespace mg::serve {
namespace {

// The bundled model's byte-level tokenizer: id = byte value.
const text::Tokenizer& bytes_tokenizer() {
  static const auto t = text::Tokenizer::load(std::filesystem::path(MG_SOURCE_DIR) / "models" /
                                              "tiny-moe" / "tokenizer.json");
  return *t;
}

// Emits the bytes of `script` as tokens on its own thread, one per `delay`, then kLength; a
// cancel() ends it with kCancelled at the next token.
class ScriptedBackend : public GenerationBackend {
 public:
  explicit ScriptedBackend(std::string script, std::chrono::milliseconds delay = {})
      : script_(std::move(script)), delay_(delay) {}
  ~ScriptedBackend() override {
    if (thread_.joinable()) thread_.join();
  }
  RequestId add_request(std::vector<int32_t>, RequestOptions options) override {
    thread_ = std::thread([this, options] {
      running_ = true;
      for (unsigned char c : script_) {
        std::this_thread::sleep_for(delay_);
        if (cancelled_) break;
        options.on_event({1, c, FinishReason::kNone, {}});
        ++emitted_;
      }
      running_ = false;  // the slot is free before the last event, as Engine does it
      options.on_event({1, -1, cancelled_ ? FinishReason::kCancelled : FinishReason::kLength, {}});
    });
    return 1;
  }
  bool cancel(RequestId) override {
    cancelled_ = true;
    return true;
  }
  EngineStats stats() const override {
    EngineStats s;
    s.running = running_ ? 1 : 0;
    return s;
  }
  const ExecutionPlan& plan() const override { return plan_; }
  std::string describe() const override { return "scripted"; }

  bool cancelled() const { return cancelled_; }
  bool running() const { return running_; }
  int emitted() const { return emitted_; }

 private:
  std::string script_;
  std::chrono::milliseconds delay_;
  std::thread thread_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> running_{false};
  std::atomic<int> emitted_{0};
  ExecutionPlan plan_;
};

RunRequest request(std::vector<std::string> stop = {}) {
  RunRequest r;
  r.prompt = {1};
  r.stop = std::move(stop);
  return r;
}

TEST(RequestRunner, TextComesWholeAndEndsWithTheFinishReason) {
  ScriptedBackend backend("Hello, world");
  std::string streamed;
  const RunResult r = run_request(
      backend, bytes_tokenizer(), request(),
      [&](std::string_view t) {
        streamed += t;
        return true;
      },
      [] { return true; });
  EXPECT_EQ(r.text, "Hello, world");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.completion_tokens, 12);
  EXPECT_EQ(r.finish_reason, "length");
}

TEST(RequestRunner, StopStringCutsTheTextAndCancels) {
  // "wor" arrives one byte at a time: "w" and "wo" are held back (they may start the stop
  // string), never streamed, and the text ends before it.
  ScriptedBackend backend("Hello, world and more", std::chrono::milliseconds(1));
  std::string streamed;
  const RunResult r = run_request(
      backend, bytes_tokenizer(), request({"xyz", "wor"}),
      [&](std::string_view t) {
        streamed += t;
        return true;
      },
      [] { return true; });
  EXPECT_EQ(r.text, "Hello, ");
  EXPECT_EQ(streamed, "Hello, ");
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_TRUE(backend.cancelled());
  EXPECT_LT(backend.emitted(), 21);
}

TEST(RequestRunner, HeldBackTailIsReturnedAtTheEnd) {
  // The text ends with "ab", a prefix of the stop string "abc": held back while streaming, then
  // returned when generation ends without it.
  ScriptedBackend backend("xxab");
  std::string streamed;
  const RunResult r = run_request(
      backend, bytes_tokenizer(), request({"abc"}),
      [&](std::string_view t) {
        streamed += t;
        return true;
      },
      [] { return true; });
  EXPECT_EQ(r.text, "xxab");
  EXPECT_EQ(streamed, "xxab");
  EXPECT_EQ(r.finish_reason, "length");
}

TEST(RequestRunner, ClientGoneCancelsAndWaitsForTheBackend) {
  ScriptedBackend backend(std::string(10000, 'a'), std::chrono::milliseconds(1));
  int pieces = 0;
  const RunResult r = run_request(
      backend, bytes_tokenizer(), request(), [&](std::string_view) { return ++pieces < 3; },
      [] { return true; });
  EXPECT_TRUE(backend.cancelled());
  // run_request returned only after the backend's last event: nothing of it runs any more.
  EXPECT_FALSE(backend.running());
  EXPECT_EQ(r.finish_reason, "");
  EXPECT_LT(backend.emitted(), 10000);
}

TEST(RequestRunner, ClientGoneWhileWaitingIsSeenByPolling) {
  // No token for a long time (a request waiting for a slot): the liveness poll notices.
  ScriptedBackend backend("abc", std::chrono::milliseconds(500));
  const RunResult r = run_request(
      backend, bytes_tokenizer(), request(), [](std::string_view) { return true; },
      [] { return false; });
  EXPECT_TRUE(backend.cancelled());
  EXPECT_EQ(r.finish_reason, "");
  EXPECT_EQ(backend.emitted(), 0);  // cancelled before the first token came
}

// ---- request validation ------------------------------------------------------------------------

ApiError error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError";
  return ApiError(0, "");
}

TEST(OpenAiProtocol, BodiesNestedTooDeepOrWithHugeObjectsAreRefusedBeforeParsing) {
  // 10^6 nested arrays: converting and copying the parsed JSON recursed once per level and
  // overflowed the request thread's stack.
  const std::string deep =
      "{\"tools\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  const ApiError nested = error_of([&] { parse_body(deep); });
  EXPECT_EQ(nested.status, 400);
  EXPECT_EQ(nested.code, "invalid_json");
  EXPECT_NE(std::string(nested.what()).find("nests more than 64 arrays or objects (byte 73)"),
            std::string::npos)
      << nested.what();
  // An ordered_json object finds each new key by a linear scan: millions of members took hours.
  const auto object_of = [](int members) {
    std::string body = "{\"chat_template_kwargs\": {";
    for (int i = 0; i < members; ++i) body += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": 0";
    return body + "}}";
  };
  const ApiError wide = error_of([&] { parse_body(object_of(257)); });
  EXPECT_EQ(wide.status, 400);
  EXPECT_NE(std::string(wide.what()).find("an object in the request body has more than 256"),
            std::string::npos)
      << wide.what();
  EXPECT_EQ(parse_body(object_of(256))["chat_template_kwargs"].size(), 256u);
  // 64 levels pass; brackets, braces and commas inside strings (escaped quotes too) count for
  // nothing; arrays may be as long as the body allows.
  const std::string levels = std::string(63, '[') + std::string(63, ']');
  EXPECT_EQ(parse_body("{\"a\": " + levels + "}")["a"].size(), 1u);
  EXPECT_EQ(parse_body(R"({"s": "[[[{{{,,,\"]]]"})")["s"], "[[[{{{,,,\"]]]");
  std::string long_array = "{\"prompt\": [";
  for (int i = 0; i < 5000; ++i) long_array += (i ? ", " : "") + std::to_string(i);
  EXPECT_EQ(parse_body(long_array + "]}")["prompt"].size(), 5000u);
}

TEST(OpenAiProtocol, ValidatesEveryFieldWithStatusAndParam) {
  const auto completion = [](const char* body) {
    return [body] { parse_completion_request(parse_body(body), "m"); };
  };
  EXPECT_EQ(error_of([] { parse_body("{bad"); }).status, 400);
  EXPECT_EQ(error_of([] { parse_body("[1]"); }).status, 400);
  // A number past a double's range is nlohmann's out_of_range, not a parse error (fuzz_chat_request
  // found it: the server answered 500).
  const ApiError huge = error_of([] { parse_body(R"({"messages": [1e400]})"); });
  EXPECT_EQ(huge.status, 400);
  EXPECT_EQ(huge.code, "invalid_json");
  EXPECT_STREQ(huge.what(), "the request body is not valid JSON (number overflow parsing '1e400')");
  const ApiError model = error_of(completion(R"({"model": "other", "prompt": "x"})"));
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.code, "model_not_found");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "temperature": -1})")).param, "temperature");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "top_p": 0})")).param, "top_p");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "max_tokens": 0})")).param, "max_tokens");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "max_tokens": "5"})")).param, "max_tokens");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "n": 3})")).param, "n");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "logprobs": 2})")).param, "logprobs");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "presence_penalty": 1})")).param,
            "presence_penalty");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "stop": [1]})")).param, "stop");
  EXPECT_EQ(error_of(completion(R"({"prompt": ["a", "b"]})")).param, "prompt");
  EXPECT_EQ(error_of(completion(R"({"prompt": [1, -2]})")).param, "prompt");
  EXPECT_EQ(error_of(completion(R"({"prompt": "x", "stream_options": {}})")).param,
            "stream_options");
  EXPECT_EQ(error_of(completion(R"({})")).param, "prompt");
  const ApiError context = error_of([] { check_context(100, 200, 256, "prompt"); });
  EXPECT_EQ(context.code, "context_length_exceeded");
  EXPECT_NE(std::string(context.what()).find("maximum context length is 256"), std::string::npos);

  const auto chat = [](const char* body) {
    return [body] { parse_chat_request(parse_body(body), "m"); };
  };
  EXPECT_EQ(error_of(chat(R"({"messages": []})")).param, "messages");
  EXPECT_EQ(error_of(chat(R"({"messages": [{"content": "x"}]})")).param, "messages[0].role");
  EXPECT_EQ(
      error_of(chat(R"({"messages": [{"role": "user", "content": [{"type": "image"}]}]})")).param,
      "messages[0].content");
}

TEST(OpenAiProtocol, AcceptsWhatClientsSend) {
  const CompletionRequest ids = parse_completion_request(
      parse_body(R"({"model": "m", "prompt": [[5, 6]], "max_tokens": 3, "top_k": -1,
                     "stop": "END", "stream": true, "stream_options": {"include_usage": true},
                     "logprobs": null, "n": 1, "user": "u"})"),
      "m");
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(ids.params.max_tokens, 3);
  EXPECT_EQ(ids.params.sampling.top_k, 0);
  EXPECT_EQ(ids.params.stop, (std::vector<std::string>{"END"}));
  EXPECT_TRUE(ids.params.stream && ids.params.include_usage);
  const ChatRequest chat = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                     {"type": "text", "text": "b"}]}], "max_completion_tokens": 4,
                     "chat_template_kwargs": {"enable_thinking": false}})"),
      "m");
  EXPECT_EQ(chat.messages[0]["content"], "a\nb");
  EXPECT_EQ(chat.params.max_tokens, 4);
  EXPECT_EQ(chat.template_kwargs["enable_thinking"], false);
  const ojson err = error_body(ApiError(400, "bad", "temperature"));
  EXPECT_EQ(
      err.dump(),
      R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})");
}

}  // namespace
}  // namespace mg::serve
