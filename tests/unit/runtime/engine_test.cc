// Batched generation: the paged CPU attention equals the reference for sequences scattered over
// blocks; a paged session's mixed batch (prefill chunks and decode rows of several sequences)
// gives each sequence's logits as a lone session does; the Engine's continuous batching gives
// every request the tokens Session::generate gives it alone (greedy and seeded sampling, stop
// ids, small pools, threads), and cancelling or finishing returns every slot and block.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "framework/compile/compiler.h"
#include "framework/runtime/engine.h"
#include "framework/runtime/kv_block_pool.h"
#include "framework/runtime/session.h"
#include "ops/nn/attention/attention.h"
#include "ops/nn/attention/attention_cpu.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

TEST(KvBlockPoolTest, TakesAndReturnsBlocks) {
  KvBlockPool pool(5, 4);
  EXPECT_EQ(pool.total(), 5);
  EXPECT_EQ(pool.free(), 5);
  std::vector<int32_t> a, b;
  pool.take(2, a);
  pool.take(3, b);
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1}));  // a lone sequence gets blocks in order
  EXPECT_EQ(pool.free(), 0);
  pool.release(a);
  EXPECT_EQ(pool.free(), 2);
  std::vector<int32_t> c;
  pool.take(2, c);
  std::sort(c.begin(), c.end());
  EXPECT_EQ(c, (std::vector<int32_t>{0, 1}));
}

// Two sequences whose positions live in shuffled blocks of a shared pool, queried in one call
// (rows of sequence 1, then of sequence 0): each row equals the reference over its own history.
TEST(PagedAttentionCpuTest, ScatteredBlocksEqualTheReference) {
  for (const bool window_and_sinks : {false, true}) {
    proto::AttentionParams params;
    params.set_num_heads(4);
    params.set_num_kv_heads(2);
    params.set_head_dim(8);
    if (window_and_sinks) params.set_sliding_window(5);
    const int64_t H = 4, KV = 2, D = 8, bs = 3, blocks = 12, max_blocks = 6;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const std::vector<int64_t> lengths = {10, 7};  // positions of sequence 0 and 1
    std::vector<int32_t> ids(blocks);
    for (int64_t i = 0; i < blocks; ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> tables(2 * max_blocks, -1);
    tables[0 * max_blocks + 0] = ids[0];
    tables[0 * max_blocks + 1] = ids[1];
    tables[0 * max_blocks + 2] = ids[2];
    tables[0 * max_blocks + 3] = ids[3];
    tables[1 * max_blocks + 0] = ids[4];
    tables[1 * max_blocks + 1] = ids[5];
    tables[1 * max_blocks + 2] = ids[6];
    std::vector<float> k_cache(blocks * bs * KV * D, 1e9f), v_cache(blocks * bs * KV * D, 1e9f);
    std::vector<std::vector<float>> k_seq(2), v_seq(2);
    KvBatch kv;
    kv.block_tables = tables.data();
    kv.max_blocks_per_seq = max_blocks;
    kv.block_size = bs;
    kv.num_blocks = blocks;
    for (int s = 0; s < 2; ++s) {
      for (int64_t j = 0; j < lengths[s]; ++j) {
        const int64_t row = kv_cache_row(&kv, s, j);
        for (int64_t i = 0; i < KV * D; ++i) {
          k_seq[s].push_back(u(rng));
          v_seq[s].push_back(u(rng));
          k_cache[row * KV * D + i] = k_seq[s].back();
          v_cache[row * KV * D + i] = v_seq[s].back();
        }
      }
    }
    // Rows: sequence 1 at positions 4, 5, 6 (a prefill chunk), then sequence 0 at 9 (decode).
    const std::vector<int32_t> row_slots = {1, 1, 1, 0};
    const std::vector<int32_t> positions = {4, 5, 6, 9};
    const int64_t tokens = 4;
    std::vector<float> q(tokens * H * D), sinks(H);
    for (float& x : q) x = u(rng);
    for (float& x : sinks) x = u(rng);
    kv.row_slots = row_slots.data();
    AttentionDims dims{
        H, KV, D, D, static_cast<float>(1.0 / std::sqrt(8.0)), params.sliding_window(), 0};
    const float* sink_ptr = window_and_sinks ? sinks.data() : nullptr;
    if (window_and_sinks) params.set_has_sinks(true);
    std::vector<float> out(tokens * H * D);
    attention_cpu(dims, q.data(), positions.data(), tokens, k_cache.data(), v_cache.data(),
                  sink_ptr, out.data(), nullptr, &kv);
    for (int64_t t = 0; t < tokens; ++t) {
      const int s = row_slots[t];
      std::vector<float> want(H * D);
      attention_reference(params, q.data() + t * H * D, positions.data() + t, 1, k_seq[s].data(),
                          v_seq[s].data(), lengths[s], sink_ptr, want.data());
      for (int64_t i = 0; i < H * D; ++i) {
        EXPECT_NEAR(out[t * H * D + i], want[i], 1e-5) << "row " << t << " element " << i;
      }
    }
  }
}

std::vector<int32_t> iota_positions(int64_t from, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(from + i);
  return p;
}

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    graph_ =
        testing::write_model(testing::temp_dir("engine_model"), testing::small_spec(GetParam()));
  }
  std::shared_ptr<const ExecutionPlan> plan(int64_t max_tokens) {
    CompileOptions c;
    c.max_tokens = max_tokens;
    return compile_graph_file(graph_, c);
  }
  // What a lone session generates for `prompt`.
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, const RequestOptions& r) {
    Session s(plan(64), SessionOptions{});
    GenerateOptions g;
    g.max_new_tokens = r.max_new_tokens;
    g.sampling = r.sampling;
    g.seed = r.seed;
    g.stop_at_eos = r.stop_at_eos;
    g.stop_token_ids = r.stop_token_ids;
    return s.generate(prompt, g).tokens;
  }

  std::filesystem::path graph_;
  const std::vector<std::vector<int32_t>> prompts_ = {
      {5, 17, 3, 90, 42, 8, 64, 1, 33, 2, 71},
      {7},
      {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30},
      {88, 4},
      {60, 61, 62, 63, 64, 65},
      {1, 2, 3, 4, 5, 6, 7, 8, 9},
  };
};

