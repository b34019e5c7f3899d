// awq_folding.cpp — see awq_folding.h.
#include "reference/quant/awq_folding.h"

namespace servelab {

void scale_columns(std::vector<float>& w, int64_t rows, int64_t cols, const float* scales) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) w[size_t(r * cols + j)] *= scales[j];
    }
}

void divide_rows(std::vector<float>& w, int64_t rows, int64_t cols, const float* scales) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) w[size_t(r * cols + j)] /= scales[r];
    }
}

void divide_elements(std::vector<float>& values, const float* scales) {
    for (size_t j = 0; j < values.size(); ++j) values[j] /= scales[j];
}

std::vector<float> tie_scales_to_kv_heads(const std::vector<float>& per_query_head,
                                          int64_t num_heads, int64_t num_kv_heads,
                                          int64_t head_dim) {
    const int64_t group = num_heads / num_kv_heads;
    std::vector<float> tied(per_query_head.size());
    for (int64_t kv = 0; kv < num_kv_heads; ++kv) {
        for (int64_t d = 0; d < head_dim; ++d) {
            double sum = 0.0;
            for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
                sum += per_query_head[size_t(h * head_dim + d)];
            }
            for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
                tied[size_t(h * head_dim + d)] = float(sum / double(group));
            }
        }
    }
    return tied;
}

std::vector<float> kv_head_scales(const std::vector<float>& tied, int64_t num_heads,
                                  int64_t num_kv_heads, int64_t head_dim) {
    const int64_t group = num_heads / num_kv_heads;
    std::vector<float> per_kv_head(size_t(num_kv_heads * head_dim));
    for (int64_t kv = 0; kv < num_kv_heads; ++kv) {
        for (int64_t d = 0; d < head_dim; ++d) {
            per_kv_head[size_t(kv * head_dim + d)] = tied[size_t(kv * group * head_dim + d)];
        }
    }
    return per_kv_head;
}

}  // namespace servelab
