// softmax.cpp — see softmax.h.
#include "kernels/cpu/softmax.h"

#include <cmath>

namespace servelab {

void softmax(float* x, int64_t n) {
    float max_value = x[0];
    for (int64_t i = 1; i < n; ++i) max_value = x[i] > max_value ? x[i] : max_value;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max_value);
        sum += x[i];
    }
    const float inv_sum = float(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

}  // namespace servelab
