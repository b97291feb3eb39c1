// The flash prefill attention path (ops/nn/attention/attention_flash_cuda.cuh), called through
// launch_attention with the path forced, against the fp64 reference (attention_reference) and the
// per-query kernel on the same inputs: 1, 17, 64, 65, 127, 300 and 1000 query rows (tails of the
// 64-row query tiles and 64-key tiles), prompts from position 0 and chunks after cached keys (300
// rows after 700 keys), head dims 64 and 128, GQA 1, 4 and 8, sliding window, chunks, sinks, an
// explicit scale, rows in reverse position order, paged caches with several sequences in one
// batch (prompt chunks and decode rows mixed, as the Engine's steps, described to the auto rule
// as the Session describes them: KvBatch::flash_passes) and a row whose position lies
// outside the cache (NaN row), BF16 and F16; every output element must be written (poisoned first).
// Also: the auto rule takes the flash kernel for prefill rows and for paged batches of mostly one
// sequence per 64-row tile (two prompt chunks and a few decode rows), keeps the per-query kernel
// for decode-heavy paged batches, the rule's reasons for what it does not take (host only) and
// MG_FLASH_PREFILL=0 turning it off, a CUDA-graph replay, and (MG_ATTN_TIMING=1) the Qwen3-30B-A3B
// prefill shape timed through both kernels with its FLOP rate, contiguous and paged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <span>
#include <utility>

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

struct PrefillCase {
  std::string name;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t cached = 0;  // keys already in the cache before the call's rows
  int64_t rows = 0;    // query rows at positions cached .. cached + rows - 1
  int64_t sliding_window = 0, chunk_size = 0;
  bool sinks = false;
  float scale = 0.0f;             // 0: 1/sqrt(head_dim)
  bool reversed = false;          // rows in descending position order
  bool out_of_range_row = false;  // one more row at the first position outside the cache
  // Paged (block_size > 0): these sequences, each {cached, rows}, their rows one after another
  // in the batch (cached and rows above are then unused); blocks handed out shuffled, sequence i
  // in slot count - 1 - i.
  int64_t block_size = 0;
  std::vector<std::pair<int64_t, int64_t>> paged = {};
  // Paged: the auto rule takes the flash kernel (its passes per tile, count_flash_passes, are
  // within kFlashPagedMaxPassesPerTile); contiguous caches always do.
  bool paged_auto_flash = false;
  // Paged: the auto rule runs the batch as two launches by kind of row (its leading decode rows on
  // split-KV, the chunks after them on flash: attention_takes_row_kinds).
  bool paged_row_kinds = false;
};

// The case's sequences as {cached, rows}.
std::vector<std::pair<int64_t, int64_t>> sequences_of(const PrefillCase& c) {
  if (c.block_size > 0) return c.paged;
  return {{c.cached, c.rows}};
}

