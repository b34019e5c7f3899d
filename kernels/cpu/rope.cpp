// rope.cpp — see rope.h.
#include "kernels/cpu/rope.h"

#include <cmath>

#include "kernels/cpu/parallel_for.h"

namespace servelab {

void rope_apply(float* vec, int64_t num_heads, int64_t position, const RopeParams& params) {
    // BEGIN SOLUTION lab01
    // HINT: pair i of every head turns by position * freq_base^(-2i / rope_dim)
    // HINT: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos); dims past rope_dim stay
    for (int64_t pair = 0; pair < params.rope_dim / 2; ++pair) {
        // The angle is computed in double: at positions in the thousands a
        // float angle loses the low bits that decide cos/sin.
        const double inv_freq =
            std::pow(double(params.freq_base), -2.0 * double(pair) / double(params.rope_dim));
        const double angle = double(position) * inv_freq;
        const float cos_a = float(std::cos(angle));
        const float sin_a = float(std::sin(angle));
        for (int64_t head = 0; head < num_heads; ++head) {
            float* x = vec + head * params.head_dim + 2 * pair;
            const float x0 = x[0];
            const float x1 = x[1];
            x[0] = x0 * cos_a - x1 * sin_a;
            x[1] = x0 * sin_a + x1 * cos_a;
        }
    }
    // END SOLUTION
}

void rope_apply_rows(float* vecs, const int64_t* positions, int64_t num_tokens, int64_t num_heads,
                     const RopeParams& params) {
    const int64_t token_stride = num_heads * params.head_dim;
    parallel_for(num_tokens, [&](int64_t t) {
        rope_apply(vecs + t * token_stride, num_heads, positions[t], params);
    });
}

}  // namespace servelab
