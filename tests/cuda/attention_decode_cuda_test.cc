// The split-KV (flash-decoding) attention path of ops/nn/attention/attention_cuda.h, called through
// launch_attention with the path forced: one query row per sequence (decode, batched decode) at
// contexts of 1, 7, 513 and 4099 keys, GQA ratios 1, 4, 6, 8 and 16 (two head tiles), head dims
// 64, 80, 128, 192/128 (v_head_dim != head_dim) and 256, sliding window, chunks, sinks, an explicit
// scale, contiguous and paged caches (shuffled blocks, slots in reverse order) and a row whose
// position lies outside the cache (NaN row). Every result is checked against the fp64 reference
// (attention_reference) in every dtype, at the rule's split count and at forced ones (1: many
// 128-key tiles in one block; 3; the maximum: splits the row does not use), against the
// per-query kernel on the same inputs, at forced tile sizes (8, 64 and 128 keys: many tiles, the
// pipeline's stage reuse, lanes per key from 32 to 2; 20 splits: blocks whose splits are shorter
// than the launch's tile use tiles of 32 or 16 keys), every output element must be written
// (poisoned first), every split counter left at zero and the KV cache left as it must be. The
// KV-cache write fused into the split kernel (fused_write_cases: position 0 and the end of the
// cache, chunks whose rows read keys other rows of the call write, 16 paged sequences, rows with
// no block or outside the cache): against the reference, bit for bit against the separate write
// launch, the cache byte for byte against what kv_cache_write writes, and replayed from a graph.
// Also: the split path replayed twice from a CUDA graph, head sizes it does not take, the
// split-count and tile rules and workspace bound (host only), and both paths, with the write
// separate and fused, timed on the Qwen3 decode shape (printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>

#include "ops/nn/attention/attention.h"
#include "tests/cuda/cuda_test_util.h"

#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/attention/attention_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::CaptureGuard;
using testing::device_sm_count;
using testing::DeviceBuffer;
using testing::DtypeTolerance;
using testing::upload_as;

struct DecodeCase {
  std::string name;
  int64_t heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;  // v_head_dim 0: head_dim
  int64_t sliding_window = 0, chunk_size = 0;
  bool sinks = false;
  float scale = 0.0f;             // 0: 1/sqrt(head_dim)
  std::vector<int64_t> contexts;  // one sequence each; its query row sits at context - 1
  int64_t block_size = 0;         // 0: one contiguous sequence (contexts has one entry)
  bool out_of_range_row = false;  // one more row at the first position outside the cache
  // Query rows per sequence, at its last chunk_rows positions (a chunk: row c of a sequence sees
  // the positions its rows < c write in the same call); rows ordered chunk-major (row c * seqs +
  // i is sequence i's c-th), so one sequence's rows are not neighbours.
  int64_t chunk_rows = 1;
  // No spare room: the cache (contiguous) or the longest sequence's block table (paged) ends at
  // the longest context, so its last row sits at the very end of the cache.
  bool cache_full = false;
  // Paged: one more row, at position 0 of one more slot whose block table has no blocks (-1):
  // its K and V must not be written (its output is not checked).
  bool invalid_block_row = false;
};

// How DecodeProblem::run gives the keys of the query rows' own positions (the last chunk_rows of
// each sequence): kNone: already in the cache; kFused: as AttentionArgs::k / v to launch_attention
// (the split kernel writes them itself when attention_fuses_kv_write); kSeparate: through
// launch_kv_cache_write, then launch_attention without them (the two launches of before). With
// kFused and kSeparate those cache rows start stale (other values) and must end as written.
enum class KvWrite { kNone, kFused, kSeparate };

std::vector<DecodeCase> decode_cases() {
  std::vector<DecodeCase> out;
  // The Qwen3-30B-A3B attention shape (32 heads, 4 KV heads, head dim 128) at every context.
  for (int64_t context : {1, 7, 513, 4099}) {
    out.push_back({.name = fmt::format("qwen3_gqa8_d128_ctx{}", context),
                   .heads = 32,
                   .kv_heads = 4,
                   .head_dim = 128,
                   .contexts = {context}});
  }
  out.push_back({.name = "gqa4_d64_paged_4seqs",
                 .heads = 8,
                 .kv_heads = 2,
                 .head_dim = 64,
                 .contexts = {1, 7, 513, 4099},
                 .block_size = 16,
                 .out_of_range_row = true});
  out.push_back({.name = "mha_d80_paged",
                 .heads = 4,
                 .kv_heads = 4,
                 .head_dim = 80,
                 .contexts = {7, 513, 1},
                 .block_size = 8});
  out.push_back({.name = "gqa4_d256_sinks",
                 .heads = 8,
                 .kv_heads = 2,
                 .head_dim = 256,
                 .sinks = true,
                 .contexts = {513}});
  out.push_back({.name = "gqa8_d128_window100_sinks_paged",
                 .heads = 16,
                 .kv_heads = 2,
                 .head_dim = 128,
                 .sliding_window = 100,
                 .sinks = true,
                 .contexts = {4099, 7, 513},
                 .block_size = 32});
  out.push_back({.name = "gqa4_d64_chunk256_paged",
                 .heads = 4,
                 .kv_heads = 1,
                 .head_dim = 64,
                 .chunk_size = 256,
                 .contexts = {513, 7, 400},
                 .block_size = 16});
  out.push_back({.name = "gqa4_qk192_v128",
                 .heads = 4,
                 .kv_heads = 1,
                 .head_dim = 192,
                 .v_head_dim = 128,
                 .contexts = {513}});
  out.push_back({.name = "gqa16_d64_two_head_tiles",
                 .heads = 16,
                 .kv_heads = 1,
                 .head_dim = 64,
                 .contexts = {513}});
  out.push_back({.name = "gqa6_d128_scale",
                 .heads = 12,
                 .kv_heads = 2,
                 .head_dim = 128,
                 .scale = 0.3f,
                 .contexts = {7, 513},
                 .block_size = 64});
  out.push_back({.name = "contiguous_out_of_range",
                 .heads = 8,
                 .kv_heads = 1,
                 .head_dim = 128,
                 .contexts = {300},
                 .out_of_range_row = true});
  return out;
}

