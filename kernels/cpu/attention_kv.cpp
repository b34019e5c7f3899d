// attention_kv.cpp — see attention_kv.h.
#include "kernels/cpu/attention_kv.h"

#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/attention_group.h"
#include "kernels/cpu/parallel_for.h"

namespace servelab {

void attention_over_kv(const float* q, const KvView& keys, const KvView& values, float* out,
                       const AttentionShape& s) {
    if (keys.num_heads != s.num_kv_heads || values.num_heads != s.num_kv_heads ||
        keys.head_dim != s.head_dim || values.head_dim != s.head_dim) {
        throw Error("attention: the KV views do not match the attention shape");
    }
    const auto readers = query_heads_by_kv_head(s);

    const int64_t q_stride = s.num_heads * s.head_dim;
    const int64_t first_query_position = s.num_keys - s.num_queries;

    // One work item per (query token, KV head); parallel_for because kv_row
    // may run a student's dequantization, which may throw.
    parallel_for(s.num_queries * s.num_kv_heads, [&](int64_t item) {
        const int64_t t = item / s.num_kv_heads;
        const int64_t g = item % s.num_kv_heads;
        // Per-thread buffers, reused across calls: no allocation per decode step.
        thread_local std::vector<float> row_buffer, scores;
        row_buffer.resize(size_t(s.head_dim));  // a dequantized row
        attend_query_group(
            q + t * q_stride, readers[size_t(g)], s.head_dim, first_query_position + t + 1,
            [&](int64_t j) { return kv_row(keys, j, g, row_buffer.data()); },
            [&](int64_t j) { return kv_row(values, j, g, row_buffer.data()); }, out + t * q_stride,
            scores);
    });
}

}  // namespace servelab
