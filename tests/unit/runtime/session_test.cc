// Session: chunked prefill, KV-cached decode and threading all give the same logits as one
// full forward; generate() is the argmax loop it claims to be.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/compile/compiler.h"
#include "framework/runtime/session.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    graph_ = testing::write_model(testing::temp_dir("model"), testing::small_spec());
  }
  std::unique_ptr<Session> open(int64_t max_tokens = 64, int threads = 1, bool profile = false) {
    CompileOptions c;
    c.max_tokens = max_tokens;
    SessionOptions s;
    s.threads = threads;
    s.profile = profile;
    return Session::open(graph_, c, s);
  }
  std::vector<float> logits(Session& s, const std::vector<int32_t>& ids) {
    std::vector<int32_t> pos(ids.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    const Tensor& t = s.forward(ids, pos);
    return {t.data<float>(), t.data<float>() + t.numel()};
  }
  std::filesystem::path graph_;
  const std::vector<int32_t> prompt_ = {5, 17, 3, 90, 42, 8, 64, 1, 33, 2, 71};
};

TEST_F(SessionTest, LogitsAreFiniteAndNotConstant) {
  auto s = open();
  const std::vector<float> l = logits(*s, prompt_);
  ASSERT_EQ(l.size(), prompt_.size() * 96);
  float lo = l[0], hi = l[0];
  for (float v : l) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 0.1f);
}

TEST_F(SessionTest, ChunkedPrefillEqualsFullForward) {
  auto full = open(64);
  auto chunked = open(3);
  EXPECT_LT(testing::normalized_error(logits(*chunked, prompt_), logits(*full, prompt_)), 1e-6);
}

TEST_F(SessionTest, DecodeStepByStepEqualsFullForward) {
  auto full = open();
  const std::vector<float> ref = logits(*full, prompt_);
  auto s = open();
  for (size_t t = 0; t < prompt_.size(); ++t) {
    const int32_t id = prompt_[t];
    const int32_t pos = static_cast<int32_t>(t);
    const Tensor& step = s->forward(std::span(&id, 1), std::span(&pos, 1));
    std::span<const float> want(ref.data() + t * 96, 96);
    EXPECT_LT(testing::normalized_error(testing::span_of(step), want), 1e-5) << "position " << t;
  }
}

TEST_F(SessionTest, ThreadCountDoesNotChangeResults) {
  auto one = open(64, 1);
  auto four = open(64, 4);
  EXPECT_LT(testing::normalized_error(logits(*four, prompt_), logits(*one, prompt_)), 1e-6);
}

TEST_F(SessionTest, GreedyGenerateIsTheArgmaxLoop) {
  auto s = open();
  GenerateOptions g;
  g.max_new_tokens = 6;
  const GenerateResult r = s->generate(prompt_, g);
  ASSERT_EQ(r.tokens.size(), 6u);
  // Recompute by running the whole sequence each time from scratch.
  std::vector<int32_t> seq = prompt_;
  auto check = open();
  for (int32_t tok : r.tokens) {
    const std::vector<float> l = logits(*check, seq);
    const int32_t expected = argmax(std::span(l.data() + (seq.size() - 1) * 96, 96));
    EXPECT_EQ(tok, expected);
    seq.push_back(expected);
  }
}

TEST_F(SessionTest, SampledGenerateIsReproducibleBySeed) {
  auto s = open();
  GenerateOptions g;
  g.max_new_tokens = 8;
  g.sampling = {1.0f, 0, 1.0f};
  g.seed = 1234;
  const auto a = s->generate(prompt_, g).tokens;
  const auto b = s->generate(prompt_, g).tokens;
  EXPECT_EQ(a, b);
  g.seed = 99;
  // A different seed gives a different stream (8 tokens of 96 colliding is vanishingly rare).
  EXPECT_NE(s->generate(prompt_, g).tokens, a);
}