// The fused KV-cache write (attention_fuses_kv_write): a query row at position 0 and at the very
// end of the cache, chunks (rows reading the keys other rows of the call write, up to the 64 rows
// of the split path), 16 paged sequences of different lengths, GQA 32/4 with head dims 128 and 64,
// v_head_dim != head_dim, window and sinks, rows outside the cache.
std::vector<DecodeCase> fused_write_cases() {
  std::vector<DecodeCase> out;
  out.push_back(
      {.name = "qwen3_d128_pos0", .heads = 32, .kv_heads = 4, .head_dim = 128, .contexts = {1}});
  out.push_back({.name = "qwen3_d128_ctx513",
                 .heads = 32,
                 .kv_heads = 4,
                 .head_dim = 128,
                 .contexts = {513}});
  out.push_back({.name = "qwen3_d64_ctx4099_end_of_cache",
                 .heads = 32,
                 .kv_heads = 4,
                 .head_dim = 64,
                 .contexts = {4099},
                 .cache_full = true});
  out.push_back({.name = "qwen3_d128_chunk5",
                 .heads = 32,
                 .kv_heads = 4,
                 .head_dim = 128,
                 .contexts = {517},
                 .chunk_rows = 5});
  out.push_back({.name = "qwen3_d128_chunk3_from_pos0_end_of_cache",
                 .heads = 32,
                 .kv_heads = 4,
                 .head_dim = 128,
                 .contexts = {3},
                 .chunk_rows = 3,
                 .cache_full = true});
  out.push_back({.name = "qwen3_d64_chunk64",
                 .heads = 32,
                 .kv_heads = 4,
                 .head_dim = 64,
                 .contexts = {600},
                 .chunk_rows = 64});
  out.push_back({.name = "gqa4_d64_paged_4seqs_out_of_range",
                 .heads = 8,
                 .kv_heads = 2,
                 .head_dim = 64,
                 .contexts = {1, 7, 513, 4099},
                 .block_size = 16,
                 .out_of_range_row = true});
  out.push_back({.name = "qwen3_d128_paged_16seqs_end_of_cache",
                 .heads = 32,
                 .kv_heads = 4,
                 .head_dim = 128,
                 .contexts = {1, 16, 17, 100, 512, 33, 2, 511, 256, 300, 5, 64, 65, 9, 128, 480},
                 .block_size = 16,
                 .cache_full = true});
  out.push_back({.name = "qwen3_d128_paged_4seqs_chunk4",
                 .heads = 32,
                 .kv_heads = 4,
                 .head_dim = 128,
                 .contexts = {4, 40, 513, 17},
                 .block_size = 16,
                 .chunk_rows = 4});
  out.push_back({.name = "gqa8_d128_window100_sinks_paged_chunk3",
                 .heads = 16,
                 .kv_heads = 2,
                 .head_dim = 128,
                 .sliding_window = 100,
                 .sinks = true,
                 .contexts = {4099, 7, 513},
                 .block_size = 32,
                 .chunk_rows = 3});
  out.push_back({.name = "gqa4_qk192_v128",
                 .heads = 4,
                 .kv_heads = 1,
                 .head_dim = 192,
                 .v_head_dim = 128,
                 .contexts = {513}});
  out.push_back({.name = "contiguous_out_of_range",
                 .heads = 8,
                 .kv_heads = 1,
                 .head_dim = 128,
                 .contexts = {300},
                 .out_of_range_row = true});
  return out;
}

proto::AttentionParams params_of(const DecodeCase& c) {
  proto::AttentionParams p;
  p.set_num_heads(c.heads);
  p.set_num_kv_heads(c.kv_heads);
  p.set_head_dim(c.head_dim);
  p.set_v_head_dim(c.v_head_dim);
  if (c.scale != 0.0f) p.set_scale(c.scale);
  p.set_sliding_window(c.sliding_window);
  p.set_chunk_size(c.chunk_size);
  p.set_has_sinks(c.sinks);
  return p;
}

AttentionDims dims_of(const DecodeCase& c) {
  AttentionDims d;
  d.heads = c.heads;
  d.kv_heads = c.kv_heads;
  d.head_dim = c.head_dim;
  d.v_head_dim = c.v_head_dim == 0 ? c.head_dim : c.v_head_dim;
  d.scale = c.scale != 0.0f ? c.scale : static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
  d.sliding_window = c.sliding_window;
  d.chunk_size = c.chunk_size;
  return d;
}