// Collects each request's events (thread-safe: the background-loop test delivers on its thread).
class Collector {
 public:
  std::function<void(const RequestEvent&)> callback() {
    return [this](const RequestEvent& e) {
      std::lock_guard lock(mutex_);
      if (e.token >= 0) tokens_[e.id].push_back(e.token);
      if (e.finish != FinishReason::kNone) {
        EXPECT_EQ(finish_.count(e.id), 0u) << "request " << e.id << " finished twice";
        finish_[e.id] = e.finish;
        errors_[e.id] = e.error;
        done_.notify_all();
      }
    };
  }
  void wait_for(size_t finished) {
    std::unique_lock lock(mutex_);
    ASSERT_TRUE(
        done_.wait_for(lock, std::chrono::seconds(60), [&] { return finish_.size() >= finished; }));
  }
  std::vector<int32_t> tokens(RequestId id) {
    std::lock_guard lock(mutex_);
    return tokens_[id];
  }
  FinishReason finish(RequestId id) {
    std::lock_guard lock(mutex_);
    return finish_.count(id) ? finish_[id] : FinishReason::kNone;
  }
  std::string error(RequestId id) {
    std::lock_guard lock(mutex_);
    return errors_[id];
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::map<RequestId, std::vector<int32_t>> tokens_;
  std::map<RequestId, FinishReason> finish_;
  std::map<RequestId, std::string> errors_;
};

void expect_nothing_leaked(const Engine& engine) {
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_free, s.kv_blocks_total);
  EXPECT_EQ(s.slots_free, s.slots_total);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
}

