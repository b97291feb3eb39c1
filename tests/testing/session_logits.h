// Logits of a 9-token prompt, then of three one-token decode steps, concatenated: what the fusion
// tests compare between two compilations of one model (the prefill and the decode paths).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "framework/runtime/session.h"

namespace mg::testing {

inline std::vector<float> prompt_and_decode_logits(Session& s) {
  const std::vector<int32_t> prompt = {5, 17, 3, 9, 42, 8, 6, 1, 33};
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& t = s.forward(prompt, pos);
  std::vector<float> out(t.data<float>(), t.data<float>() + t.numel());
  for (int step = 0; step < 3; ++step) {
    const int32_t id = prompt[static_cast<size_t>(step)] + 1;
    const int32_t p = static_cast<int32_t>(prompt.size()) + step;
    const Tensor& d = s.forward(std::span(&id, 1), std::span(&p, 1));
    out.insert(out.end(), d.data<float>(), d.data<float>() + d.numel());
  }
  return out;
}

}  // namespace mg::testing