// One case's inputs in one dtype: host histories and reference, device cache and query rows.
class DecodeProblem {
 public:
  DecodeProblem(const DecodeCase& c, DType dtype, uint32_t seed)
      : case_(c), dims_(dims_of(c)), dtype_(dtype) {
    const int64_t seqs = static_cast<int64_t>(c.contexts.size());
    const int64_t kd = c.kv_heads * dims_.head_dim, vd = c.kv_heads * dims_.v_head_dim;
    const int64_t longest = *std::max_element(c.contexts.begin(), c.contexts.end());
    const bool paged = c.block_size > 0;
    MG_ASSERT(paged || seqs == 1, "a contiguous cache holds one sequence");
    MG_ASSERT(paged || !c.invalid_block_row, "invalid blocks need a paged cache");
    int64_t rows = c.cache_full ? longest : longest + 5;
    // Slots: sequence i lives in slot seqs - 1 - i; the invalid-block row's slot is `seqs`.
    const int64_t slot_count = seqs + (c.invalid_block_row ? 1 : 0);
    std::vector<int32_t> tables;
    std::vector<int32_t> slots;
    if (paged) {
      max_blocks_ = (longest + c.block_size - 1) / c.block_size + (c.cache_full ? 0 : 1);
      num_blocks_ = 3;
      for (int64_t len : c.contexts) num_blocks_ += (len + c.block_size - 1) / c.block_size;
      rows = num_blocks_ * c.block_size;
      max_positions_ = max_blocks_ * c.block_size;
      // Blocks handed out in a shuffled order.
      std::vector<int32_t> pool(static_cast<size_t>(num_blocks_));
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
      tables.assign(static_cast<size_t>(slot_count * max_blocks_), -1);
      size_t next = 0;
      for (int64_t i = 0; i < seqs; ++i) {
        const int64_t slot = seqs - 1 - i;
        for (int64_t b = 0; b * c.block_size < c.contexts[i]; ++b) {
          tables[slot * max_blocks_ + b] = pool[next++];
        }
      }
    } else {
      max_positions_ = rows;
    }

    // The cache as it must be after the call (every position of every sequence), and as it is
    // before a call that writes (the query rows' own positions stale).
    Tensor k_cache = Tensor::empty_cpu(DType::kF32, {rows, kd});
    Tensor v_cache = Tensor::empty_cpu(DType::kF32, {rows, vd});
    std::fill_n(k_cache.data<float>(), rows * kd, 0.0f);
    std::fill_n(v_cache.data<float>(), rows * vd, 0.0f);
    Tensor k_stale = Tensor::empty_cpu(DType::kF32, {rows, kd});
    Tensor v_stale = Tensor::empty_cpu(DType::kF32, {rows, vd});
    const int64_t query_rows = seqs * c.chunk_rows;
    tokens_ = query_rows + (c.invalid_block_row ? 1 : 0) + (c.out_of_range_row ? 1 : 0);
    Tensor q = testing::round_through(
        testing::random_tensor({tokens_, c.heads * dims_.head_dim}, seed, -3.0f, 3.0f), dtype);
    // This call's K and V rows (what the query rows write); the extra rows' are random.
    Tensor k_new =
        testing::round_through(testing::random_tensor({tokens_, kd}, seed + 2, -2.0f, 2.0f), dtype);
    Tensor v_new = testing::round_through(testing::random_tensor({tokens_, vd}, seed + 3), dtype);
    if (c.sinks) {
      sinks_ =
          testing::round_through(testing::random_tensor({c.heads}, seed + 1, -2.0f, 4.0f), dtype);
    }
    std::vector<int32_t> positions(static_cast<size_t>(tokens_));
    slots.assign(static_cast<size_t>(tokens_), 0);
    const int64_t dv_width = c.heads * dims_.v_head_dim;
    reference_.assign(static_cast<size_t>(tokens_ * dv_width), 0.0f);
    const proto::AttentionParams params = params_of(c);
    KvBatch host_kv;
    host_kv.block_tables = paged ? tables.data() : nullptr;
    host_kv.max_blocks_per_seq = max_blocks_;
    host_kv.block_size = c.block_size;
    std::vector<std::pair<int64_t, int64_t>> fresh;  // (cache row, query row) written this call
    for (int64_t i = 0; i < seqs; ++i) {
      const int64_t len = c.contexts[i];
      MG_ASSERT(len >= c.chunk_rows, "a context of {} keys for {} rows", len, c.chunk_rows);
      const Tensor k_seq = testing::round_through(
          testing::random_tensor({len, kd}, seed + 10 + 2 * static_cast<uint32_t>(i), -2.0f, 2.0f),
          dtype);
      const Tensor v_seq = testing::round_through(
          testing::random_tensor({len, vd}, seed + 11 + 2 * static_cast<uint32_t>(i)), dtype);
      const int64_t slot = seqs - 1 - i;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t row = kv_cache_row(&host_kv, slot, j);
        std::copy_n(k_seq.data<float>() + j * kd, kd, k_cache.data<float>() + row * kd);
        std::copy_n(v_seq.data<float>() + j * vd, vd, v_cache.data<float>() + row * vd);
      }
      for (int64_t ch = 0; ch < c.chunk_rows; ++ch) {
        const int64_t t = ch * seqs + i;
        const int32_t p = static_cast<int32_t>(len - c.chunk_rows + ch);
        positions[static_cast<size_t>(t)] = p;
        slots[static_cast<size_t>(t)] = static_cast<int32_t>(slot);
        std::copy_n(k_seq.data<float>() + p * kd, kd, k_new.data<float>() + t * kd);
        std::copy_n(v_seq.data<float>() + p * vd, vd, v_new.data<float>() + t * vd);
        fresh.emplace_back(kv_cache_row(&host_kv, slot, p), t);
        attention_reference(params, q.data<float>() + t * c.heads * dims_.head_dim, &p, 1,
                            k_seq.data<float>(), v_seq.data<float>(), len,
                            c.sinks ? sinks_.data<float>() : nullptr,
                            reference_.data() + t * dv_width);
      }
    }
    int64_t extra = query_rows;
    if (c.invalid_block_row) {
      positions[static_cast<size_t>(extra)] = 0;
      slots[static_cast<size_t>(extra)] = static_cast<int32_t>(seqs);
      ++extra;
    }
    if (c.out_of_range_row) {
      positions[static_cast<size_t>(extra)] = static_cast<int32_t>(max_positions_);
      slots[static_cast<size_t>(extra)] = 0;
    }
    // Stale values where this call writes: a kernel that read the cache there would be wrong.
    std::copy_n(k_cache.data<float>(), rows * kd, k_stale.data<float>());
    std::copy_n(v_cache.data<float>(), rows * vd, v_stale.data<float>());
    const Tensor k_junk = testing::random_tensor({1, kd}, seed + 5, 5.0f, 9.0f);
    const Tensor v_junk = testing::random_tensor({1, vd}, seed + 6, -9.0f, -5.0f);
    for (const auto& [row, t] : fresh) {
      std::copy_n(k_junk.data<float>(), kd, k_stale.data<float>() + row * kd);
      std::copy_n(v_junk.data<float>(), vd, v_stale.data<float>() + row * vd);
    }

