// Batched generation on the GPU: a paged session's mixed batch (prefill chunks and decode rows of
// several sequences in shuffled blocks) gives each sequence's logits as a lone session on the
// device does (within the activation dtype's tolerance), and the Engine, with and without CUDA
// graphs per row count, gives every request the tokens of a lone F32 session on the GPU (greedy
// ones picked on the device, seeded sampled ones from the rows copied back, in the same steps),
// leaving no block or slot behind. With a head size the flash prefill kernel takes (64, BF16) and
// prompts of 90 to 200 tokens, the Engine's paged prompt batches take the flash kernel (the
// Session describes each batch: KvBatch::flash_passes) and every request's greedy tokens equal a
// lone session's, with and without CUDA graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <random>

#include "framework/compile/compiler.h"
#include "framework/runtime/engine.h"
#include "framework/runtime/session.h"
#include "ops/nn/attention/attention_flash_rule.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

std::vector<int32_t> positions_from(int64_t from, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(from + i);
  return p;
}

const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 17, 3, 90, 42, 8, 64, 1, 33, 2, 71},
    {7},
    {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30},
    {88, 4},
    {60, 61, 62, 63, 64, 65},
};

class EngineCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    graph_ =
        testing::write_model(testing::temp_dir("engine_cuda"), testing::small_spec(GetParam()));
  }
  std::shared_ptr<const ExecutionPlan> plan(DType dtype, int64_t max_tokens) {
    CompileOptions c;
    c.device = Device::cuda(0);
    c.activation_dtype = dtype;
    c.max_tokens = max_tokens;
    return compile_graph_file(graph_, c);
  }
  std::filesystem::path graph_;
};

TEST_P(EngineCudaTest, MixedBatchForwardEqualsEachSequenceAlone) {
  MG_REQUIRE_GPU();
  for (const auto& [dtype, tolerance] :
       std::vector<std::pair<DType, double>>{{DType::kF32, 1e-4}, {DType::kBF16, 3e-2}}) {
    const auto p = plan(dtype, 32);
    SessionOptions so;
    so.max_sequences = 2;
    so.kv_blocks = 16;
    so.kv_block_size = 4;
    Session batched(p, so);
    const int64_t vocab = p->values[p->logits].type.shape.back();
    const std::vector<int32_t>& a = kPrompts[0];
    const std::vector<int32_t>& c = kPrompts[2];
    batched.set_block_table(0, std::vector<int32_t>{9, 1, 14});
    batched.set_block_table(1, std::vector<int32_t>{3, 0, 12, 5, 7});
    // Step 1: a's prompt but its last token; step 2: a's last token and c's whole prompt.
    batched.forward_batch(std::span(a.data(), a.size() - 1), positions_from(0, a.size() - 1),
                          std::vector<int32_t>(a.size() - 1, 0), std::vector<int64_t>{});
    std::vector<int32_t> ids = {a.back()};
    std::vector<int32_t> pos = {static_cast<int32_t>(a.size() - 1)};
    std::vector<int32_t> slots = {0};
    ids.insert(ids.end(), c.begin(), c.end());
    const auto cp = positions_from(0, c.size());
    pos.insert(pos.end(), cp.begin(), cp.end());
    slots.insert(slots.end(), c.size(), 1);
    std::vector<int64_t> rows(ids.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    const Tensor& got = batched.forward_batch(ids, pos, slots, rows);
    const std::vector<float> got_rows(got.data<float>(), got.data<float>() + got.numel());

    auto lone = [&](const std::vector<int32_t>& prompt) {
      Session s(p, SessionOptions{});
      const Tensor& t = s.forward(prompt, positions_from(0, prompt.size()));
      return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
    };
    const std::vector<float> la = lone(a);
    std::vector<float> want(la.end() - vocab, la.end());
    const std::vector<float> lc = lone(c);
    want.insert(want.end(), lc.begin(), lc.end());
    ASSERT_EQ(got_rows.size(), want.size());
    EXPECT_LT(testing::normalized_error(got_rows, want), tolerance) << dtype_name(dtype);
  }
}

TEST_P(EngineCudaTest, EngineEqualsLoneGenerateGreedyAndSampled) {
  MG_REQUIRE_GPU();
  const auto p = plan(DType::kF32, 8);
  // Odd requests are sampled (their logits come back to the host), even ones greedy (picked on
  // the device): a step mixes both, so only some rows of logits are copied back.
  auto sampling = [](size_t i) {
    SamplingOptions o;
    if (i % 2 == 1) {
      o.temperature = 0.8f;
      o.top_k = 20;
    }
    return o;
  };
  std::vector<std::vector<int32_t>> lone;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    Session s(p, SessionOptions{});
    GenerateOptions g;
    g.max_new_tokens = 9;
    g.stop_at_eos = false;
    g.sampling = sampling(i);
    g.seed = 100 + i;
    lone.push_back(s.generate(kPrompts[i], g).tokens);
  }
  for (const bool cuda_graph : {false, true}) {
    EngineOptions eo;
    eo.max_sequences = 3;
    eo.kv_block_size = 4;
    eo.session.cuda_graph = cuda_graph;
    std::unique_ptr<Engine> engine;
    try {
      engine = std::make_unique<Engine>(p, eo);
    } catch (const Error& e) {
      // A MoE backend that synchronises with the host cannot be captured; the error says so.
      ASSERT_TRUE(cuda_graph) << e.what();
      std::cout << "[ skipped ] --cuda-graph: " << e.what() << "\n";
      continue;
    }
    std::map<RequestId, std::vector<int32_t>> tokens;
    std::vector<RequestId> ids;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      RequestOptions r;
      r.max_new_tokens = 9;
      r.stop_at_eos = false;
      r.sampling = sampling(i);
      r.seed = 100 + i;
      r.on_event = [&](const RequestEvent& e) {
        ASSERT_NE(e.finish, FinishReason::kError) << e.error;
        if (e.token >= 0) tokens[e.id].push_back(e.token);
      };
      ids.push_back(engine->add_request(kPrompts[i], r));
    }
    engine->run_until_idle();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      EXPECT_EQ(tokens[ids[i]], lone[i]) << "request " << i << (cuda_graph ? " (graphs)" : "");
    }
    const EngineStats s = engine->stats();
    EXPECT_EQ(s.kv_blocks_free, s.kv_blocks_total);
    EXPECT_EQ(s.slots_free, s.slots_total);
  }
}

