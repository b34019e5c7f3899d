// KNOWN-WRONG implementation for the grader self-test (tests/labs/README.md): uses sigmoid(gate)
// instead of silu(gate) = gate * sigmoid(gate). swiglu.cpp — see swiglu.h.
#include "kernels/cpu/swiglu.h"

#include <cmath>

namespace servelab {

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = 1.0f / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace servelab