    q_ = upload_as(q, dtype);
    k_cache_ = upload_as(k_cache, dtype);
    v_cache_ = upload_as(v_cache, dtype);
    k_new_ = upload_as(k_new, dtype);
    v_new_ = upload_as(v_new, dtype);
    k_full_ = cast_cpu(k_cache, dtype);
    v_full_ = cast_cpu(v_cache, dtype);
    k_stale_ = cast_cpu(k_stale, dtype);
    v_stale_ = cast_cpu(v_stale, dtype);
    positions_ = std::make_unique<DeviceBuffer>(positions.size() * sizeof(int32_t));
    positions_->upload(positions.data(), positions.size() * sizeof(int32_t));
    if (c.sinks) sinks_device_ = upload_as(sinks_, dtype);
    if (paged) {
      tables_ = std::make_unique<DeviceBuffer>(tables.size() * sizeof(int32_t));
      tables_->upload(tables.data(), tables.size() * sizeof(int32_t));
      slots_ = std::make_unique<DeviceBuffer>(slots.size() * sizeof(int32_t));
      slots_->upload(slots.data(), slots.size() * sizeof(int32_t));
    }
    out_bytes_ = static_cast<size_t>(tokens_ * dv_width) * dtype_size(dtype);
    out_ = std::make_unique<DeviceBuffer>(out_bytes_);
  }

  // The launch arguments of `path` (splits and tile_keys 0: the rules), workspace and split
  // counters not yet attached.
  cuda::AttentionArgs args(cuda::AttentionPath path, int64_t splits, int64_t tile_keys = 0) const {
    cuda::AttentionArgs a;
    a.q = q_->as<void>();
    a.positions = positions_->as<int32_t>();
    a.k_cache = k_cache_->as<void>();
    a.v_cache = v_cache_->as<void>();
    a.sinks = case_.sinks ? sinks_device_->as<void>() : nullptr;
    a.out = out_->as<void>();
    a.tokens = tokens_;
    a.max_seq_len = max_positions_;
    if (case_.block_size > 0) {
      a.kv.row_slots = slots_->as<int32_t>();
      a.kv.block_tables = tables_->as<int32_t>();
      a.kv.max_blocks_per_seq = max_blocks_;
      a.kv.block_size = case_.block_size;
      a.kv.num_blocks = num_blocks_;
    }
    a.sm_count = device_sm_count();
    a.path = path;
    a.splits = splits;
    a.tile_keys = tile_keys;
    return a;
  }

  // Runs `path` on `stream` (or captured into a CUDA graph and replayed twice: the second replay
  // starts from the counters the first left) over a NaN-poisoned output; returns the output as
  // host floats. The split counters must come back zero.
  // With `write` kFused or kSeparate the cache starts stale at the rows' own positions and must
  // hold exactly what kv_cache_write writes afterwards (compared byte for byte).
  std::vector<float> run(cuda::AttentionPath path, int64_t splits, bool graph = false,
                         int64_t tile_keys = 0, KvWrite write = KvWrite::kNone) const {
    cuda::AttentionArgs a = args(path, splits, tile_keys);
    const Tensor& k_start = write == KvWrite::kNone ? k_full_ : k_stale_;
    const Tensor& v_start = write == KvWrite::kNone ? v_full_ : v_stale_;
    k_cache_->upload(k_start.raw(), k_start.nbytes());
    v_cache_->upload(v_start.raw(), v_start.nbytes());
    const int64_t split_count =
        splits > 0 ? splits : cuda::split_kv_splits(dims_, tokens_, max_positions_, a.sm_count);
    const size_t ws_bytes = cuda::split_kv_workspace_bytes(dims_, tokens_, split_count);
    DeviceBuffer workspace(ws_bytes);
    a.workspace = workspace.as<void>();
    a.workspace_bytes = ws_bytes;
    const int64_t counter_count = cuda::split_kv_counter_count(dims_, tokens_);
    DeviceBuffer counters(static_cast<size_t>(counter_count) * sizeof(unsigned));
    testing::memset_device_now(counters.as<void>(), 0, static_cast<size_t>(counter_count) * 4);
    a.split_counters = counters.as<unsigned>();
    a.split_counter_count = counter_count;
    cudaStream_t stream = nullptr;
    MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MG_CUDA_CHECK(cudaMemsetAsync(out_->as<void>(), 0xff, out_bytes_, stream));
    auto launch = [&] { launch_with_write(a, write, stream); };
    if (graph) {
      cudaGraph_t captured = nullptr;
      cudaGraphExec_t exec = nullptr;
      MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      CaptureGuard capture_guard(stream);
      launch();
      capture_guard.release();
      MG_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
      MG_CUDA_CHECK(cudaGraphInstantiate(&exec, captured, 0));
      MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      MG_CUDA_CHECK(cudaMemsetAsync(out_->as<void>(), 0xff, out_bytes_, stream));
      MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      MG_CUDA_CHECK(cudaStreamSynchronize(stream));
      MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
      MG_CUDA_CHECK(cudaGraphDestroy(captured));
    } else {
      launch();
    }
    MG_CUDA_CHECK(cudaStreamSynchronize(stream));
    MG_CUDA_CHECK(cudaStreamDestroy(stream));
    std::vector<unsigned> left(static_cast<size_t>(counter_count));
    counters.download(left.data(), left.size() * sizeof(unsigned));
    EXPECT_EQ(std::count(left.begin(), left.end(), 0u), counter_count)
        << "split counters not reset by the launch";
    // Every position of every sequence in the cache (the rows' own written, nothing else).
    std::vector<uint8_t> k_after(k_full_.nbytes()), v_after(v_full_.nbytes());
    k_cache_->download(k_after.data(), k_after.size());
    v_cache_->download(v_after.data(), v_after.size());
    EXPECT_EQ(std::memcmp(k_after.data(), k_full_.raw(), k_after.size()), 0)
        << "K cache differs from what kv_cache_write writes";
    EXPECT_EQ(std::memcmp(v_after.data(), v_full_.raw(), v_after.size()), 0)
        << "V cache differs from what kv_cache_write writes";
    Tensor host = Tensor::empty_cpu(dtype_, {tokens_, case_.heads * dims_.v_head_dim});
    out_->download(host.raw(), out_bytes_);
    const Tensor f32 = to_f32_cpu(host);
    return std::vector<float>(f32.data<float>(), f32.data<float>() + f32.numel());
  }

  // `a` launched on `stream` with the rows' K and V given as `write` says.
  void launch_with_write(cuda::AttentionArgs a, KvWrite write, cudaStream_t stream) const {
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      switch (write) {
        case KvWrite::kNone:
          break;
        case KvWrite::kFused:
          a.k = k_new_->as<void>();
          a.v = v_new_->as<void>();
          break;
        case KvWrite::kSeparate: {
          cuda::KvCacheWriteArgs w;
          w.k = k_new_->as<void>();
          w.v = v_new_->as<void>();
          w.positions = a.positions;
          w.k_cache = a.k_cache;
          w.v_cache = a.v_cache;
          w.tokens = a.tokens;
          w.max_seq_len = a.max_seq_len;
          w.kv = a.kv;
          cuda::launch_kv_cache_write<T>(dims_, w, stream);
          break;
        }
      }
      cuda::launch_attention<T>(dims_, a, stream);
    });
  }

  // The rows of real sequences (the invalid-block and out-of-range rows, last, are apart).
  std::span<const float> sequence_rows(const std::vector<float>& out) const {
    const int64_t seqs = static_cast<int64_t>(case_.contexts.size());
    return std::span<const float>(out).first(
        static_cast<size_t>(seqs * case_.chunk_rows * case_.heads * dims_.v_head_dim));
  }
  std::span<const float> reference() const { return sequence_rows(reference_); }

  // Every element of the out-of-range row (if any) is NaN.
  void expect_nan_row(const std::vector<float>& out) const {
    if (!case_.out_of_range_row) return;
    const size_t width = static_cast<size_t>(case_.heads * dims_.v_head_dim);
    for (size_t i = out.size() - width; i < out.size(); ++i) {
      ASSERT_TRUE(std::isnan(out[i])) << "element " << i << " of the out-of-range row";
    }
  }

  const AttentionDims& dims() const { return dims_; }
  int64_t tokens() const { return tokens_; }
  int64_t max_positions() const { return max_positions_; }

 private:
  DecodeCase case_;
  AttentionDims dims_;
  DType dtype_;
  int64_t tokens_ = 0;
  int64_t max_positions_ = 0;
  int64_t max_blocks_ = 0;
  int64_t num_blocks_ = 0;
  Tensor sinks_;
  std::vector<float> reference_;
  size_t out_bytes_ = 0;
  Tensor k_full_, v_full_, k_stale_, v_stale_;  // host caches in the dtype: after, before a write
  std::unique_ptr<DeviceBuffer> q_, k_cache_, v_cache_, k_new_, v_new_, positions_, sinks_device_,
      tables_, slots_, out_;
};

