// online_softmax.cpp — see online_softmax.h. Lab 9's first exercise: the update and the merge.
#include "kernels/cpu/online_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/attention_tiles.h"

namespace servelab {

void online_softmax_update(float* scores, int64_t num_scores, float& max, float& sum, float* out,
                           int64_t head_dim) {
    // BEGIN SOLUTION lab09 (online_softmax_update)
    // HINT: the tile's max first (max_of); a tile of only −inf scores must set every weight
    // HINT: to 0 and return. m' = max(max, tile max); when m' > max, everything summed so
    // HINT: far is exp(max − m') too large: rescale sum and out by it (0 at the first tile,
    // HINT: when max = −inf). Weights exp(s − m') with exp_in_place (attention_tiles.h),
    // HINT: which returns their sum.
    const float tile_max = max_of(scores, num_scores);
    if (tile_max == -std::numeric_limits<float>::infinity()) {
        std::fill(scores, scores + num_scores, 0.0f);
        return;
    }
    const float new_max = std::max(max, tile_max);
    for (int64_t j = 0; j < num_scores; ++j) scores[j] -= new_max;
    const float tile_sum = exp_in_place(scores, num_scores);
    // Most tiles do not raise the max: then the factor is 1 and there is nothing to do.
    if (new_max > max) {
        const float correction = std::exp(max - new_max);
        sum *= correction;
        for (int64_t d = 0; d < head_dim; ++d) out[d] *= correction;
        max = new_max;
    }
    sum += tile_sum;
    // END SOLUTION
}

void merge_softmax_partial(float& max, float& sum, float* out, float part_max, float part_sum,
                           const float* part_out, int64_t head_dim) {
    // BEGIN SOLUTION lab09 (merge_softmax_partial)
    // HINT: a partial with part_max = −inf saw no key: nothing to add. Both sides were
    // HINT: summed against their own max: bring both to M = max(max, part_max).
    if (part_max == -std::numeric_limits<float>::infinity()) return;
    const float new_max = std::max(max, part_max);
    const float running_scale = std::exp(max - new_max);  // 0 while the running side is empty
    const float part_scale = std::exp(part_max - new_max);
    sum = sum * running_scale + part_sum * part_scale;
    for (int64_t d = 0; d < head_dim; ++d) {
        out[d] = out[d] * running_scale + part_out[d] * part_scale;
    }
    max = new_max;
    // END SOLUTION
}

}  // namespace servelab
