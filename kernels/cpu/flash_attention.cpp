// flash_attention.cpp — see flash_attention.h. Lab 9's second exercise: the tile loops.
#include "kernels/cpu/flash_attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/online_softmax.h"

namespace servelab {

void attend_key_range(const QueryRows& rows, const KvRows& kv, int64_t begin, int64_t end,
                      SoftmaxRows& state) {
    // This thread's tile of scores and each row's count of visible keys in
    // it, reused across calls.
    thread_local std::vector<float> scores;
    thread_local std::vector<int64_t> live;
    scores.resize(size_t(rows.num_rows * kKeyTile));
    live.resize(size_t(rows.num_rows));
    // BEGIN SOLUTION lab09 (attend_key_range)
    // HINT: no row sees past the largest visible[r]: stop there (tiles above the diagonal).
    // HINT: Per tile of n <= kKeyTile keys from j0: tile_scores; then for each row r,
    // HINT: live[r] = how many of keys j0 .. j0 + n − 1 row r sees (clamp to [0, n]), its
    // HINT: scores from live[r] to kKeyTile set to −inf, and online_softmax_update on its
    // HINT: kKeyTile scores. Last, tile_accumulate the weights.
    int64_t last_visible = 0;
    for (int64_t r = 0; r < rows.num_rows; ++r) {
        last_visible = std::max(last_visible, rows.visible[r]);
    }
    end = std::min(end, last_visible);
    for (int64_t j0 = begin; j0 < end; j0 += kKeyTile) {
        const int64_t n = std::min(kKeyTile, end - j0);
        tile_scores(rows, kv, j0, n, scores.data());
        for (int64_t r = 0; r < rows.num_rows; ++r) {
            live[size_t(r)] = std::clamp<int64_t>(rows.visible[r] - j0, 0, n);
            float* row_scores = scores.data() + r * kKeyTile;
            std::fill(row_scores + live[size_t(r)], row_scores + kKeyTile,
                      -std::numeric_limits<float>::infinity());
            online_softmax_update(row_scores, kKeyTile, state.max[size_t(r)], state.sum[size_t(r)],
                                  state.out.data() + r * kv.head_dim, kv.head_dim);
        }
        tile_accumulate(scores.data(), live.data(), kv, j0, rows.num_rows, state.out.data());
    }
    // END SOLUTION
}

void flash_attention_prefill(const AttentionGroup& group) {
    const QueryRows& rows = group.rows;
    const int64_t head_dim = group.kv.head_dim;
    thread_local SoftmaxRows running, range;  // this thread's, reused across calls
    running.reset(rows.num_rows, head_dim);
    // BEGIN SOLUTION lab09 (flash_attention_prefill)
    // HINT: ranges [0, kKeysPerRange), [kKeysPerRange, 2 · kKeysPerRange), ... up to the
    // HINT: largest visible[r], each from a fresh state (range.reset), then merged row by
    // HINT: row into running.
    int64_t last_visible = 0;
    for (int64_t r = 0; r < rows.num_rows; ++r) {
        last_visible = std::max(last_visible, rows.visible[r]);
    }
    for (int64_t begin = 0; begin < last_visible; begin += kKeysPerRange) {
        range.reset(rows.num_rows, head_dim);
        attend_key_range(rows, group.kv, begin, begin + kKeysPerRange, range);
        for (int64_t r = 0; r < rows.num_rows; ++r) {
            merge_softmax_partial(running.max[size_t(r)], running.sum[size_t(r)],
                                  running.out.data() + r * head_dim, range.max[size_t(r)],
                                  range.sum[size_t(r)], range.out.data() + r * head_dim, head_dim);
        }
    }
    // END SOLUTION
    write_normalized(running, rows.num_rows, head_dim, group.out);
}

void write_normalized(const SoftmaxRows& state, int64_t num_rows, int64_t head_dim, float* out) {
    for (int64_t r = 0; r < num_rows; ++r) {
        // Every row sees at least key 0 (its own position or earlier): sum > 0.
        const float inverse = 1.0f / state.sum[size_t(r)];
        for (int64_t d = 0; d < head_dim; ++d) {
            out[r * head_dim + d] = state.out[size_t(r * head_dim + d)] * inverse;
        }
    }
}

}  // namespace servelab