TEST(CudaAttentionDecode, SplitKvMatchesReferenceAndPerQueryKernel) {
  MG_REQUIRE_GPU();
  uint32_t seed = 3100;
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const DecodeCase& c : decode_cases()) {
      SCOPED_TRACE(testing::dtype_trace(d) + " " + c.name);
      seed += 50;
      const DecodeProblem problem(c, d.dtype, seed);
      ASSERT_TRUE(cuda::split_kv_supports(problem.dims(), dtype_size(d.dtype)));
      // The auto rule takes split-KV for these decode rows given the planned workspace.
      EXPECT_TRUE(cuda::split_kv_chosen(
          problem.dims(), dtype_size(d.dtype), problem.tokens(), problem.max_positions(),
          device_sm_count(),
          cuda::split_kv_workspace_bound(problem.dims(), dtype_size(d.dtype), problem.tokens(),
                                         device_sm_count())));

      const std::vector<float> per_query = problem.run(cuda::AttentionPath::kPerQuery, 0);
      EXPECT_LT(testing::normalized_error(problem.sequence_rows(per_query), problem.reference()),
                d.tolerance);
      problem.expect_nan_row(per_query);
      for (int64_t splits : {int64_t{0}, int64_t{1}, int64_t{3}, cuda::kSplitKvMaxSplits}) {
        SCOPED_TRACE(fmt::format("splits {} (0: the rule)", splits));
        const std::vector<float> split = problem.run(cuda::AttentionPath::kSplitKv, splits);
        EXPECT_LT(testing::normalized_error(problem.sequence_rows(split), problem.reference()),
                  d.tolerance);
        EXPECT_LT(testing::normalized_error(problem.sequence_rows(split),
                                            problem.sequence_rows(per_query)),
                  d.tolerance);
        problem.expect_nan_row(split);
      }
      // Forced tiles: 8 keys (32 lanes per key, many tiles through both stages), 64 (4 lanes)
      // and 128 (2 lanes: the score sum's transposed butterfly runs out of offsets with heads
      // still held), where two stages of them fit in shared memory. 20 splits: 17 to 32 keys a
      // split at 513 keys, so a block shrinks the launch's tile to 32 (8 lanes a key).
      for (int64_t tile : {int64_t{8}, int64_t{64}, int64_t{128}}) {
        if (cuda::split_kv_shared_bytes(problem.dims(), dtype_size(d.dtype), tile) >
            cuda::kSplitKvMaxSharedBytes) {
          continue;
        }
        for (int64_t splits : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{20}}) {
          SCOPED_TRACE(fmt::format("tile {} splits {}", tile, splits));
          const std::vector<float> split =
              problem.run(cuda::AttentionPath::kSplitKv, splits, /*graph=*/false, tile);
          EXPECT_LT(testing::normalized_error(problem.sequence_rows(split), problem.reference()),
                    d.tolerance);
          problem.expect_nan_row(split);
        }
      }
      // The auto path with its workspace is the split path, bit for bit (NaN rows included).
      const std::vector<float> chosen = problem.run(cuda::AttentionPath::kAuto, 0);
      const std::vector<float> forced = problem.run(cuda::AttentionPath::kSplitKv, 0);
      ASSERT_EQ(chosen.size(), forced.size());
      EXPECT_EQ(std::memcmp(chosen.data(), forced.data(), chosen.size() * sizeof(float)), 0);
    }
  }
}

TEST(CudaAttentionDecode, SplitKvReplaysInACudaGraph) {
  MG_REQUIRE_GPU();
  const DecodeCase c = decode_cases()[4];  // paged, four sequences, one row out of range
  const DecodeProblem problem(c, DType::kBF16, 4100);
  const std::vector<float> direct = problem.run(cuda::AttentionPath::kSplitKv, 0);
  const std::vector<float> replayed = problem.run(cuda::AttentionPath::kSplitKv, 0, /*graph=*/true);
  EXPECT_LT(testing::normalized_error(problem.sequence_rows(replayed), problem.reference()), 1e-2);
  EXPECT_EQ(
      testing::normalized_error(problem.sequence_rows(replayed), problem.sequence_rows(direct)),
      0.0);
  problem.expect_nan_row(replayed);
}

// Whether launch_attention would fuse the KV-cache write for `problem`'s rows under the auto rule
// with the op's planned workspace (host only: the pointers are stand-ins, 16-byte aligned).
bool auto_rule_fuses_write(const DecodeProblem& problem, DType dtype) {
  cuda::AttentionArgs a = problem.args(cuda::AttentionPath::kAuto, 0);
  const auto stand_in = reinterpret_cast<void*>(uintptr_t{1} << 20);
  a.k = stand_in;
  a.v = stand_in;
  a.workspace = stand_in;
  a.workspace_bytes = cuda::split_kv_workspace_bound(problem.dims(), dtype_size(dtype),
                                                     problem.tokens(), device_sm_count());
  a.split_counters = static_cast<unsigned*>(stand_in);
  a.split_counter_count = cuda::split_kv_counter_count(problem.dims(), problem.tokens());
  return cuda::attention_fuses_kv_write(problem.dims(), dtype_size(dtype), a);
}

// The split kernel writing the KV cache itself: the same output as the reference and, bit for
// bit, as the two launches of before (kv_cache_write, then the split kernel reading the cache),
// at the rule's split count and forced ones and small tiles; the cache afterwards equals what
// kv_cache_write writes (run() compares the bytes; the rows start stale); the per-query path
// given the rows (a separate write launch) agrees.
TEST(CudaAttentionDecode, FusedKvWriteMatchesReferenceAndTheSeparateWrite) {
  MG_REQUIRE_GPU();
  uint32_t seed = 7100;
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const DecodeCase& c : fused_write_cases()) {
      SCOPED_TRACE(testing::dtype_trace(d) + " " + c.name);
      seed += 50;
      const DecodeProblem problem(c, d.dtype, seed);
      EXPECT_TRUE(auto_rule_fuses_write(problem, d.dtype));

      const std::vector<float> fused =
          problem.run(cuda::AttentionPath::kAuto, 0, false, 0, KvWrite::kFused);
      EXPECT_LT(testing::normalized_error(problem.sequence_rows(fused), problem.reference()),
                d.tolerance);
      problem.expect_nan_row(fused);
      const std::vector<float> separate =
          problem.run(cuda::AttentionPath::kSplitKv, 0, false, 0, KvWrite::kSeparate);
      ASSERT_EQ(fused.size(), separate.size());
      EXPECT_EQ(std::memcmp(fused.data(), separate.data(), fused.size() * sizeof(float)), 0)
          << "the fused write changed the split kernel's output";
      for (int64_t splits : {int64_t{1}, int64_t{3}, cuda::kSplitKvMaxSplits}) {
        for (int64_t tile : {int64_t{0}, int64_t{8}}) {
          SCOPED_TRACE(fmt::format("splits {} tile {} (0: the rule)", splits, tile));
          const std::vector<float> forced =
              problem.run(cuda::AttentionPath::kSplitKv, splits, false, tile, KvWrite::kFused);
          EXPECT_LT(testing::normalized_error(problem.sequence_rows(forced), problem.reference()),
                    d.tolerance);
          problem.expect_nan_row(forced);
        }
      }
      const std::vector<float> per_query =
          problem.run(cuda::AttentionPath::kPerQuery, 0, false, 0, KvWrite::kFused);
      EXPECT_LT(testing::normalized_error(problem.sequence_rows(per_query), problem.reference()),
                d.tolerance);
      problem.expect_nan_row(per_query);
    }
  }
}