std::vector<PrefillCase> prefill_cases() {
  std::vector<PrefillCase> out;
  // Row counts around the 64-row query tile and 64-key tile, from position 0.
  for (int64_t rows : {1, 17, 64, 65, 127, 300}) {
    out.push_back({.name = fmt::format("gqa8_d128_rows{}", rows),
                   .heads = 8,
                   .kv_heads = 1,
                   .head_dim = 128,
                   .rows = rows});
  }
  out.push_back(
      {.name = "gqa4_d64_rows1000", .heads = 4, .kv_heads = 1, .head_dim = 64, .rows = 1000});
  // A prompt chunk after earlier chunks: queries at 700..999 see keys 0..p.
  out.push_back({.name = "gqa8_d128_300_after_700",
                 .heads = 8,
                 .kv_heads = 1,
                 .head_dim = 128,
                 .cached = 700,
                 .rows = 300});
  out.push_back({.name = "mha_d64_17_after_100_out_of_range",
                 .heads = 4,
                 .kv_heads = 4,
                 .head_dim = 64,
                 .cached = 100,
                 .rows = 17,
                 .out_of_range_row = true});
  out.push_back({.name = "gqa4_d128_window100_sinks",
                 .heads = 8,
                 .kv_heads = 2,
                 .head_dim = 128,
                 .rows = 300,
                 .sliding_window = 100,
                 .sinks = true});
  out.push_back({.name = "gqa4_d64_window37_after_65",
                 .heads = 4,
                 .kv_heads = 1,
                 .head_dim = 64,
                 .cached = 65,
                 .rows = 127,
                 .sliding_window = 37});
  out.push_back({.name = "gqa8_d128_chunk96_after_50",
                 .heads = 8,
                 .kv_heads = 1,
                 .head_dim = 128,
                 .cached = 50,
                 .rows = 300,
                 .chunk_size = 96});
  out.push_back({.name = "gqa1_d64_scale_sinks_reversed",
                 .heads = 2,
                 .kv_heads = 2,
                 .head_dim = 64,
                 .cached = 10,
                 .rows = 130,
                 .sinks = true,
                 .scale = 0.3f,
                 .reversed = true});
  // Paged: a prompt chunk after cached keys, a whole prompt, decode rows and a short chunk of
  // other sequences in one batch (the Engine's mixed steps), so that 64-row tiles span several
  // sequences (one pass per sequence) and one sequence's rows span several tiles.
  out.push_back({.name = "paged16_gqa8_d128_mixed",
                 .heads = 8,
                 .kv_heads = 1,
                 .head_dim = 128,
                 .out_of_range_row = true,
                 .block_size = 16,
                 .paged = {{700, 90}, {0, 130}, {40, 1}, {300, 1}, {5, 17}},
                 .paged_auto_flash = true});  // tiles of 1, 2, 1 and 4 slots: 8 passes
  out.push_back({.name = "paged32_gqa4_d64_window50_sinks",
                 .heads = 4,
                 .kv_heads = 1,
                 .head_dim = 64,
                 .sliding_window = 50,
                 .sinks = true,
                 .block_size = 32,
                 .paged = {{0, 100}, {129, 70}},
                 .paged_auto_flash = true});  // 4 passes in 3 tiles
  // The Engine's order: decode rows first, then two prompt chunks (one after cached keys): tiles
  // of 5, 1, 1, 2, 1, 1 slots, 11 passes in 6 tiles: the auto rule takes flash.
  out.push_back({.name = "paged16_gqa8_d128_4_decode_2_chunks",
                 .heads = 8,
                 .kv_heads = 1,
                 .head_dim = 128,
                 .block_size = 16,
                 .paged = {{40, 1}, {90, 1}, {130, 1}, {200, 1}, {300, 200}, {0, 150}},
                 .paged_auto_flash = true,
                 .paged_row_kinds = true});
  // Two decode rows of long contexts before one chunk (3 tiles): the decode rows on split-KV, the
  // chunk on flash; a row outside the cache after the chunk.
  out.push_back({.name = "paged16_gqa8_d128_2_long_decode_1_chunk",
                 .heads = 8,
                 .kv_heads = 1,
                 .head_dim = 128,
                 .out_of_range_row = true,
                 .block_size = 16,
                 .paged = {{900, 1}, {1500, 1}, {20, 130}},
                 .paged_auto_flash = true,
                 .paged_row_kinds = true});
  // 70 decode rows of 70 sequences (beyond split-KV's 64 rows of any batch): 70 passes in 2
  // tiles, which flash declines: the paged batch's split-KV.
  PrefillCase decode{.name = "paged16_gqa4_d64_70_decode",
                     .heads = 4,
                     .kv_heads = 1,
                     .head_dim = 64,
                     .block_size = 16};
  for (int64_t i = 0; i < 70; ++i) decode.paged.push_back({20 + (7 * i) % 300, 1});
  out.push_back(decode);
  return out;
}

proto::AttentionParams params_of(const PrefillCase& c) {
  proto::AttentionParams p;
  p.set_num_heads(c.heads);
  p.set_num_kv_heads(c.kv_heads);
  p.set_head_dim(c.head_dim);
  if (c.scale != 0.0f) p.set_scale(c.scale);
  p.set_sliding_window(c.sliding_window);
  p.set_chunk_size(c.chunk_size);
  p.set_has_sinks(c.sinks);
  return p;
}

AttentionDims dims_of(const PrefillCase& c) {
  AttentionDims d;
  d.heads = c.heads;
  d.kv_heads = c.kv_heads;
  d.head_dim = d.v_head_dim = c.head_dim;
  d.scale = c.scale != 0.0f ? c.scale : static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
  d.sliding_window = c.sliding_window;
  d.chunk_size = c.chunk_size;
  return d;
}

