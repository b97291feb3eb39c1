#include "ops/nn/attention/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "framework/core/thread_pool.h"

namespace mg {

namespace {

constexpr int64_t kKeyBlock = 64;  // keys scored per step of the online softmax
constexpr int64_t kMaxRows = 16;   // query rows (token, head) per tile
constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Eight partial sums so the compiler vectorises without reassociating a single sum.
inline float dot(const float* a, const float* b, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  }
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
              ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// First visible key of a query at position p (the last is p itself).
int64_t first_visible_key(const AttentionDims& dims, int64_t p) {
  int64_t first = 0;
  if (dims.sliding_window > 0) first = std::max(first, p - dims.sliding_window + 1);
  if (dims.chunk_size > 0) first = std::max(first, p - p % dims.chunk_size);
  return first;
}

struct Tiling {
  int64_t tokens_per_tile;
  int64_t heads_per_tile;
  int64_t token_tiles;
  int64_t head_tiles;  // per KV group
};

// As many rows per tile as allowed (key reuse), but enough tiles to keep every thread busy.
Tiling choose_tiling(const AttentionDims& dims, int64_t tokens, int threads) {
  const int64_t group = dims.heads / dims.kv_heads;
  Tiling tiling;
  tiling.heads_per_tile = std::min(group, kMaxRows);
  tiling.tokens_per_tile = std::max<int64_t>(1, std::min(tokens, kMaxRows / tiling.heads_per_tile));
  auto update = [&] {
    tiling.token_tiles = (tokens + tiling.tokens_per_tile - 1) / tiling.tokens_per_tile;
    tiling.head_tiles = (group + tiling.heads_per_tile - 1) / tiling.heads_per_tile;
    return tiling.token_tiles * dims.kv_heads * tiling.head_tiles;
  };
  while (update() < 2 * threads && (tiling.tokens_per_tile > 1 || tiling.heads_per_tile > 1)) {
    if (tiling.tokens_per_tile > 1) {
      tiling.tokens_per_tile = (tiling.tokens_per_tile + 1) / 2;
    } else {
      tiling.heads_per_tile = (tiling.heads_per_tile + 1) / 2;
    }
  }
  return tiling;
}

struct QueryRow {
  const float* q;     // [D]
  float* out;         // [Dv], also the accumulator
  int64_t first_key;  // visible keys: [first_key, last_key]
  int64_t last_key;
  float max;    // running max of the logits (the sink included)
  float denom;  // running Σ exp(logit - max)
};

// Tokens [t0, t1) × heads [h0, h1), all of KV group g and of sequence `slot`.
void attend_tile(const AttentionDims& dims, const float* q, const int32_t* positions, int64_t t0,
                 int64_t t1, int64_t g, int64_t h0, int64_t h1, const float* k_cache,
                 const float* v_cache, const float* sinks, float* out, const KvBatch* kv,
                 int64_t slot) {
  QueryRow rows[kMaxRows];
  int64_t num_rows = 0;
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = -1;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t p = positions[t];
    const int64_t first = first_visible_key(dims, p);
    lo = std::min(lo, first);
    hi = std::max(hi, p);
    for (int64_t h = h0; h < h1; ++h) {
      QueryRow& row = rows[num_rows++];
      row.q = q + (t * dims.heads + h) * dims.head_dim;
      row.out = out + (t * dims.heads + h) * dims.v_head_dim;
      row.first_key = first;
      row.last_key = p;
      // A sink is one more logit: it adds exp(σ - max) to the denominator, nothing to the output.
      row.max = sinks ? sinks[h] : kMasked;
      row.denom = sinks ? 1.0f : 0.0f;
      std::fill(row.out, row.out + dims.v_head_dim, 0.0f);
    }
  }