TEST(CudaAttentionDecode, FusedKvWriteReplaysInACudaGraph) {
  MG_REQUIRE_GPU();
  for (const size_t index : {size_t{1}, size_t{8}}) {  // one row; 4 paged sequences of 4 rows
    const DecodeCase c = fused_write_cases()[index];
    SCOPED_TRACE(c.name);
    const DecodeProblem problem(c, DType::kBF16, 7400);
    const std::vector<float> direct =
        problem.run(cuda::AttentionPath::kAuto, 0, false, 0, KvWrite::kFused);
    // Replayed twice: the second replay finds the rows already written and must not read them.
    const std::vector<float> replayed =
        problem.run(cuda::AttentionPath::kAuto, 0, /*graph=*/true, 0, KvWrite::kFused);
    EXPECT_LT(testing::normalized_error(problem.sequence_rows(replayed), problem.reference()),
              1e-2);
    ASSERT_EQ(direct.size(), replayed.size());
    EXPECT_EQ(std::memcmp(direct.data(), replayed.data(), direct.size() * sizeof(float)), 0);
  }
}

// kv_cache_write_kernel's skips, kept by the fused write: a row whose block table has no block
// at its position and a row outside the cache write nothing (run() compares the whole cache),
// and the other rows are still right.
TEST(CudaAttentionDecode, FusedKvWriteSkipsInvalidBlocksAndPositions) {
  MG_REQUIRE_GPU();
  const DecodeCase c{.name = "invalid block",
                     .heads = 32,
                     .kv_heads = 4,
                     .head_dim = 128,
                     .contexts = {1, 513, 40},
                     .block_size = 16,
                     .out_of_range_row = true,
                     .chunk_rows = 1,
                     .invalid_block_row = true};
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    SCOPED_TRACE(testing::dtype_trace(d));
    const DecodeProblem problem(c, d.dtype, 7500);
    EXPECT_TRUE(auto_rule_fuses_write(problem, d.dtype));
    const std::vector<float> out =
        problem.run(cuda::AttentionPath::kAuto, 0, false, 0, KvWrite::kFused);
    EXPECT_LT(testing::normalized_error(problem.sequence_rows(out), problem.reference()),
              d.tolerance);
    problem.expect_nan_row(out);
  }
}

TEST(CudaAttentionDecode, HeadSizesWithoutWholeVectorsKeepThePerQueryKernel) {
  MG_REQUIRE_GPU();
  // 12 BF16 elements are 24 bytes: not whole 16-byte vectors, so the auto rule keeps the
  // per-query kernel (and its result is still right with a workspace given).
  const DecodeCase c{
      .name = "head12", .heads = 4, .kv_heads = 2, .head_dim = 12, .contexts = {513}};
  const DecodeProblem problem(c, DType::kBF16, 4200);
  EXPECT_FALSE(cuda::split_kv_supports(problem.dims(), dtype_size(DType::kBF16)));
  EXPECT_TRUE(cuda::split_kv_supports(problem.dims(), dtype_size(DType::kF32)));
  EXPECT_EQ(cuda::split_kv_workspace_bound(problem.dims(), dtype_size(DType::kBF16), 64, 132), 0u);
  const std::vector<float> out = problem.run(cuda::AttentionPath::kAuto, 0);
  EXPECT_LT(testing::normalized_error(problem.sequence_rows(out), problem.reference()), 1e-2);
}

// Median µs per launch of `path` over 48 launches (a 48-layer decode step) captured in one CUDA
// graph, each launch on the next of `copies` (distinct caches, so that long contexts come from
// HBM rather than the L2).
double time_path(const std::vector<std::unique_ptr<DecodeProblem>>& copies, DType dtype,
                 cuda::AttentionPath path, int64_t splits = 0, int64_t tile_keys = 0,
                 KvWrite write = KvWrite::kNone) {
  constexpr int kLaunches = 48, kReplays = 15;
  const DecodeProblem& first = *copies.front();
  // The planned bound covers the rule's split counts; a forced count can take more.
  const size_t ws_bytes =
      std::max(cuda::split_kv_workspace_bound(first.dims(), dtype_size(dtype), first.tokens(),
                                              device_sm_count()),
               cuda::split_kv_workspace_bytes(first.dims(), first.tokens(),
                                              std::min(splits, cuda::kSplitKvMaxSplits)));
  DeviceBuffer workspace(ws_bytes);
  const int64_t counter_count = cuda::split_kv_counter_count(first.dims(), first.tokens());
  DeviceBuffer counters(static_cast<size_t>(counter_count) * sizeof(unsigned));
  testing::memset_device_now(counters.as<void>(), 0, static_cast<size_t>(counter_count) * 4);
  cudaStream_t stream = nullptr;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CaptureGuard capture_guard(stream);
  for (int i = 0; i < kLaunches; ++i) {
    cuda::AttentionArgs a = copies[static_cast<size_t>(i) % copies.size()]->args(path, 0);
    a.workspace = workspace.as<void>();
    a.workspace_bytes = ws_bytes;
    a.split_counters = counters.as<unsigned>();
    a.split_counter_count = counter_count;
    a.splits = splits;
    a.tile_keys = tile_keys;
    copies[static_cast<size_t>(i) % copies.size()]->launch_with_write(a, write, stream);
  }
  capture_guard.release();
  MG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = testing::median_graph_replay_ms(exec, stream, kReplays);
  MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MG_CUDA_CHECK(cudaGraphDestroy(graph));
  MG_CUDA_CHECK(cudaStreamDestroy(stream));
  return 1000.0 * ms / kLaunches;
}