// One case's inputs in one dtype: the sequence's keys and values in a contiguous device cache
// (5 zero rows past the sequence), the query rows and (if asked) the fp64 reference.
class PrefillProblem {
 public:
  PrefillProblem(const PrefillCase& c, DType dtype, uint32_t seed, bool with_reference = true)
      : case_(c), dims_(dims_of(c)), dtype_(dtype) {
    const std::vector<std::pair<int64_t, int64_t>> seqs = sequences_of(c);
    const int64_t count = static_cast<int64_t>(seqs.size());
    const int64_t kd = c.kv_heads * c.head_dim;
    const bool paged = c.block_size > 0;
    MG_ASSERT(paged || count == 1, "a contiguous cache holds one sequence");
    int64_t longest = 0;
    rows_ = 0;
    for (const auto& [cached, rows] : seqs) {
      longest = std::max(longest, cached + rows);
      rows_ += rows;
    }
    int64_t cache_rows = longest + 5;  // contiguous: 5 zero rows past the sequence
    std::vector<int32_t> tables;
    if (paged) {
      max_blocks_ = (longest + c.block_size - 1) / c.block_size + 1;
      num_blocks_ = 3;
      for (const auto& [cached, rows] : seqs) {
        num_blocks_ += (cached + rows + c.block_size - 1) / c.block_size;
      }
      cache_rows = num_blocks_ * c.block_size;
      max_positions_ = max_blocks_ * c.block_size;
      std::vector<int32_t> pool(static_cast<size_t>(num_blocks_));
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
      tables.assign(static_cast<size_t>(count * max_blocks_), -1);
      size_t next = 0;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t slot = count - 1 - i;
        const int64_t len =
            seqs[static_cast<size_t>(i)].first + seqs[static_cast<size_t>(i)].second;
        for (int64_t b = 0; b * c.block_size < len; ++b) {
          tables[static_cast<size_t>(slot * max_blocks_ + b)] = pool[next++];
        }
      }
    } else {
      max_positions_ = cache_rows;
    }
    tokens_ = rows_ + (c.out_of_range_row ? 1 : 0);
    const Tensor q = testing::round_through(
        testing::random_tensor({tokens_, c.heads * c.head_dim}, seed, -3.0f, 3.0f), dtype);
    if (c.sinks) {
      sinks_ =
          testing::round_through(testing::random_tensor({c.heads}, seed + 3, -2.0f, 4.0f), dtype);
    }
    Tensor k_cache = Tensor::empty_cpu(DType::kF32, {cache_rows, kd});
    Tensor v_cache = Tensor::empty_cpu(DType::kF32, {cache_rows, kd});
    std::fill_n(k_cache.data<float>(), cache_rows * kd, 0.0f);
    std::fill_n(v_cache.data<float>(), cache_rows * kd, 0.0f);