// Three sequences of one paged session in one forward: sequence 2's prompt chunk, sequence 0's
// decode row and sequence 1's whole prompt, in blocks interleaved by their growth. Every row's
// logits equal those of a lone contiguous session.
TEST_P(EngineTest, MixedBatchForwardEqualsEachSequenceAlone) {
  const auto p = plan(32);
  SessionOptions so;
  so.max_sequences = 3;
  so.kv_blocks = 40;
  so.kv_block_size = 4;
  Session batched(p, so);
  const int64_t vocab = p->values[p->logits].type.shape.back();
  const std::vector<int32_t>& a = prompts_[0];  // slot 0
  const std::vector<int32_t>& b = prompts_[4];  // slot 1
  const std::vector<int32_t>& c = prompts_[2];  // slot 2
  // Blocks handed out alternately, as sequences growing together would take them.
  batched.set_block_table(0, std::vector<int32_t>{0, 3, 6, 9});
  batched.set_block_table(1, std::vector<int32_t>{1, 4});
  batched.set_block_table(2, std::vector<int32_t>{2, 5, 7, 8, 10});
  // Step 1: a's prompt but its last token, c's first 6 prompt tokens.
  {
    std::vector<int32_t> ids(a.begin(), a.end() - 1), pos = iota_positions(0, a.size() - 1),
                                                      slots(a.size() - 1, 0);
    ids.insert(ids.end(), c.begin(), c.begin() + 6);
    const auto cp = iota_positions(0, 6);
    pos.insert(pos.end(), cp.begin(), cp.end());
    slots.insert(slots.end(), 6, 2);
    batched.forward_batch(ids, pos, slots, std::vector<int64_t>{});
  }
  // Step 2: a's last prompt token (decode-like), b's whole prompt, c's next 7 tokens.
  std::vector<int32_t> ids = {a.back()};
  std::vector<int32_t> pos = {static_cast<int32_t>(a.size() - 1)};
  std::vector<int32_t> slots = {0};
  ids.insert(ids.end(), b.begin(), b.end());
  const auto bp = iota_positions(0, b.size());
  pos.insert(pos.end(), bp.begin(), bp.end());
  slots.insert(slots.end(), b.size(), 1);
  ids.insert(ids.end(), c.begin() + 6, c.begin() + 13);
  const auto cp = iota_positions(6, 7);
  pos.insert(pos.end(), cp.begin(), cp.end());
  slots.insert(slots.end(), 7, 2);
  std::vector<int64_t> rows(ids.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  const Tensor& got = batched.forward_batch(ids, pos, slots, rows);
  ASSERT_EQ(got.dim(0), static_cast<int64_t>(ids.size()));
  // The kernels were told the batch's make-up: its rows are one 64-row tile of three sequences.
  ASSERT_LE(ids.size(), size_t{64});
  EXPECT_EQ(batched.kv_batch().flash_passes, 3);
  std::vector<float> got_rows(got.data<float>(), got.data<float>() + got.numel());

  // Lone sessions, full prompts: rows of interest are a's last, b's all, c's 6..12.
  auto lone = [&](const std::vector<int32_t>& prompt, int64_t n) {
    Session s(p, SessionOptions{});
    const Tensor& t = s.forward(std::span(prompt.data(), n), iota_positions(0, n));
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  const std::vector<float> la = lone(a, a.size());
  const std::vector<float> lb = lone(b, b.size());
  const std::vector<float> lc = lone(c, 13);
  std::vector<float> want(la.end() - vocab, la.end());
  want.insert(want.end(), lb.begin(), lb.end());
  want.insert(want.end(), lc.begin() + 6 * vocab, lc.end());
  ASSERT_EQ(want.size(), got_rows.size());
  EXPECT_LT(testing::normalized_error(got_rows, want), 1e-5);

  // A decode step of c alone, and of c and b with only some rows asked: the same values.
  const Tensor& next =
      batched.forward_batch(std::vector<int32_t>{c[13], c[14]}, std::vector<int32_t>{13, 14},
                            std::vector<int32_t>{2, 2}, std::vector<int64_t>{1});
  ASSERT_EQ(next.dim(0), 1);
  const std::vector<float> lc15 = lone(c, 15);
  EXPECT_LT(testing::normalized_error(std::span<const float>(next.data<float>(), vocab),
                                      std::span<const float>(lc15.end() - vocab, lc15.end())),
            1e-5);
}

// Six requests, three slots, max_tokens 8: prompts are prefilled in chunks beside other
// sequences' decode rows, sequences join as others leave, and every one gets its lone tokens.
TEST_P(EngineTest, ContinuousBatchingEqualsEachSequenceAlone) {
  for (const bool sampled : {false, true}) {
    EngineOptions eo;
    eo.max_sequences = 3;
    eo.kv_block_size = 4;
    Engine engine(plan(8), eo);
    Collector events;
    std::vector<RequestId> ids;
    std::vector<RequestOptions> options;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      RequestOptions r;
      r.max_new_tokens = 3 + static_cast<int>(i * 5 % 11);
      if (sampled) {
        r.sampling.temperature = 0.8f;
        r.sampling.top_k = 20;
        r.seed = 100 + i;
      }
      r.on_event = events.callback();
      options.push_back(r);
      ids.push_back(engine.add_request(prompts_[i], r));
    }
    engine.run_until_idle();
    for (size_t i = 0; i < prompts_.size(); ++i) {
      EXPECT_EQ(events.tokens(ids[i]), alone(prompts_[i], options[i]))
          << (sampled ? "sampled" : "greedy") << " request " << i;
      EXPECT_EQ(events.finish(ids[i]), FinishReason::kLength);
    }
    const EngineStats s = engine.stats();
    // Batched: fewer steps than the longest request alone takes plus the others' tokens.
    EXPECT_LT(s.steps, s.generated_tokens / 2);
    EXPECT_EQ(s.generated_tokens,
              static_cast<uint64_t>(std::accumulate(
                  options.begin(), options.end(), 0,
                  [](int n, const RequestOptions& r) { return n + r.max_new_tokens; })));
    expect_nothing_leaked(engine);
  }
}

// A pool that holds one sequence at a time: requests wait for blocks, results do not change.
TEST_P(EngineTest, SmallPoolRunsOneAtATime) {
  EngineOptions eo;
  eo.max_sequences = 4;
  eo.kv_block_size = 8;
  eo.kv_blocks = 4;  // 32 positions: prompt 19 + 10 new fits once, never twice
  Engine engine(plan(16), eo);
  Collector events;
  RequestOptions r;
  r.max_new_tokens = 10;
  r.on_event = events.callback();
  const RequestId a = engine.add_request(prompts_[2], r);
  const RequestId b = engine.add_request(prompts_[0], r);
  engine.step();
  EXPECT_EQ(engine.stats().running, 1);
  EXPECT_EQ(engine.stats().waiting, 1);
  engine.run_until_idle();
  EXPECT_EQ(events.tokens(a), alone(prompts_[2], r));
  EXPECT_EQ(events.tokens(b), alone(prompts_[0], r));
  expect_nothing_leaked(engine);
}

TEST_P(EngineTest, StopIdsEndASequenceWithTheirToken) {
  RequestOptions r;
  r.max_new_tokens = 12;
  const std::vector<int32_t> lone = alone(prompts_[0], r);
  ASSERT_GE(lone.size(), 4u);
  EngineOptions eo;
  Engine engine(plan(16), eo);
  Collector events;
  r.stop_token_ids = {lone[3]};
  r.on_event = events.callback();
  const RequestId id = engine.add_request(prompts_[0], r);
  engine.run_until_idle();
  const std::vector<int32_t> got = events.tokens(id);
  const size_t first = std::find(lone.begin(), lone.end(), lone[3]) - lone.begin();
  EXPECT_EQ(got, std::vector<int32_t>(lone.begin(), lone.begin() + first + 1));
  EXPECT_EQ(events.finish(id), FinishReason::kStop);
  expect_nothing_leaked(engine);
}

TEST_P(EngineTest, CancelFreesSlotsAndBlocks) {
  EngineOptions eo;
  eo.max_sequences = 2;
  eo.kv_block_size = 4;
  Engine engine(plan(16), eo);
  Collector events;
  RequestOptions r;
  r.max_new_tokens = 20;
  r.on_event = events.callback();
  const RequestId a = engine.add_request(prompts_[0], r);
  const RequestId b = engine.add_request(prompts_[1], r);
  const RequestId c = engine.add_request(prompts_[3], r);  // waits for a slot
  engine.step();
  engine.step();
  EXPECT_EQ(engine.stats().running, 2);
  EXPECT_LT(engine.stats().kv_blocks_free, engine.stats().kv_blocks_total);
  EXPECT_TRUE(engine.cancel(a));
  EXPECT_FALSE(engine.cancel(a));  // already cancelled
  EXPECT_TRUE(engine.cancel(c));   // still waiting
  EXPECT_FALSE(engine.cancel(12345));
  engine.step();
  EXPECT_EQ(events.finish(a), FinishReason::kCancelled);
  EXPECT_EQ(events.finish(c), FinishReason::kCancelled);
  EXPECT_TRUE(events.tokens(c).empty());
  EXPECT_EQ(engine.stats().running, 1);
  engine.run_until_idle();
  EXPECT_EQ(events.finish(b), FinishReason::kLength);
  EXPECT_EQ(events.tokens(b), alone(prompts_[1], r));
  EXPECT_FALSE(engine.cancel(b));  // finished
  expect_nothing_leaked(engine);
}

// The background loop, fed from four threads at once; one client cancels from its callback.
TEST_P(EngineTest, BackgroundLoopServesConcurrentClients) {
  EngineOptions eo;
  eo.max_sequences = 4;
  eo.kv_block_size = 4;
  eo.session.threads = 2;
  Engine engine(plan(16), eo);
  engine.start();
  Collector events;
  std::mutex ids_mutex;
  std::vector<std::pair<RequestId, size_t>> ids;
  std::atomic<RequestId> cancel_me{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (size_t i = c; i < prompts_.size() * 2; i += 4) {
        RequestOptions r;
        r.max_new_tokens = 6;
        r.on_event = events.callback();
        const RequestId id = engine.add_request(prompts_[i % prompts_.size()], r);
        std::lock_guard lock(ids_mutex);
        ids.emplace_back(id, i % prompts_.size());
      }
    });
  }
  for (std::thread& t : clients) t.join();
  events.wait_for(ids.size());
  RequestOptions r;
  r.max_new_tokens = 6;
  for (const auto& [id, prompt] : ids) {
    EXPECT_EQ(events.tokens(id), alone(prompts_[prompt], r)) << "request " << id;
  }
  // A request cancelled by its own callback after its first token.
  Collector more;
  r.max_new_tokens = 30;
  auto inner = more.callback();
  r.on_event = [&](const RequestEvent& e) {
    inner(e);
    if (e.token >= 0 && e.finish == FinishReason::kNone) engine.cancel(e.id);
  };
  const RequestId id = engine.add_request(prompts_[0], r);
  more.wait_for(1);
  EXPECT_EQ(more.finish(id), FinishReason::kCancelled);
  EXPECT_LT(more.tokens(id).size(), 30u);
  engine.stop();
  expect_nothing_leaked(engine);
}

