// residual.h — the residual connection: x += delta.
//
// Plain CPU kernel (all labs). Each sub-block (attention, MLP) adds its
// output to the residual stream instead of replacing it.
#pragma once

#include <cstdint>

namespace servelab {

// x, delta: (n)
void add_inplace(float* x, const float* delta, int64_t n);

}  // namespace servelab