    std::vector<int32_t> positions;
    std::vector<int32_t> slots;
    const int64_t width = c.heads * c.head_dim;
    if (with_reference) reference_.assign(static_cast<size_t>(rows_ * width), 0.0f);
    int64_t row0 = 0;
    for (int64_t i = 0; i < count; ++i) {
      const auto [cached, rows] = seqs[static_cast<size_t>(i)];
      const int64_t len = cached + rows;
      const uint32_t seq_seed = seed + 10 + 2 * static_cast<uint32_t>(i);
      const Tensor k_seq =
          testing::round_through(testing::random_tensor({len, kd}, seq_seed, -2.0f, 2.0f), dtype);
      const Tensor v_seq =
          testing::round_through(testing::random_tensor({len, kd}, seq_seed + 1), dtype);
      const int64_t slot = count - 1 - i;
      KvBatch host_kv;
      host_kv.block_tables = paged ? tables.data() : nullptr;
      host_kv.max_blocks_per_seq = max_blocks_;
      host_kv.block_size = c.block_size;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t row = kv_cache_row(&host_kv, slot, j);
        std::copy_n(k_seq.data<float>() + j * kd, kd, k_cache.data<float>() + row * kd);
        std::copy_n(v_seq.data<float>() + j * kd, kd, v_cache.data<float>() + row * kd);
      }
      std::vector<int32_t> seq_positions;
      for (int64_t r = 0; r < rows; ++r) {
        seq_positions.push_back(static_cast<int32_t>(c.reversed ? len - 1 - r : cached + r));
        slots.push_back(static_cast<int32_t>(slot));
      }
      positions.insert(positions.end(), seq_positions.begin(), seq_positions.end());
      if (with_reference) {
        attention_reference(params_of(c), q.data<float>() + row0 * width, seq_positions.data(),
                            rows, k_seq.data<float>(), v_seq.data<float>(), len,
                            c.sinks ? sinks_.data<float>() : nullptr,
                            reference_.data() + row0 * width);
      }
      row0 += rows;
    }
    if (c.out_of_range_row) {
      positions.push_back(static_cast<int32_t>(max_positions_));
      slots.push_back(0);
    }
    // The Session's description of the batch (kv_batch.h).
    if (paged) {
      const int64_t rows = static_cast<int64_t>(slots.size());
      flash_passes_ = count_flash_passes(slots.data(), rows);
      decode_rows_ = count_leading_single_rows(slots.data(), rows);
      chunk_flash_passes_ = count_flash_passes(slots.data() + decode_rows_, rows - decode_rows_);
    }

    q_ = upload_as(q, dtype);
    k_cache_ = upload_as(k_cache, dtype);
    v_cache_ = upload_as(v_cache, dtype);
    positions_ = std::make_unique<DeviceBuffer>(positions.size() * sizeof(int32_t));
    positions_->upload(positions.data(), positions.size() * sizeof(int32_t));
    if (c.sinks) sinks_device_ = upload_as(sinks_, dtype);
    if (paged) {
      tables_ = std::make_unique<DeviceBuffer>(tables.size() * sizeof(int32_t));
      tables_->upload(tables.data(), tables.size() * sizeof(int32_t));
      slots_ = std::make_unique<DeviceBuffer>(slots.size() * sizeof(int32_t));
      slots_->upload(slots.data(), slots.size() * sizeof(int32_t));
    }
    out_bytes_ = static_cast<size_t>(tokens_ * width) * dtype_size(dtype);
    out_ = std::make_unique<DeviceBuffer>(out_bytes_);
  }

  // Launch arguments of `path`; the split-KV workspace and counters are attached by run().
  cuda::AttentionArgs args(cuda::AttentionPath path) const {
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
      a.kv.flash_passes = flash_passes_;
      a.kv.decode_rows = decode_rows_;
      a.kv.chunk_flash_passes = chunk_flash_passes_;
    }
    a.sm_count = device_sm_count();
    a.path = path;
    return a;
  }

  // Runs `path` over a NaN-poisoned output (directly, or captured into a CUDA graph and replayed
  // twice with the output poisoned between); returns the output as host floats. The split-KV
  // workspace and counters of the auto rule are given, as the op gives them.
  std::vector<float> run(cuda::AttentionPath path, bool graph = false,
                         bool flash_prefill = true) const {
    cuda::AttentionArgs a = args(path);
    a.flash_prefill = flash_prefill;
    const size_t ws_bytes =
        cuda::split_kv_workspace_bound(dims_, dtype_size(dtype_), tokens_, a.sm_count);
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
    auto launch = [&] {
      cuda::dispatch_float_dtype(
          dtype_, [&](auto tag) { cuda::launch_attention<decltype(tag)>(dims_, a, stream); });
    };
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
    Tensor host = Tensor::empty_cpu(dtype_, {tokens_, case_.heads * case_.head_dim});
    out_->download(host.raw(), out_bytes_);
    const Tensor f32 = to_f32_cpu(host);
    return std::vector<float>(f32.data<float>(), f32.data<float>() + f32.numel());
  }

  // The rows with positions in the cache (the out-of-range row, last, is checked apart).
  std::span<const float> sequence_rows(const std::vector<float>& out) const {
    return std::span<const float>(out).first(
        static_cast<size_t>(rows_ * case_.heads * case_.head_dim));
  }
  std::span<const float> reference() const { return reference_; }

  // No element of the sequence rows is NaN (a poisoned element left unwritten reads as NaN), and
  // every element of the out-of-range row is.
  void expect_written_and_nan_row(const std::vector<float>& out) const {
    const std::span<const float> rows = sequence_rows(out);
    const auto nan = std::find_if(rows.begin(), rows.end(), [](float x) { return std::isnan(x); });
    ASSERT_EQ(nan, rows.end()) << "element " << (nan - rows.begin()) << " not written";
    for (size_t i = rows.size(); i < out.size(); ++i) {
      ASSERT_TRUE(std::isnan(out[i])) << "element " << i << " of the out-of-range row";
    }
  }

  const AttentionDims& dims() const { return dims_; }
  int64_t tokens() const { return tokens_; }
  int64_t flash_passes() const { return flash_passes_; }
  int64_t decode_rows() const { return decode_rows_; }

 private:
  PrefillCase case_;
  AttentionDims dims_;
  DType dtype_;
  int64_t rows_ = 0;    // rows with positions in the cache
  int64_t tokens_ = 0;  // rows_ and the out-of-range row
  int64_t max_positions_ = 0;
  int64_t max_blocks_ = 0;
  int64_t num_blocks_ = 0;
  int64_t flash_passes_ = 0;  // paged: count_flash_passes of the batch's slots
  // paged: count_leading_single_rows of them, and count_flash_passes of the rows after those
  int64_t decode_rows_ = 0, chunk_flash_passes_ = 0;
  Tensor sinks_;
  std::vector<float> reference_;
  size_t out_bytes_ = 0;
  std::unique_ptr<DeviceBuffer> q_, k_cache_, v_cache_, positions_, sinks_device_, tables_, slots_,
      out_;
};

// The 16-bit dtypes of cuda_dtypes() (the flash kernel's; MG_TEST_DTYPES may narrow them).
std::vector<DtypeTolerance> flash_dtypes() {
  std::vector<DtypeTolerance> out;
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    if (d.dtype == DType::kBF16 || d.dtype == DType::kF16) out.push_back(d);
  }
  return out;
}

// `problem`'s auto-rule arguments with the op's planned split-KV workspace and counters (host
// only: the pointers are stand-ins, 16-byte aligned).
cuda::AttentionArgs planned_args(const PrefillProblem& problem, DType dtype) {
  cuda::AttentionArgs a = problem.args(cuda::AttentionPath::kAuto);
  const auto stand_in = reinterpret_cast<void*>(uintptr_t{1} << 20);
  a.workspace = stand_in;
  a.workspace_bytes = cuda::split_kv_workspace_bound(problem.dims(), dtype_size(dtype),
                                                     problem.tokens(), a.sm_count);
  a.split_counters = static_cast<unsigned*>(stand_in);
  a.split_counter_count = cuda::split_kv_counter_count(problem.dims(), problem.tokens());
  return a;
}