// Four prompts of 150, 100, 200 and 90 tokens, max_tokens 256, BF16, head_dim 64. The Engine's
// first step is prompt 0 (150 rows), prompt 1 (100) and prompt 2's first 6: tiles of 1, 1, 2 and
// 2 sequences, 6 passes in 4 tiles; the second is 2 decode rows, 194 rows of prompt 2 and 60 of
// prompt 3: 7 passes in 4 tiles. Both take the flash kernel under the auto rule (checked below on
// the same make-up), as the lone contiguous sessions' prompts do. Greedy tokens are compared
// while the lone run's top two logits are apart by more than 5% of the largest logit: the
// batched forwards round BF16 activations differently from a lone one (other row counts in the
// matrix products), which may flip a near tie, and would flip none of these.
TEST(EngineCudaFlashTest, LongPromptsTakeFlashAndEqualEachPromptAlone) {
  MG_REQUIRE_GPU();
  auto spec = testing::small_spec("llama");
  spec.head_dim = 64;
  spec.max_seq_len = 512;
  const auto graph = testing::write_model(testing::temp_dir("engine_cuda_flash"), spec);
  CompileOptions c;
  c.device = Device::cuda(0);
  c.activation_dtype = DType::kBF16;
  c.max_tokens = 256;
  const std::shared_ptr<const ExecutionPlan> p = compile_graph_file(graph, c);
  const int64_t vocab = p->values[p->logits].type.shape.back();
  std::mt19937 rng(2024);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t length : {150, 100, 200, 90}) {
    std::vector<int32_t> prompt(static_cast<size_t>(length));
    for (int32_t& id : prompt) {
      id = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(vocab) - 1)(rng);
    }
    prompts.push_back(std::move(prompt));
  }
  // The two prompt steps' make-up (slots as the Engine admits them: 0, 1, 2, 3).
  auto rows_of = [](std::vector<std::pair<int32_t, int64_t>> parts) {
    std::vector<int32_t> slots;
    for (const auto& [slot, rows] : parts)
      slots.insert(slots.end(), static_cast<size_t>(rows), slot);
    KvBatch kv;
    kv.flash_passes = count_flash_passes(slots.data(), static_cast<int64_t>(slots.size()));
    return std::pair{kv, static_cast<int64_t>(slots.size())};
  };
  for (const auto& [kv, rows] :
       {rows_of({{0, 150}, {1, 100}, {2, 6}}), rows_of({{0, 1}, {1, 1}, {2, 194}, {3, 60}})}) {
    EXPECT_TRUE(flash_passes_pay(kv, rows)) << kv.flash_passes << " passes, " << rows << " rows";
  }

  constexpr int kNewTokens = 6;
  // Lone contiguous sessions, greedy by hand: each step's id and whether it is clear of a tie.
  std::vector<std::vector<int32_t>> lone(prompts.size());
  std::vector<std::vector<bool>> clear(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Session s(p, SessionOptions{});
    std::vector<int32_t> ids = prompts[i];
    std::vector<int32_t> pos = positions_from(0, static_cast<int64_t>(ids.size()));
    for (int step = 0; step < kNewTokens; ++step) {
      const Tensor& logits = s.forward(ids, pos, Session::Logits::kLastRow);
      std::vector<float> row(logits.data<float>(), logits.data<float>() + vocab);
      const auto best = std::max_element(row.begin(), row.end());
      const int32_t token = static_cast<int32_t>(best - row.begin());
      const float top = *best;
      float largest = 0.0f;
      for (float x : row) largest = std::max(largest, std::fabs(x));
      *best = -INFINITY;
      const float second = *std::max_element(row.begin(), row.end());
      lone[i].push_back(token);
      clear[i].push_back(top - second > 0.05f * largest);
      pos = {static_cast<int32_t>(pos.back() + 1)};
      ids = {token};
    }
  }
  for (const bool cuda_graph : {false, true}) {
    EngineOptions eo;
    eo.max_sequences = 4;
    eo.kv_block_size = 16;
    eo.session.cuda_graph = cuda_graph;
    std::unique_ptr<Engine> engine;
    try {
      engine = std::make_unique<Engine>(p, eo);
    } catch (const Error& e) {
      ASSERT_TRUE(cuda_graph) << e.what();
      std::cout << "[ skipped ] --cuda-graph: " << e.what() << "\n";
      continue;
    }
    std::map<RequestId, std::vector<int32_t>> tokens;
    std::vector<RequestId> ids;
    for (const std::vector<int32_t>& prompt : prompts) {
      RequestOptions r;
      r.max_new_tokens = kNewTokens;
      r.stop_at_eos = false;
      r.on_event = [&](const RequestEvent& e) {
        ASSERT_NE(e.finish, FinishReason::kError) << e.error;
        if (e.token >= 0) tokens[e.id].push_back(e.token);
      };
      ids.push_back(engine->add_request(prompt, r));
    }
    engine->run_until_idle();
    int compared = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(tokens[ids[i]].size(), static_cast<size_t>(kNewTokens)) << "request " << i;
      for (int step = 0; step < kNewTokens && clear[i][static_cast<size_t>(step)]; ++step) {
        EXPECT_EQ(tokens[ids[i]][static_cast<size_t>(step)], lone[i][static_cast<size_t>(step)])
            << "request " << i << " step " << step << (cuda_graph ? " (graphs)" : "");
        ++compared;
      }
    }
    std::cout << "[ compared ] " << compared << " of " << prompts.size() * kNewTokens
              << " greedy tokens clear of a near tie" << (cuda_graph ? " (graphs)" : "") << "\n";
    EXPECT_GT(compared, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, EngineCudaTest,
                         ::testing::Values("llama", "gpt_oss", "qwen3_moe"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mg
