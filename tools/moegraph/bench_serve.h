// `moegraph bench serve MODEL`: batched generation on the Engine at several numbers of concurrent
// sequences: output tokens/s, per-token latency (p50 / p99 of the time between a sequence's
// consecutive tokens) and the decode step's floor beside it.
//
// Every sequence of a round joins at once with the same prompt length and generates the same
// number of tokens (greedy unless --temperature). The prompts are prefilled in chunks, so the
// decode rate is taken over the steps in which every sequence decodes (one token each a step). The
// floor of a decode step of B sequences is the bytes it must read over the measured copy bandwidth:
//   bytes = dense weights + L * D(B) * expert bytes + B * context * KV bytes per position
//   D(B)  = E (1 - (1 - k/E)^B), the expected distinct experts a layer touches under uniform
//           routing (as `bench moe`'s floor), context the mean over the decode steps
// with weights counted as `bench e2e` counts them (tools/bench/decode_floor.h: the activation
// dtype, or a quantized tensor's stored bytes with its scales; the embedding table, of which a
// step reads B rows, left out) and the bandwidth a large device-to-device copy (GPUs, as `bench
// moe`) or host memcpy (CPU), bytes read + written over its time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mg::cli {

struct BenchServeArgs {
  std::string model;
  std::string device = "cuda";
  std::string dtype;
  std::string batches = "1,8,32,128";
  int prompt_tokens = 128;
  int decode_tokens = 128;
  float temperature = 0.0f;
  bool cuda_graph = false;
  std::optional<uint64_t> random_weights;
};

int bench_serve(const BenchServeArgs& args);

}  // namespace mg::cli