TEST(CudaAttentionPrefill, FlashMatchesReferenceAndPerQueryKernel) {
  MG_REQUIRE_GPU();
  uint32_t seed = 7100;
  for (const DtypeTolerance& d : flash_dtypes()) {
    for (const PrefillCase& c : prefill_cases()) {
      SCOPED_TRACE(testing::dtype_trace(d) + " " + c.name);
      seed += 50;
      const PrefillProblem problem(c, d.dtype, seed);
      const cuda::AttentionArgs a = problem.args(cuda::AttentionPath::kAuto);
      ASSERT_EQ(cuda::flash_prefill_unsupported(problem.dims(), dtype_size(d.dtype), a), nullptr);

      const std::vector<float> flash = problem.run(cuda::AttentionPath::kFlashPrefill);
      problem.expect_written_and_nan_row(flash);
      EXPECT_LT(testing::normalized_error(problem.sequence_rows(flash), problem.reference()),
                d.tolerance);
      const std::vector<float> per_query = problem.run(cuda::AttentionPath::kPerQuery);
      EXPECT_LT(testing::normalized_error(problem.sequence_rows(per_query), problem.reference()),
                d.tolerance);
      EXPECT_LT(
          testing::normalized_error(problem.sequence_rows(flash), problem.sequence_rows(per_query)),
          d.tolerance);
      // Beyond the split-KV rows the auto rule is the flash kernel on a contiguous cache and on
      // a paged batch of mostly one sequence per tile (flash_prefill_chosen), or for a paged batch
      // that starts with decode rows two launches (the decode rows on split-KV, the chunks on
      // flash: against the reference); a paged batch flash declines takes the split-KV kernel
      // (up to kSplitKvPagedMaxTokens rows), anything else the per-query kernel; bit for bit (NaN
      // rows too). With flash_prefill off (MG_FLASH_PREFILL=0) the same without the flash kernel.
      if (problem.tokens() > cuda::kSplitKvMaxTokens) {
        const bool takes_flash = c.block_size == 0 || c.paged_auto_flash;
        EXPECT_EQ(cuda::flash_prefill_chosen(problem.dims(), dtype_size(d.dtype), a), takes_flash)
            << problem.flash_passes() << " passes";
        EXPECT_EQ(cuda::attention_takes_row_kinds(problem.dims(), dtype_size(d.dtype),
                                                  planned_args(problem, d.dtype)),
                  c.paged_row_kinds)
            << problem.decode_rows() << " decode rows";
        const bool paged_split =
            c.block_size > 0 && problem.tokens() <= cuda::kSplitKvPagedMaxTokens;
        std::vector<float> split;
        if (paged_split) {
          split = problem.run(cuda::AttentionPath::kSplitKv);
          problem.expect_written_and_nan_row(split);
          EXPECT_LT(testing::normalized_error(problem.sequence_rows(split), problem.reference()),
                    d.tolerance);
        }
        const std::vector<float> chosen = problem.run(cuda::AttentionPath::kAuto);
        if (c.paged_row_kinds) {
          problem.expect_written_and_nan_row(chosen);
          EXPECT_LT(testing::normalized_error(problem.sequence_rows(chosen), problem.reference()),
                    d.tolerance);
        } else {
          const std::vector<float>& expected = takes_flash   ? flash
                                               : paged_split ? split
                                                             : per_query;
          ASSERT_EQ(chosen.size(), expected.size());
          EXPECT_EQ(std::memcmp(chosen.data(), expected.data(), chosen.size() * sizeof(float)), 0);
        }
        const std::vector<float> off =
            problem.run(cuda::AttentionPath::kAuto, /*graph=*/false, /*flash_prefill=*/false);
        const std::vector<float>& expected_off = paged_split ? split : per_query;
        ASSERT_EQ(off.size(), expected_off.size());
        EXPECT_EQ(std::memcmp(off.data(), expected_off.data(), off.size() * sizeof(float)), 0);
      }
    }
  }
}

TEST(CudaAttentionPrefill, FlashReplaysInACudaGraph) {
  MG_REQUIRE_GPU();
  const PrefillCase c = prefill_cases()[7];  // 300 rows after 700 cached keys
  const PrefillProblem problem(c, DType::kBF16, 7900);
  const std::vector<float> direct = problem.run(cuda::AttentionPath::kFlashPrefill);
  const std::vector<float> replayed = problem.run(cuda::AttentionPath::kFlashPrefill, true);
  EXPECT_LT(testing::normalized_error(problem.sequence_rows(replayed), problem.reference()), 1e-2);
  ASSERT_EQ(direct.size(), replayed.size());
  EXPECT_EQ(std::memcmp(direct.data(), replayed.data(), direct.size() * sizeof(float)), 0);
}

