// softmax_oracle.h — the exact softmax that the FlashAttention tests hold
// their tiles to (Lab 9; chapter 11.5, FlashAttention's online softmax).
//
// In double, over all scores at once: the max, the sum Σ exp(s − max) and the
// unnormalized output Σ exp(s − max)·v, the three numbers an online softmax
// carries from tile to tile. Shared by flash_attention_test.cpp and the Lab 9
// hidden tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace servelab::test {

struct ExactSoftmax {
    double max = -INFINITY, sum = 0;
    std::vector<double> out;  // head_dim values, not divided by sum
};

// `values` is num_scores × head_dim; a score of -inf (masked) weighs nothing.
inline ExactSoftmax exact_softmax(const std::vector<float>& scores,
                                  const std::vector<float>& values, int64_t head_dim) {
    ExactSoftmax result;
    result.out.assign(size_t(head_dim), 0.0);
    for (float s : scores) result.max = std::max(result.max, double(s));
    for (size_t j = 0; j < scores.size(); ++j) {
        if (scores[j] == -std::numeric_limits<float>::infinity()) continue;
        const double p = std::exp(double(scores[j]) - result.max);
        result.sum += p;
        for (int64_t d = 0; d < head_dim; ++d)
            result.out[size_t(d)] += p * values[j * size_t(head_dim) + size_t(d)];
    }
    return result;
}

}  // namespace servelab::test