  const int64_t dv = dims.v_head_dim;
  float scores[kMaxRows][kKeyBlock];
  for (int64_t j0 = lo; j0 <= hi; j0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, hi + 1 - j0);
    // Logits: each key row is loaded once for all rows of the tile.
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t j = j0 + jj;
      const float* k_j = k_cache + (kv_cache_row(kv, slot, j) * dims.kv_heads + g) * dims.head_dim;
      for (int64_t r = 0; r < num_rows; ++r) {
        const QueryRow& row = rows[r];
        scores[r][jj] = j >= row.first_key && j <= row.last_key
                            ? dot(row.q, k_j, dims.head_dim) * dims.scale
                            : kMasked;
      }
    }
    // New running max per row; rescale what was accumulated under the old one.
    for (int64_t r = 0; r < num_rows; ++r) {
      QueryRow& row = rows[r];
      float block_max = kMasked;
      for (int64_t jj = 0; jj < n; ++jj) block_max = std::max(block_max, scores[r][jj]);
      if (block_max > row.max) {
        const float rescale = std::exp(row.max - block_max);  // 0 while row.max is -inf
        row.denom *= rescale;
        for (int64_t i = 0; i < dv; ++i) row.out[i] *= rescale;
        row.max = block_max;
      }
    }
    // Weighted values: each value row is loaded once for all rows of the tile.
    for (int64_t jj = 0; jj < n; ++jj) {
      const float* v_j = v_cache + (kv_cache_row(kv, slot, j0 + jj) * dims.kv_heads + g) * dv;
      for (int64_t r = 0; r < num_rows; ++r) {
        if (scores[r][jj] == kMasked) continue;
        QueryRow& row = rows[r];
        const float weight = std::exp(scores[r][jj] - row.max);
        row.denom += weight;
        for (int64_t i = 0; i < dv; ++i) row.out[i] += weight * v_j[i];
      }
    }
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    // denom >= 1: the row's largest logit (a key or the sink) contributes exp(0).
    const float inv_denom = 1.0f / rows[r].denom;
    for (int64_t i = 0; i < dv; ++i) rows[r].out[i] *= inv_denom;
  }
}

}  // namespace

void attention_cpu(const AttentionDims& dims, const float* q, const int32_t* positions,
                   int64_t tokens, const float* k_cache, const float* v_cache, const float* sinks,
                   float* out, ThreadPool* pool, const KvBatch* kv) {
  if (tokens <= 0) return;
  const int threads = pool ? pool->size() : 1;
  const Tiling tiling = choose_tiling(dims, tokens, threads);
  const int64_t group = dims.heads / dims.kv_heads;
  const int64_t tiles_per_token_tile = dims.kv_heads * tiling.head_tiles;

  // Token tiles never span two sequences (their keys differ): each run of rows of one slot is cut
  // into tiles of up to tokens_per_tile rows.
  const int32_t* row_slots = kv != nullptr ? kv->row_slots : nullptr;
  struct TokenTile {
    int64_t t0, t1, slot;
  };
  std::vector<TokenTile> token_tiles;
  token_tiles.reserve(static_cast<size_t>(tiling.token_tiles));
  for (int64_t t0 = 0; t0 < tokens;) {
    const int64_t slot = row_slots ? row_slots[t0] : 0;
    int64_t t1 = t0 + 1;
    while (t1 < tokens && t1 - t0 < tiling.tokens_per_tile &&
           (row_slots ? row_slots[t1] : 0) == slot) {
      ++t1;
    }
    token_tiles.push_back({t0, t1, slot});
    t0 = t1;
  }
  const int64_t num_token_tiles = static_cast<int64_t>(token_tiles.size());

  auto run_tiles = [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      // Later tokens see more keys: hand them out first so the end of the schedule is light.
      const TokenTile& tt = token_tiles[num_token_tiles - 1 - tile / tiles_per_token_tile];
      const int64_t g = (tile % tiles_per_token_tile) / tiling.head_tiles;
      const int64_t head_tile = tile % tiling.head_tiles;
      const int64_t h0 = g * group + head_tile * tiling.heads_per_tile;
      const int64_t h1 = std::min((g + 1) * group, h0 + tiling.heads_per_tile);
      attend_tile(dims, q, positions, tt.t0, tt.t1, g, h0, h1, k_cache, v_cache, sinks, out, kv,
                  tt.slot);
    }
  };

  const int64_t num_tiles = num_token_tiles * tiles_per_token_tile;
  if (pool == nullptr || num_tiles == 1) {
    run_tiles(0, num_tiles);
    return;
  }
  int64_t max_keys = 1;
  for (int64_t t = 0; t < tokens; ++t) max_keys = std::max<int64_t>(max_keys, positions[t] + 1);
  if (dims.sliding_window > 0) max_keys = std::min(max_keys, dims.sliding_window);
  if (dims.chunk_size > 0) max_keys = std::min(max_keys, dims.chunk_size);
  const int64_t rows = tiling.tokens_per_tile * tiling.heads_per_tile;
  const int64_t flops_per_tile = rows * max_keys * (dims.head_dim + dims.v_head_dim);
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, flops_per_tile));
  pool->parallel_for(num_tiles, run_tiles, grain);
}

}  // namespace mg