// F32 and head sizes the flash kernel does not take stay on the per-query kernel under the auto
// rule, and are still right.
TEST(CudaAttentionPrefill, UnsupportedShapesKeepThePerQueryKernel) {
  MG_REQUIRE_GPU();
  PrefillCase c{.name = "gqa2_d80_rows150", .heads = 4, .kv_heads = 2, .head_dim = 80, .rows = 150};
  const PrefillProblem d80(c, DType::kBF16, 8000);
  EXPECT_NE(cuda::flash_prefill_unsupported(d80.dims(), 2, d80.args(cuda::AttentionPath::kAuto)),
            nullptr);
  EXPECT_LT(testing::normalized_error(d80.sequence_rows(d80.run(cuda::AttentionPath::kAuto)),
                                      d80.reference()),
            1e-2);
  c.head_dim = 128;
  const PrefillProblem f32(c, DType::kF32, 8100);
  EXPECT_NE(cuda::flash_prefill_unsupported(f32.dims(), 4, f32.args(cuda::AttentionPath::kAuto)),
            nullptr);
  const std::vector<float> auto_out = f32.run(cuda::AttentionPath::kAuto);
  const std::vector<float> per_query = f32.run(cuda::AttentionPath::kPerQuery);
  EXPECT_EQ(std::memcmp(auto_out.data(), per_query.data(), auto_out.size() * sizeof(float)), 0);
}

// Median ms per launch of `path` on each problem in turn (a prompt's chunks), over 8 rounds
// captured in one CUDA graph.
double time_prefill_ms(const std::vector<std::unique_ptr<PrefillProblem>>& chunks, DType dtype,
                       cuda::AttentionPath path) {
  constexpr int kRounds = 8, kReplays = 5;
  // The split-KV kernel's workspace and counters for the largest chunk at the rule's split count
  // (the split path is forced beyond the rows the auto rule gives it).
  size_t ws_bytes = 0;
  int64_t counter_count = 0;
  for (const auto& chunk : chunks) {
    const int64_t tokens = chunk->tokens();
    ws_bytes = std::max(
        ws_bytes, cuda::split_kv_workspace_bytes(
                      chunk->dims(), tokens,
                      cuda::split_kv_splits(chunk->dims(), tokens, chunk->args(path).max_seq_len,
                                            device_sm_count())));
    counter_count = std::max(counter_count, cuda::split_kv_counter_count(chunk->dims(), tokens));
  }
  DeviceBuffer workspace(ws_bytes);
  DeviceBuffer counters(static_cast<size_t>(counter_count) * sizeof(unsigned));
  testing::memset_device_now(counters.as<void>(), 0, static_cast<size_t>(counter_count) * 4);
  cudaStream_t stream = nullptr;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CaptureGuard capture_guard(stream);
  for (int i = 0; i < kRounds; ++i) {
    for (const auto& chunk : chunks) {
      cuda::AttentionArgs a = chunk->args(path);
      a.workspace = workspace.as<void>();
      a.workspace_bytes = ws_bytes;
      a.split_counters = counters.as<unsigned>();
      a.split_counter_count = counter_count;
      cuda::dispatch_float_dtype(dtype, [&](auto tag) {
        cuda::launch_attention<decltype(tag)>(chunk->dims(), a, stream);
      });
    }
  }
  capture_guard.release();
  MG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = testing::median_graph_replay_ms(exec, stream, kReplays);
  MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MG_CUDA_CHECK(cudaGraphDestroy(graph));
  MG_CUDA_CHECK(cudaStreamDestroy(stream));
  return ms / kRounds;
}

// The prefill attention of one Qwen3-30B-A3B layer (32 heads, 4 KV heads, head dim 128, BF16)
// through both kernels, printed with the FLOP rate: 512 and 4096 tokens from position 0, and
// 4096 as two chunks of 2048. Causal FLOPs: 4 · head_dim · heads · Σ visible keys (Q·K^T and
// P·V, 2 per multiply-add). Opt-in (MG_ATTN_TIMING=1): the per-query kernel at 4096 tokens is slow.
TEST(CudaAttentionPrefill, TimesBothKernelsOnTheQwen3Shape) {
  MG_REQUIRE_GPU();
  if (std::getenv("MG_ATTN_TIMING") == nullptr) GTEST_SKIP() << "set MG_ATTN_TIMING=1 to time";
  struct Shape {
    std::string name;
    std::vector<int64_t> chunks;  // rows per call, one prompt
  };
  const std::vector<Shape> shapes = {
      {"512 tokens", {512}}, {"4096 tokens", {4096}}, {"4096 tokens as 2 x 2048", {2048, 2048}}};
  for (const Shape& shape : shapes) {
    std::vector<std::unique_ptr<PrefillProblem>> chunks;
    int64_t cached = 0;
    double visible_keys = 0.0;
    for (int64_t rows : shape.chunks) {
      const PrefillCase c{.name = shape.name,
                          .heads = 32,
                          .kv_heads = 4,
                          .head_dim = 128,
                          .cached = cached,
                          .rows = rows};
      chunks.push_back(std::make_unique<PrefillProblem>(
          c, DType::kBF16, 9000 + static_cast<uint32_t>(cached), /*with_reference=*/false));
      for (int64_t p = cached; p < cached + rows; ++p) visible_keys += static_cast<double>(p + 1);
      cached += rows;
    }
    const double flops = 4.0 * 128 * 32 * visible_keys;
    const double flash = time_prefill_ms(chunks, DType::kBF16, cuda::AttentionPath::kFlashPrefill);
    const double per_query = time_prefill_ms(chunks, DType::kBF16, cuda::AttentionPath::kPerQuery);
    std::cout << fmt::format(
                     "[ TIMING ] attention prefill {} (qwen3 layer, BF16, {:.2f} GFLOP): flash "
                     "{:.3f} ms ({:.1f} TFLOP/s), per-query {:.3f} ms ({:.1f} TFLOP/s), {:.1f}x",
                     shape.name, flops * 1e-9, flash, flops / (flash * 1e9), per_query,
                     flops / (per_query * 1e9), per_query / flash)
              << std::endl;
    EXPECT_LT(flash, per_query) << shape.name;
  }
}

