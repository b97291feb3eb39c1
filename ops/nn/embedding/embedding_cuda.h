// CUDA embedding launcher: out [T, H] = table [V, H][token_ids[t]] * scale (see embedding.h).
// Raw device pointers and a stream, so it can be tested and reused without the op around it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct EmbeddingArgs {
  const int32_t* token_ids = nullptr;  // [tokens]
  const void* table = nullptr;         // [vocab, hidden], element type T
  void* out = nullptr;                 // [tokens, hidden], element type T
  int64_t tokens = 0;
  int64_t vocab = 0;
  int64_t hidden = 0;
  float scale = 1.0f;
};

// T: float, __half or __nv_bfloat16 (instantiated in embedding_cuda_<dtype>.cu). The ids are read
// on the device, so a bad id cannot be reported without a host sync: its row is written as NaN
// (never read out of bounds). Callers check ids on the host (Session inputs, `moegraph run`).
template <typename T>
void launch_embedding(const EmbeddingArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
