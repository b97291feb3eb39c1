// bench e2e's floors (tools/bench/decode_floor.h): decode's weight bytes (routed experts count
// top_k of E, quantized experts their packed codes plus scales, the embedding table is left out)
// and prefill's bytes and flops.
#include "tools/bench/decode_floor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "models/builders/decoder_builder.h"

namespace mg {
namespace {

proto::Model model_of(const std::string& family, proto::MoEQuantScheme quant,
                      QuantElement element = QuantElement::kFromDtype, int64_t group = -1) {
  DecoderSpec spec;
  const Family& f = find_family(family);
  spec.family = f.name;
  f.configure(spec);
  spec.layers = 2;
  spec.hidden = 128;
  spec.experts = 8;
  spec.top_k = 2;
  spec.moe_intermediate = 64;
  spec.vocab = 512;
  spec.moe_quant = quant;
  spec.moe_quant_element = element;
  spec.moe_quant_group = group;
  return build_decoder(spec, /*graph_only=*/true).model();
}

TEST(DecodeFloor, QuantizedExpertsCountTheirPackedCodesAndScales) {
  const double H = 128, I = 64, k = 2, layers = 2;
  const DecodeWeightBytes bf16 =
      decode_weight_bytes(model_of("qwen3_moe", proto::MOE_QUANT_UNQUANTIZED), DType::kBF16);
  // Top-2 of 8 experts, gate + up [2I, H] and down [H, I], at 2 bytes.
  EXPECT_DOUBLE_EQ(bf16.experts, layers * k * 3 * H * I * 2);
  EXPECT_EQ(bf16.quantized, 0);
  EXPECT_GT(bf16.dense, 0);

  const DecodeWeightBytes int4 = decode_weight_bytes(
      model_of("qwen3_moe", proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kInt4, 32),
      DType::kBF16);
  // Half a byte a code, an F32 scale per 32 codes.
  EXPECT_DOUBLE_EQ(int4.experts, layers * k * (3 * H * I / 2 + 3 * H * I / 32 * 4));
  EXPECT_DOUBLE_EQ(int4.quantized, int4.experts);
  EXPECT_DOUBLE_EQ(int4.dense, bf16.dense);  // attention, norms, router, lm_head: unchanged
  EXPECT_DOUBLE_EQ(int4.total(), int4.dense + int4.experts);

  // F32 activations: the unquantized weights count 4 bytes, the codes and scales as stored.
  const DecodeWeightBytes int4_f32 = decode_weight_bytes(
      model_of("qwen3_moe", proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kInt4, 32),
      DType::kF32);
  EXPECT_DOUBLE_EQ(int4_f32.experts, int4.experts);
  EXPECT_DOUBLE_EQ(int4_f32.dense, 2 * int4.dense);
}

TEST(DecodeFloor, Mxfp4ExpertsCountE8m0ScalesAndTheirBiases) {
  const double H = 128, I = 64, k = 2, layers = 2;
  const DecodeWeightBytes mx =
      decode_weight_bytes(model_of("gpt_oss", proto::MOE_QUANT_MXFP4), DType::kBF16);
  // 4.25 bits a value (a code per half byte, an E8M0 byte per 32), and the top-k experts' biases
  // (w13 [2I], w2 [H]) in BF16.
  const double codes = 3 * H * I / 2 + 3 * H * I / 32;
  EXPECT_DOUBLE_EQ(mx.experts, layers * k * (codes + (2 * I + H) * 2));
  EXPECT_DOUBLE_EQ(mx.quantized, layers * k * codes);
}

TEST(DecodeFloor, TheEmbeddingTableCountsOnlyWhenLmHeadReadsIt) {
  DecoderSpec spec;
  spec.layers = 1;
  spec.vocab = 1000;
  spec.hidden = 64;
  const double table = 1000.0 * 64 * 2;
  const DecodeWeightBytes untied =
      decode_weight_bytes(build_decoder(spec, true).model(), DType::kBF16);
  spec.tie_embeddings = true;
  const DecodeWeightBytes tied =
      decode_weight_bytes(build_decoder(spec, true).model(), DType::kBF16);
  // Untied: the lm_head matrix (the table's size) is read, the embedding table is not; tied: the
  // one table, read by lm_head.
  EXPECT_DOUBLE_EQ(untied.dense, tied.dense);
  EXPECT_GT(untied.dense, table);
  EXPECT_EQ(untied.experts, 0);
}

// The prefill floor's work, counted here from the spec: every projection at all T rows, the LM
// head at one row, the routed experts at T k / E rows each, the router at T rows, attention's
// 2 (d + d) flops per head and causal pair; bytes: dense weights whole, experts at the share
// E (1 - (1 - k/E)^T) of them that expects a token (here T = 1: exactly decode's top-k share).
TEST(PrefillFloor, CountsEveryMatrixAtItsRowsAndAttentionAtItsCausalPairs) {
  DecoderSpec spec;
  const Family& f = find_family("qwen3_moe");
  spec.family = f.name;
  f.configure(spec);
  spec.layers = 2;
  spec.hidden = 128;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 32;
  spec.experts = 8;
  spec.top_k = 2;
  spec.moe_intermediate = 64;
  spec.vocab = 512;
  spec.sliding_window = 0;
  const proto::Model model = build_decoder(spec, /*graph_only=*/true).model();
  const double H = 128, L = 2, nh = 4, nkv = 2, d = 32, E = 8, k = 2, I = 64, V = 512;
  for (const int64_t tokens : {1, 7, 300}) {
    SCOPED_TRACE(tokens);
    const double T = static_cast<double>(tokens);
    const double projections = H * (nh + 2 * nkv) * d + nh * d * H;  // q, k, v, o
    const double per_layer = 2 * T * (projections + E * H) +         // + the router
                             2 * (T * k / E) * E * 3 * H * I +       // routed experts
                             2 * (d + d) * nh * T * (T + 1) / 2;     // causal pairs
    const PrefillWork w = prefill_work(model, DType::kBF16, tokens);
    EXPECT_NEAR(w.flops, L * per_layer + 2 * 1 * V * H, 1e-9 * w.flops);
    const DecodeWeightBytes decode = decode_weight_bytes(model, DType::kBF16);
    const double share = 1 - std::pow(1 - k / E, T);
    EXPECT_NEAR(w.bytes_uniform, decode.dense + decode.experts * share / (k / E),
                1e-9 * w.bytes_uniform);
    // The bound: whatever the router does, the prompt reads the dense weights and k experts.
    EXPECT_DOUBLE_EQ(w.bytes, decode.total());
    if (tokens > 1) {
      EXPECT_GT(w.bytes_uniform, w.bytes);
    }
  }
  // One token reads what a decode step reads.
  const DecodeWeightBytes decode = decode_weight_bytes(model, DType::kBF16);
  EXPECT_DOUBLE_EQ(prefill_work(model, DType::kBF16, 1).bytes_uniform, decode.total());
}

// A sliding window bounds each query's keys: with window W, query t sees min(t + 1, W) of them.
TEST(PrefillFloor, SlidingWindowBoundsTheAttentionPairs) {
  DecoderSpec spec;
  spec.layers = 2;  // the window applies to even layers
  spec.heads = 2;
  spec.kv_heads = 2;
  spec.head_dim = 8;
  const proto::Model full = build_decoder(spec, true).model();
  spec.sliding_window = 4;
  const proto::Model windowed = build_decoder(spec, true).model();
  const int64_t T = 10;
  // Layer 0 only: Σ_t (t + 1) = 55 pairs without the window, Σ_t min(t + 1, 4) = 1+2+3+4*7 = 34.
  const double per_pair = 2.0 * (8 + 8) * 2;
  EXPECT_NEAR(
      prefill_work(full, DType::kBF16, T).flops - prefill_work(windowed, DType::kBF16, T).flops,
      per_pair * (55 - 34), 1e-6);
}

}  // namespace
}  // namespace mg
