// bench e2e's weight-bandwidth floor (tools/bench/decode_floor.h): routed experts count top_k of E,
// quantized experts their packed codes plus scales, the embedding table is left out.
#include "tools/bench/decode_floor.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mg
