// swiglu.h — the SwiGLU activation of the llama MLP (Shazeer, 2020).
//
// Plain CPU kernel (all labs). The MLP is down(silu(gate(x)) * up(x)), with
// silu(z) = z * sigmoid(z). This kernel is the elementwise middle part.
#pragma once

#include <cstdint>

namespace servelab {

// out[i] = silu(gate[i]) * up[i] for i < n. out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

}  // namespace servelab
