// MG_HOST_DEVICE marks small inline functions that host code and CUDA kernels both call (headers
// included by .cc and .cu files alike).
#pragma once

#ifdef __CUDACC__
#define MG_HOST_DEVICE __host__ __device__
#else
#define MG_HOST_DEVICE
#endif
