// Next-token selection from a row of logits: greedy, or temperature / top-k / top-p sampling.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace mg {

struct SamplingOptions {
  // 0 means greedy (argmax; the lowest id wins ties). Otherwise logits are divided by it.
  float temperature = 0.0f;
  // Keep only the k most likely tokens; 0 keeps all.
  int top_k = 0;
  // Keep the smallest set of most likely tokens whose probability reaches p; 1 keeps all.
  float top_p = 1.0f;
};

class Sampler {
 public:
  Sampler(SamplingOptions options, uint64_t seed);
  // Validates the options (throws mg::Error on temperature < 0, top_k < 0, top_p outside (0, 1]).
  static void validate(const SamplingOptions& options);

  int32_t sample(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch, reused between calls
  std::vector<double> probs_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace mg
