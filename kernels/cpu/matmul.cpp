// matmul.cpp — see matmul.h.
#include "kernels/cpu/matmul.h"

namespace servelab {

void matmul_plain(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_features,
                  int64_t out_features) {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < out_features; ++row) {
        for (int64_t t = 0; t < num_tokens; ++t) {
            float sum = 0.0f;
            for (int64_t i = 0; i < in_features; ++i)
                sum += x[t * in_features + i] * w[row * in_features + i];
            y[t * out_features + row] = sum;
        }
    }
}

namespace {

// Dot products of one weight row with up to kTokenTile token rows at once, so
// the weight row is loaded from memory once per tile instead of once per
// token. `omp simd` lets the compiler vectorize the reductions without
// -ffast-math; target_clones builds an AVX2+FMA and an AVX-512 copy besides
// the baseline one and picks the best at load time.
constexpr int64_t kTokenTile = 4;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define SERVELAB_TARGET_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SERVELAB_TARGET_CLONES
#endif

SERVELAB_TARGET_CLONES
void dot_tile(const float* w_row, const float* x, int64_t tile_tokens, int64_t in_features,
              int64_t x_stride, float* sums) {
    if (tile_tokens == kTokenTile) {
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        const float* x0 = x;
        const float* x1 = x + x_stride;
        const float* x2 = x + 2 * x_stride;
        const float* x3 = x + 3 * x_stride;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t i = 0; i < in_features; ++i) {
            const float wi = w_row[i];
            s0 += wi * x0[i];
            s1 += wi * x1[i];
            s2 += wi * x2[i];
            s3 += wi * x3[i];
        }
        sums[0] = s0, sums[1] = s1, sums[2] = s2, sums[3] = s3;
        return;
    }
    for (int64_t t = 0; t < tile_tokens; ++t) {
        const float* xt = x + t * x_stride;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < in_features; ++i) s += w_row[i] * xt[i];
        sums[t] = s;
    }
}

}  // namespace

void matmul(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_features,
            int64_t out_features) {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < out_features; ++row) {
        const float* w_row = w + row * in_features;
        for (int64_t t0 = 0; t0 < num_tokens; t0 += kTokenTile) {
            const int64_t tile_tokens = num_tokens - t0 < kTokenTile ? num_tokens - t0 : kTokenTile;
            float sums[kTokenTile];
            dot_tile(w_row, x + t0 * in_features, tile_tokens, in_features, in_features, sums);
            for (int64_t t = 0; t < tile_tokens; ++t) y[(t0 + t) * out_features + row] = sums[t];
        }
    }
}

}  // namespace servelab
