// op "add": out = a + scale * b, elementwise over activations of the same shape.
#pragma once

#include <cstdint>

namespace mg {

// Reference: plain loop, used by tests.
void add_reference(const float* a, const float* b, float scale, float* out, int64_t n);

}  // namespace mg
