// rmsnorm.h — RMSNorm (Zhang & Sennrich, 2019), the llama family's layer norm.
//
// Plain CPU kernel (all labs). out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]
#pragma once

#include <cstdint>

namespace servelab {

// x, out: (dim), may alias. weight: (dim).
void rmsnorm(const float* x, const float* weight, float* out, int64_t dim, float eps);

// The same over `num_tokens` rows of length `dim`, one row per token.
void rmsnorm_rows(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim,
                  float eps);

}  // namespace servelab
