// softmax.h — numerically stable softmax.
//
// Plain CPU kernel (all labs). Subtracting the maximum before exponentiating
// changes nothing mathematically and keeps exp() from overflowing.
#pragma once

#include <cstdint>

namespace servelab {

// In place over x: (n). n must be >= 1.
void softmax(float* x, int64_t n);

}  // namespace servelab
