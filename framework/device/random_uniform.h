// The counter-based uniform generator behind random tensors (random_fill.h): element i of the
// stream `seed` is a hash of (seed, i), so the host and a GPU kernel (this header compiles in
// both) make the same values, in any order and in parallel.
#pragma once

#include <cstdint>
#include <string_view>

#include "framework/device/host_device.h"

namespace mg {

// splitmix64's finaliser: a full-avalanche 64-bit mix.
MG_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a of a name: seeds a tensor's stream from its name, so its values do not depend on the
// order tensors are made in.
inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Element `index` of the stream `seed`: 24 random bits mapped to [-1, 1) (exactly), then scaled
// and shifted: uniform in [center - scale, center + scale).
MG_HOST_DEVICE inline float uniform_at(uint64_t seed, uint64_t index, float center, float scale) {
  const uint64_t bits = mix64(seed ^ mix64(index));
  const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return center + (2.0f * u - 1.0f) * scale;
}

}  // namespace mg