TEST_P(EngineTest, BadRequestsAndOptionsAreErrors) {
  const auto p = plan(8);
  EngineOptions eo;
  eo.max_sequences = 9;
  EXPECT_THAT([&] { Engine e(p, eo); }, ::testing::ThrowsMessage<Error>(HasSubstr("max_tokens 8")));
  eo.max_sequences = 0;
  EXPECT_THAT([&] { Engine e(p, eo); },
              ::testing::ThrowsMessage<Error>(HasSubstr("max_sequences")));
  eo.max_sequences = 2;
  eo.kv_block_size = 0;
  EXPECT_THAT([&] { Engine e(p, eo); },
              ::testing::ThrowsMessage<Error>(HasSubstr("kv_block_size")));
  eo.kv_block_size = 4;
  eo.kv_blocks = 3;
  Engine engine(p, eo);
  RequestOptions r;
  EXPECT_THAT([&] { engine.add_request({}, r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("empty")));
  EXPECT_THAT(
      [&] {
        engine.add_request({1, 96}, r);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("vocabulary of 96")));
  r.max_new_tokens = 0;
  EXPECT_THAT([&] { engine.add_request({1}, r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("max_new_tokens must be >= 1")));
  r.max_new_tokens = 64;
  EXPECT_THAT([&] { engine.add_request({1}, r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("maximum sequence length 64")));
  r.max_new_tokens = 12;  // 13 positions: 4 blocks of 4, the pool has 3
  EXPECT_THAT([&] { engine.add_request({1}, r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("the pool has 3")));
  r.max_new_tokens = 2;
  r.sampling.top_p = 0.0f;
  EXPECT_THAT([&] { engine.add_request({1}, r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("top-p")));
  expect_nothing_leaked(engine);
}

INSTANTIATE_TEST_SUITE_P(Families, EngineTest,
                         ::testing::Values("llama", "gpt_oss", "qwen3_moe", "deepseek_v3"),
                         [](const auto& info) { return info.param; });

TEST(PagedSessionTest, ForwardBatchChecksItsRows) {
  const auto graph = testing::write_model(testing::temp_dir("paged"), testing::small_spec());
  CompileOptions c;
  c.max_tokens = 8;
  const std::shared_ptr<const ExecutionPlan> p = compile_graph_file(graph, c);
  SessionOptions so;
  so.max_sequences = 2;
  so.kv_blocks = 4;
  so.kv_block_size = 4;
  Session s(p, so);
  EXPECT_THAT([&] { s.forward(std::vector<int32_t>{1}, std::vector<int32_t>{0}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("use forward_batch")));
  EXPECT_THAT(
      [&] {
        s.forward_batch(std::vector<int32_t>{1}, std::vector<int32_t>{0}, std::vector<int32_t>{0},
                        std::vector<int64_t>{0});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("no KV-cache block")));
  EXPECT_THAT([&] { s.set_block_table(0, std::vector<int32_t>{4}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("outside the pool [0, 4)")));
  EXPECT_THAT([&] { s.set_block_table(2, std::vector<int32_t>{0}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("slot 2")));
  s.set_block_table(0, std::vector<int32_t>{1});
  EXPECT_THAT(
      [&] {
        s.forward_batch(std::vector<int32_t>{1}, std::vector<int32_t>{0}, std::vector<int32_t>{3},
                        std::vector<int64_t>{0});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("slot 3")));
  EXPECT_THAT(
      [&] {
        s.forward_batch(std::vector<int32_t>{1, 2}, std::vector<int32_t>{0, 1},
                        std::vector<int32_t>{0, 0}, std::vector<int64_t>{1, 0});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("ascend")));
  EXPECT_THAT(
      [&] {
        s.forward_batch(std::vector<int32_t>{1}, std::vector<int32_t>{0}, std::vector<int32_t>{0},
                        std::vector<int64_t>{0}, std::vector<uint8_t>{1, 0});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("2 greedy flags for 1 logit rows")));
  SessionOptions bad;
  bad.max_sequences = 2;
  EXPECT_THAT([&] { Session x(p, bad); },
              ::testing::ThrowsMessage<Error>(HasSubstr("paged KV cache")));
}

// forward_batch's greedy picks (what the Engine takes greedy tokens from; on a GPU they are made
// on the device, argmax_cuda_test) are the argmax of each flagged row, with every row's logits
// still returned on the CPU.
TEST(PagedSessionTest, GreedyPicksAreTheArgmaxOfTheirRows) {
  const auto graph = testing::write_model(testing::temp_dir("paged_greedy"), testing::small_spec());
  CompileOptions c;
  c.max_tokens = 8;
  const std::shared_ptr<const ExecutionPlan> p = compile_graph_file(graph, c);
  SessionOptions so;
  so.max_sequences = 2;
  so.kv_blocks = 4;
  so.kv_block_size = 4;
  Session s(p, so);
  s.set_block_table(0, std::vector<int32_t>{0});
  s.set_block_table(1, std::vector<int32_t>{2});
  const std::vector<uint8_t> greedy = {1, 0, 1};
  const Tensor& logits =
      s.forward_batch(std::vector<int32_t>{5, 9, 3, 11}, std::vector<int32_t>{0, 1, 0, 1},
                      std::vector<int32_t>{0, 0, 1, 1}, std::vector<int64_t>{0, 1, 3}, greedy);
  const int64_t vocab = logits.shape().back();
  ASSERT_EQ(s.greedy_picks().size(), 3u);
  for (size_t i = 0; i < greedy.size(); ++i) {
    if (!greedy[i]) continue;
    const std::span<const float> row(logits.data<float>() + static_cast<int64_t>(i) * vocab,
                                     static_cast<size_t>(vocab));
    EXPECT_EQ(s.greedy_picks()[i].first_non_finite, -1) << i;
    EXPECT_EQ(s.greedy_picks()[i].token, argmax(row)) << i;
  }
}

}  // namespace
}  // namespace mg
