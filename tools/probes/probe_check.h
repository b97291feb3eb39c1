// CHECK for the probes (tools/probes/README.md): they link nothing of the engine, so not its
// MG_CUDA_CHECK. A failed CUDA call prints where and why and ends the program.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                            \
  do {                                                                      \
    const cudaError_t e = (x);                                              \
    if (e != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)