// Paged batches of the Engine's make-up (decode rows first, then prompt chunks; Qwen3-30B-A3B
// layer, BF16, blocks of 16) through the three kernels, each printed with its passes per 64-row
// tile and the auto rule's pick: the measurement that tunes kFlashPagedMaxPassesPerTile
// (attention_flash_rule.h) and kSplitKvPagedMaxTokens (attention_cuda.h). A decode row's pass
// walks its whole context in one block, so the rule's count of passes ignores how long each is:
// the 4096-key decode rows show what that costs. Opt-in (MG_ATTN_TIMING=1).
TEST(CudaAttentionPrefill, TimesPagedBatchesBothPaths) {
  MG_REQUIRE_GPU();
  if (std::getenv("MG_ATTN_TIMING") == nullptr) GTEST_SKIP() << "set MG_ATTN_TIMING=1 to time";
  struct Shape {
    std::string name;
    int64_t prompts = 0;         // prompts of 512 tokens from position 0
    int64_t decode = 0;          // decode rows, one per sequence, before them
    int64_t decode_keys = 1024;  // keys each decode row sees
    int64_t prompt_tokens = 512;
  };
  const std::vector<Shape> shapes = {
      {"4 prompts x 512", 4, 0},
      {"1 prompt x 512 + 16 decode of 1024 keys", 1, 16},
      {"1 prompt x 512 + 64 decode of 1024 keys", 1, 64},
      {"1 prompt x 512 + 4 decode of 4096 keys", 1, 4, 4096},
      {"1 prompt x 512 + 8 decode of 1024 keys", 1, 8},
      {"4 prompts x 512 + 16 decode of 1024 keys", 4, 16},
      {"128 decode of 1024 keys", 0, 128},
      {"65 decode of 160 keys", 0, 65, 160},
      {"128 decode of 160 keys", 0, 128, 160},
      {"256 decode of 160 keys", 0, 256, 160},
      {"512 decode of 160 keys", 0, 512, 160},
      {"128 decode of 4096 keys", 0, 128, 4096},
      {"3 prompts x 128 + 128 decode of 160 keys", 3, 128, 160, 128}};
  for (const Shape& shape : shapes) {
    PrefillCase c{
        .name = shape.name, .heads = 32, .kv_heads = 4, .head_dim = 128, .block_size = 16};
    for (int64_t i = 0; i < shape.decode; ++i) c.paged.push_back({shape.decode_keys - 1, 1});
    for (int64_t i = 0; i < shape.prompts; ++i) c.paged.push_back({0, shape.prompt_tokens});
    std::vector<std::unique_ptr<PrefillProblem>> batch;
    batch.push_back(std::make_unique<PrefillProblem>(c, DType::kBF16, 9500, false));
    const PrefillProblem& problem = *batch.front();
    const int64_t tiles = (problem.tokens() + cuda::kFlashRows - 1) / cuda::kFlashRows;
    const cuda::AttentionArgs planned = planned_args(problem, DType::kBF16);
    const char* rule = "per-query";
    if (cuda::attention_takes_row_kinds(problem.dims(), 2, planned)) {
      rule = "split-KV for the decode rows + flash for the chunks";
    } else {
      switch (cuda::attention_path_taken(problem.dims(), 2, planned)) {
        case cuda::AttentionPath::kFlashPrefill:
          rule = "flash";
          break;
        case cuda::AttentionPath::kSplitKv:
          rule = "split-KV";
          break;
        case cuda::AttentionPath::kAuto:
        case cuda::AttentionPath::kPerQuery:
          break;
      }
    }
    const double flash = time_prefill_ms(batch, DType::kBF16, cuda::AttentionPath::kFlashPrefill);
    const double per_query = time_prefill_ms(batch, DType::kBF16, cuda::AttentionPath::kPerQuery);
    const double split = time_prefill_ms(batch, DType::kBF16, cuda::AttentionPath::kSplitKv);
    const double chosen = time_prefill_ms(batch, DType::kBF16, cuda::AttentionPath::kAuto);
    std::cout << fmt::format(
                     "[ TIMING ] paged attention {} (qwen3 layer, BF16, {} rows, {} passes in {} "
                     "tiles = {:.2f} per tile): flash {:.1f} us, per-query {:.1f} us, split-KV "
                     "{:.1f} us, the rule's pick {:.1f} us ({})",
                     shape.name, problem.tokens(), problem.flash_passes(), tiles,
                     static_cast<double>(problem.flash_passes()) / static_cast<double>(tiles),
                     1e3 * flash, 1e3 * per_query, 1e3 * split, 1e3 * chosen, rule)
              << std::endl;
    EXPECT_GT(split, 0.0);
    EXPECT_GT(chosen, 0.0);
  }
}