// The decode attention of the Qwen3-30B-A3B shape (BF16) through both paths, printed (µs per
// layer, graph-replayed): one sequence at 512 and 4096 keys, 16 sequences of 512 keys paged;
// and the split path with the step's KV-cache write, as two launches and fused into one.
// The split path must beat the per-query kernel where it is meant to: one sequence.
TEST(CudaAttentionDecode, TimesBothPathsOnTheQwen3Shape) {
  MG_REQUIRE_GPU();
  struct Shape {
    std::string name;
    std::vector<int64_t> contexts;
    int64_t block_size;
    bool split_must_win;
  };
  const std::vector<Shape> shapes = {
      {"1 seq x 512 keys", {512}, 0, true},
      {"1 seq x 4096 keys", {4096}, 0, true},
      {"16 seqs x 512 keys (paged)", std::vector<int64_t>(16, 512), 16, false}};
  for (const Shape& shape : shapes) {
    const DecodeCase c{.name = shape.name,
                       .heads = 32,
                       .kv_heads = 4,
                       .head_dim = 128,
                       .contexts = shape.contexts,
                       .block_size = shape.block_size};
    // Enough distinct caches to pass ~100 MB per replay (more than the H100's 50 MB L2).
    const int64_t keys = std::accumulate(shape.contexts.begin(), shape.contexts.end(), int64_t{0});
    const int64_t cache_bytes = keys * 4 * 128 * 2 * 2;
    const int64_t count = std::clamp<int64_t>((int64_t{100} << 20) / cache_bytes + 1, 1, 48);
    std::vector<std::unique_ptr<DecodeProblem>> copies;
    for (int64_t i = 0; i < count; ++i) {
      copies.push_back(
          std::make_unique<DecodeProblem>(c, DType::kBF16, 5000 + static_cast<uint32_t>(i)));
    }
    const double per_query = time_path(copies, DType::kBF16, cuda::AttentionPath::kPerQuery);
    const double split = time_path(copies, DType::kBF16, cuda::AttentionPath::kSplitKv);
    const DecodeProblem& first = *copies.front();
    std::cout
        << fmt::format(
               "[ TIMING ] attention decode {}: per-query {:.1f} us, split-KV {:.1f} us (rule: "
               "{} splits, tiles of {} keys)",
               shape.name, per_query, split,
               cuda::split_kv_splits(first.dims(), first.tokens(), first.max_positions(),
                                     device_sm_count()),
               cuda::split_kv_tile_keys(first.dims(), 2))
        << std::endl;
    EXPECT_GT(split, 0.0);
    // The KV-cache write of the step's rows: its own kernel before the split kernel (as before
    // the fusion), or inside the split kernel (launch_attention's choice at decode).
    const double separate =
        time_path(copies, DType::kBF16, cuda::AttentionPath::kSplitKv, 0, 0, KvWrite::kSeparate);
    const double fused =
        time_path(copies, DType::kBF16, cuda::AttentionPath::kSplitKv, 0, 0, KvWrite::kFused);
    std::cout << fmt::format(
                     "[ TIMING ] attention decode {} with the KV-cache write: kv_cache_write + "
                     "split-KV (two launches) {:.1f} us, fused (one launch) {:.1f} us",
                     shape.name, separate, fused)
              << std::endl;
    EXPECT_GT(fused, 0.0);
    // Where the time goes: the same launch at forced split counts and tile sizes (the rules'
    // constants are chosen from these lines).
    const std::vector<int64_t> forced_splits = shape.contexts.size() == 1
                                                   ? std::vector<int64_t>{1, 4, 8, 16, 32, 64}
                                                   : std::vector<int64_t>{1, 2, 3, 4, 8};
    for (int64_t tile : {int64_t{16}, int64_t{32}, int64_t{64}}) {
      std::string by_splits;
      for (int64_t forced : forced_splits) {
        by_splits += fmt::format(
            " {}: {:.1f} us", forced,
            time_path(copies, DType::kBF16, cuda::AttentionPath::kSplitKv, forced, tile));
      }
      std::cout << "[ TIMING ] split-KV " << shape.name << ", tiles of " << tile
                << " keys, by forced splits:" << by_splits << std::endl;
    }
    if (shape.split_must_win) {
      EXPECT_LT(split, per_query) << shape.name;
    }
  }
}

#endif  // MG_WITH_CUDA

TEST(CudaAttentionDecode, SplitRuleFillsTheGpuAndBoundsTheWorkspace) {
#ifndef MG_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
#else
  AttentionDims qwen3;
  qwen3.heads = 32;
  qwen3.kv_heads = 4;
  qwen3.head_dim = qwen3.v_head_dim = 128;
  // One sequence on 132 SMs: 4 KV heads want 66 splits (two blocks an SM), rounded down to
  // whole combine batches; on 60 SMs 30, rounded down to 16.
  EXPECT_EQ(cuda::split_kv_splits(qwen3, 1, 40960, 132), 64);
  EXPECT_EQ(cuda::split_kv_splits(qwen3, 1, 40960, 60), 16);
  // 16 sequences: 64 block rows, 4 splits (256 blocks: one wave of two an SM).
  EXPECT_EQ(cuda::split_kv_splits(qwen3, 16, 40960, 132), 4);
  // Short caches are not split below kSplitKvMinKeys keys (16: 7 splits; written in terms of
  // the constant so that retuning it is one line).
  const auto splits_of_keys = [](int64_t keys) {
    return (keys + cuda::kSplitKvMinKeys - 1) / cuda::kSplitKvMinKeys;
  };
  EXPECT_EQ(cuda::split_kv_splits(qwen3, 1, 100, 132), splits_of_keys(100));
  EXPECT_EQ(cuda::split_kv_splits(qwen3, 1, 1, 132), 1);
  // A sliding window bounds the keys like a short cache.
  AttentionDims windowed = qwen3;
  windowed.sliding_window = 32;
  EXPECT_EQ(cuda::split_kv_splits(windowed, 1, 40960, 132), splits_of_keys(32));
  // 32 sequences × 4 KV heads already make 128 block rows: 2 splits for two blocks an SM.
  EXPECT_EQ(cuda::split_kv_splits(qwen3, 32, 40960, 132), 2);
  // More SMs than one wave can use: at most kSplitKvMaxSplits.
  EXPECT_EQ(cuda::split_kv_splits(qwen3, 1, 40960, 1000), cuda::kSplitKvMaxSplits);
  // Tiles: kSplitKvTileKeys keys for BF16 rows of 128 (two stages of K and V: 64 KB); halved
  // until F32 rows of 512 fit the shared-memory budget (8 keys).
  EXPECT_EQ(cuda::split_kv_tile_keys(qwen3, 2), cuda::kSplitKvTileKeys);
  EXPECT_EQ(cuda::split_kv_shared_bytes(qwen3, 2, 32),
            2 * 32 * 256 * 2 + 8 * (128 + 32) * 4 + 2 * 32 * 8);
  AttentionDims widest = qwen3;
  widest.head_dim = widest.v_head_dim = cuda::kAttentionMaxHeadDim;
  EXPECT_EQ(cuda::split_kv_tile_keys(widest, 4), cuda::kSplitKvMinTileKeys);
  EXPECT_LE(cuda::split_kv_shared_bytes(widest, 4, cuda::kSplitKvMinTileKeys),
            cuda::kSplitKvMaxSharedBytes);
  // Counters: one per (row, KV head, head tile); heads per block round up to a power of two.
  EXPECT_EQ(cuda::split_kv_counter_count(qwen3, 3), 12);
  AttentionDims gqa6 = qwen3;
  gqa6.heads = 24;
  EXPECT_EQ(cuda::split_kv_block_heads(gqa6), 8);
  gqa6.heads = 12;
  EXPECT_EQ(cuda::split_kv_block_heads(gqa6), 4);
  // The workspace bound covers every launch the auto rule makes up to the planned rows.
  const size_t bound = cuda::split_kv_workspace_bound(qwen3, 2, 64, 132);
  for (int64_t tokens = 1; tokens <= 64; ++tokens) {
    for (int64_t keys : {int64_t{1}, int64_t{513}, int64_t{1} << 20}) {
      EXPECT_TRUE(cuda::split_kv_chosen(qwen3, 2, tokens, keys, 132, bound)) << tokens;
    }
  }
  EXPECT_FALSE(cuda::split_kv_chosen(qwen3, 2, 65, 513, 132, bound));
  // Paged batches the flash kernel declines take it up to kSplitKvPagedMaxTokens rows, within
  // the bound planned for that many; never a contiguous cache beyond kSplitKvMaxTokens.
  const size_t paged_bound =
      cuda::split_kv_workspace_bound(qwen3, 2, cuda::kSplitKvPagedMaxTokens, 132);
  for (const int64_t tokens :
       {int64_t{65}, int64_t{128}, int64_t{333}, cuda::kSplitKvPagedMaxTokens}) {
    EXPECT_TRUE(cuda::split_kv_chosen_for_paged_batch(qwen3, 2, tokens, /*paged=*/true, 4096, 132,
                                                      paged_bound))
        << tokens;
    EXPECT_FALSE(cuda::split_kv_chosen_for_paged_batch(qwen3, 2, tokens, /*paged=*/false, 4096, 132,
                                                       paged_bound))
        << tokens;
    EXPECT_EQ(cuda::split_kv_splits(qwen3, tokens, 4096, 132), 1) << tokens;
  }
  EXPECT_FALSE(cuda::split_kv_chosen_for_paged_batch(qwen3, 2, cuda::kSplitKvPagedMaxTokens + 1,
                                                     /*paged=*/true, 4096, 132, SIZE_MAX));
  // The workspace: one split's partials for every row and head (rows beyond 64 take one split).
  EXPECT_EQ(paged_bound, cuda::split_kv_workspace_bytes(qwen3, cuda::kSplitKvPagedMaxTokens, 1));
  // Group slices: 16 query heads per KV head are two blocks of 8.
  AttentionDims wide_group = qwen3;
  wide_group.kv_heads = 2;
  EXPECT_EQ(cuda::split_kv_head_tiles(wide_group), 2);
#endif
}