TEST_F(SessionTest, PositionBeyondTheCacheIsAnError) {
  auto s = open();
  const int32_t id = 1, pos = 64;
  try {
    s->forward(std::span(&id, 1), std::span(&pos, 1));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("position 64 is outside the KV cache of 64 positions"));
  }
  GenerateOptions g;
  g.max_new_tokens = 60;
  EXPECT_THROW(s->generate(prompt_, g), Error);
}

TEST_F(SessionTest, TokenIdOutsideVocabularyIsAnError) {
  auto s = open();
  EXPECT_THROW(logits(*s, {1, 2, 96}), Error);
}

TEST_F(SessionTest, LastRowLogitsAreTheLastRowOfAllOfThem) {
  const int64_t vocab = 96;
  for (int64_t max_tokens : {64, 3, 1}) {  // one chunk; chunks ending short; one row per chunk
    SCOPED_TRACE(max_tokens);
    auto s = open(max_tokens);
    const std::vector<float> all = logits(*s, prompt_);
    std::vector<int32_t> pos(prompt_.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    const Tensor& last = s->forward(prompt_, pos, Session::Logits::kLastRow);
    ASSERT_EQ(last.shape(), (Shape{1, vocab}));
    const std::vector<float> want(all.end() - vocab, all.end());
    EXPECT_EQ(std::vector<float>(last.data<float>(), last.data<float>() + vocab), want);
  }
}

TEST_F(SessionTest, ProfilerSplitsPrefillAndDecode) {
  auto s = open(64, 1, true);
  GenerateOptions g;
  g.max_new_tokens = 4;
  s->generate(prompt_, g);
  const std::string summary = s->profiler().summary();
  EXPECT_THAT(summary, HasSubstr("prefill: 1 forwards, 11 tokens"));
  EXPECT_THAT(summary, HasSubstr("decode: 3 one-token forwards"));
  EXPECT_THAT(summary, HasSubstr("forward wall"));
  for (const Profiler::Event& e : s->profiler().events()) {
    EXPECT_TRUE(e.tokens == 11 || e.tokens == 1) << e.name << " " << e.tokens;
    EXPECT_GE(e.duration_us, 0.0) << e.name;
  }
}

TEST_F(SessionTest, ProfilerRecordsEveryNodeAndWritesATrace) {
  auto s = open(64, 1, true);
  logits(*s, prompt_);
  const size_t nodes = s->plan().nodes.size();
  EXPECT_EQ(s->profiler().events().size(), nodes + 1);  // + the forward itself
  EXPECT_THAT(s->profiler().summary(), HasSubstr("attention"));
  const auto file = testing::temp_dir("trace") / "trace.json";
  s->profiler().write_trace(file);
  std::ifstream in(file);
  const nlohmann::json trace = nlohmann::json::parse(in);
  ASSERT_EQ(trace["traceEvents"].size(), nodes + 1);
  EXPECT_EQ(trace["traceEvents"][0]["ph"], "X");
}

// Issue 18: NaN compares false with everything, so argmax over all-NaN logits used to "choose"
// token 0 and generation went on, exit 0. Greedy or sampled, a non-finite row is an error that
// names the step and position.
TEST_F(SessionTest, NonFiniteLogitsAreNeverSampled) {
  const auto weights = graph_.parent_path() / "model.safetensors";
  testing::edit_weights(weights, [](const std::string& name, Tensor& t) {
    if (name == "lm_head.weight") std::memset(t.raw(), 0xff, t.nbytes());  // NaN
  });
  auto s = open();
  for (float temperature : {0.0f, 0.8f}) {
    GenerateOptions gen;
    gen.max_new_tokens = 3;
    gen.sampling.temperature = temperature;
    try {
      s->generate(prompt_, gen);
      ADD_FAILURE() << "generate sampled from NaN logits (temperature " << temperature << ")";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("step 0 produced non-finite logits (position 10, token 0: "
                                      "NaN)"));
      EXPECT_THAT(e.what(), HasSubstr("--check-weights"));
    }
  }
}

}  // namespace
}  // namespace mg
