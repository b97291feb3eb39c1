// bf16 / fp16 <-> fp32 conversion on the host (round to nearest even, NaN preserved).
#pragma once

#include <cstdint>
#include <cstring>

namespace mg {

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float fp16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);

}  // namespace mg