// When launch_attention writes the KV cache inside the split kernel (host only; the pointers are
// stand-ins): decode-sized calls given k and v; not beyond 64 rows (a paged batch of more decode
// rows takes the split kernel after its own write launch), not with rows that are not 16-byte
// aligned, not on the other paths (they launch kv_cache_write first).
TEST(CudaAttentionDecode, FusedWriteRuleTakesDecodeCallsOnly) {
#ifndef MG_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
#else
  AttentionDims qwen3;
  qwen3.heads = 32;
  qwen3.kv_heads = 4;
  qwen3.head_dim = qwen3.v_head_dim = 128;
  const auto base = reinterpret_cast<char*>(uintptr_t{1} << 20);
  cuda::AttentionArgs a;
  a.q = a.k = a.v = a.k_cache = a.v_cache = a.out = a.workspace = base;
  a.positions = reinterpret_cast<const int32_t*>(base);
  a.split_counters = reinterpret_cast<unsigned*>(base);
  a.split_counter_count = cuda::split_kv_counter_count(qwen3, cuda::kSplitKvPagedMaxTokens);
  a.workspace_bytes = cuda::split_kv_workspace_bound(qwen3, 2, cuda::kSplitKvPagedMaxTokens, 132);
  a.sm_count = 132;
  a.max_seq_len = 4096;
  for (const int64_t tokens : {int64_t{1}, int64_t{16}, cuda::kSplitKvFusedWriteMaxTokens}) {
    a.tokens = tokens;
    EXPECT_EQ(cuda::attention_path_taken(qwen3, 2, a), cuda::AttentionPath::kSplitKv) << tokens;
    EXPECT_TRUE(cuda::attention_fuses_kv_write(qwen3, 2, a)) << tokens;
  }
  cuda::AttentionArgs more = a;
  more.tokens = cuda::kSplitKvMaxTokens + 1;  // the auto rule's prefill: flash, its own write
  EXPECT_EQ(cuda::attention_path_taken(qwen3, 2, more), cuda::AttentionPath::kFlashPrefill);
  EXPECT_FALSE(cuda::attention_fuses_kv_write(qwen3, 2, more));
  more.path = cuda::AttentionPath::kSplitKv;  // forced: split, but the write stays apart
  EXPECT_FALSE(cuda::attention_fuses_kv_write(qwen3, 2, more));
  // 128 decode rows of 128 paged sequences (flash declines: 128 passes in 2 tiles): split-KV
  // after the write launch; with a row more than kSplitKvPagedMaxTokens, per query.
  cuda::AttentionArgs decode_rows = a;
  decode_rows.tokens = 128;
  decode_rows.kv.block_tables = reinterpret_cast<const int32_t*>(base);
  decode_rows.kv.row_slots = reinterpret_cast<const int32_t*>(base);
  decode_rows.kv.block_size = 16;
  decode_rows.kv.max_blocks_per_seq = 256;
  decode_rows.kv.num_blocks = 4096;
  decode_rows.kv.flash_passes = 128;
  EXPECT_EQ(cuda::attention_path_taken(qwen3, 2, decode_rows), cuda::AttentionPath::kSplitKv);
  EXPECT_FALSE(cuda::attention_fuses_kv_write(qwen3, 2, decode_rows));
  decode_rows.tokens = cuda::kSplitKvPagedMaxTokens + 1;
  decode_rows.kv.flash_passes = decode_rows.tokens;
  EXPECT_EQ(cuda::attention_path_taken(qwen3, 2, decode_rows), cuda::AttentionPath::kPerQuery);
  // A paged batch of prompt chunks (a pass a tile) stays with the flash kernel.
  decode_rows.tokens = 128;
  decode_rows.kv.flash_passes = 2;
  EXPECT_EQ(cuda::attention_path_taken(qwen3, 2, decode_rows), cuda::AttentionPath::kFlashPrefill);
  cuda::AttentionArgs unwritten = a;
  unwritten.k = unwritten.v = nullptr;
  EXPECT_FALSE(cuda::attention_fuses_kv_write(qwen3, 2, unwritten));
  cuda::AttentionArgs odd_v = a;
  odd_v.v = base + 8;  // not 16-byte aligned: the split kernel still runs, after a write launch
  EXPECT_EQ(cuda::attention_path_taken(qwen3, 2, odd_v), cuda::AttentionPath::kSplitKv);
  EXPECT_FALSE(cuda::attention_fuses_kv_write(qwen3, 2, odd_v));
  cuda::AttentionArgs per_query = a;
  per_query.path = cuda::AttentionPath::kPerQuery;
  EXPECT_FALSE(cuda::attention_fuses_kv_write(qwen3, 2, per_query));
  cuda::AttentionArgs no_workspace = a;
  no_workspace.workspace = nullptr;
  EXPECT_NE(cuda::attention_path_taken(qwen3, 2, no_workspace), cuda::AttentionPath::kSplitKv);
  EXPECT_FALSE(cuda::attention_fuses_kv_write(qwen3, 2, no_workspace));
#endif
}

}  // namespace
}  // namespace mg
