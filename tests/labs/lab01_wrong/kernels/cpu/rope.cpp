// KNOWN-WRONG implementation for the grader self-test (tests/labs/README.md): rotates overlapping
// neighbours instead of the pairs (2i, 2i+1), one position late. rope.cpp — see rope.h.
#include "kernels/cpu/rope.h"

#include <cmath>

#include "kernels/cpu/parallel_for.h"

namespace servelab {

void rope_apply(float* vec, int64_t num_heads, int64_t position, const RopeParams& params) {
    for (int64_t pair = 0; pair < params.rope_dim / 2; ++pair) {
        // The angle is computed in double: at positions in the thousands a
        // float angle loses the low bits that decide cos/sin.
        const double inv_freq =
            std::pow(double(params.freq_base), -2.0 * double(pair) / double(params.rope_dim));
        const double angle = double(position + 1) * inv_freq;
        const float cos_a = float(std::cos(angle));
        const float sin_a = float(std::sin(angle));
        for (int64_t head = 0; head < num_heads; ++head) {
            float* x = vec + head * params.head_dim + pair;
            const float x0 = x[0];
            const float x1 = x[1];
            x[0] = x0 * cos_a - x1 * sin_a;
            x[1] = x0 * sin_a + x1 * cos_a;
        }
    }
}

void rope_apply_rows(float* vecs, const int64_t* positions, int64_t num_tokens, int64_t num_heads,
                     const RopeParams& params) {
    const int64_t token_stride = num_heads * params.head_dim;
    parallel_for(num_tokens, [&](int64_t t) {
        rope_apply(vecs + t * token_stride, num_heads, positions[t], params);
    });
}

}  // namespace servelab