#endif  // MG_WITH_CUDA

// The flash rule's objections (host only: no launch).
TEST(CudaAttentionPrefill, FlashRuleNamesWhatItDoesNotTake) {
#ifndef MG_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
#else
  AttentionDims qwen3;
  qwen3.heads = 32;
  qwen3.kv_heads = 4;
  qwen3.head_dim = qwen3.v_head_dim = 128;
  alignas(16) static char buffer[64];
  cuda::AttentionArgs a;
  a.q = a.k_cache = a.v_cache = a.out = buffer;
  a.tokens = 4096;
  a.max_seq_len = 40960;
  EXPECT_EQ(cuda::flash_prefill_unsupported(qwen3, 2, a), nullptr);
  AttentionDims d64 = qwen3;
  d64.head_dim = d64.v_head_dim = 64;
  EXPECT_EQ(cuda::flash_prefill_unsupported(d64, 2, a), nullptr);
  EXPECT_NE(cuda::flash_prefill_unsupported(qwen3, 4, a), nullptr);  // F32
  for (int64_t head_dim : {32, 80, 96, 256}) {
    AttentionDims other = qwen3;
    other.head_dim = other.v_head_dim = head_dim;
    EXPECT_NE(cuda::flash_prefill_unsupported(other, 2, a), nullptr) << head_dim;
  }
  AttentionDims mla = qwen3;
  mla.head_dim = 192;
  EXPECT_NE(cuda::flash_prefill_unsupported(mla, 2, a), nullptr);
  cuda::AttentionArgs paged = a;
  static const int32_t table[1] = {0};
  paged.kv.block_tables = table;
  paged.kv.block_size = 16;
  paged.kv.max_blocks_per_seq = 2560;
  EXPECT_EQ(cuda::flash_prefill_unsupported(qwen3, 2, paged), nullptr);
  // The kernel takes it, but the auto rule does not while the batch's make-up is unknown (one
  // pass per sequence of a block's rows); described, it does when the 64 tiles are mostly one
  // sequence each (at most 2 passes per tile), and not for a pass per row (decode rows).
  EXPECT_TRUE(cuda::flash_prefill_chosen(qwen3, 2, a));
  EXPECT_FALSE(cuda::flash_prefill_chosen(qwen3, 2, paged));
  paged.kv.flash_passes = 64;
  EXPECT_TRUE(cuda::flash_prefill_chosen(qwen3, 2, paged));
  paged.kv.flash_passes = 128;
  EXPECT_TRUE(cuda::flash_prefill_chosen(qwen3, 2, paged));
  paged.kv.flash_passes = 129;
  EXPECT_FALSE(cuda::flash_prefill_chosen(qwen3, 2, paged));
  paged.kv.flash_passes = 4096;
  EXPECT_FALSE(cuda::flash_prefill_chosen(qwen3, 2, paged));
  cuda::AttentionArgs paged_off = paged;
  paged_off.kv.flash_passes = 64;
  paged_off.flash_prefill = false;
  EXPECT_FALSE(cuda::flash_prefill_chosen(qwen3, 2, paged_off));
  paged.kv.flash_passes = 0;
  cuda::AttentionArgs off = a;
  off.flash_prefill = false;
  EXPECT_FALSE(cuda::flash_prefill_chosen(qwen3, 2, off));
  paged.kv.max_blocks_per_seq = int64_t{1} << 28;  // 2^32 positions
  EXPECT_NE(cuda::flash_prefill_unsupported(qwen3, 2, paged), nullptr);
  cuda::AttentionArgs odd = a;
  odd.k_cache = buffer + 2;
  EXPECT_NE(cuda::flash_prefill_unsupported(qwen3, 2, odd), nullptr);
  // MG_FLASH_PREFILL: unset or 1 lets the auto rule take it, 0 keeps the per-query kernel.
  EXPECT_TRUE(cuda::flash_prefill_requested_by(nullptr));
  EXPECT_TRUE(cuda::flash_prefill_requested_by("1"));
  EXPECT_FALSE(cuda::flash_prefill_requested_by("0"));
  EXPECT_THROW(cuda::flash_prefill_requested_by("yes"), Error);
  cuda::AttentionArgs huge = a;
  huge.max_seq_len = int64_t{1} << 32;
  EXPECT_NE(cuda::flash_prefill_unsupported(qwen3, 2, huge), nullptr);
#endif
}

}  // namespace
}  // namespace mg
