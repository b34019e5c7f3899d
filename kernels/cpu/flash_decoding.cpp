// flash_decoding.cpp — see flash_decoding.h. Lab 9's third exercise: the split and the merge.
#include "kernels/cpu/flash_decoding.h"

#include <algorithm>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/online_softmax.h"
#include "kernels/cpu/parallel_for.h"

namespace servelab {

void flash_decoding(std::span<const AttentionGroup> groups, int64_t keys_per_range) {
    if (keys_per_range < kKeyTile || keys_per_range % kKeyTile != 0) {
        throw Error("flash_decoding: keys_per_range must be a positive multiple of the key tile");
    }
    int64_t last_visible = 0;
    for (const AttentionGroup& group : groups) {
        for (int64_t r = 0; r < group.rows.num_rows; ++r) {
            last_visible = std::max(last_visible, group.rows.visible[r]);
        }
    }
    const int64_t num_groups = int64_t(groups.size());
    const int64_t num_ranges = (last_visible + keys_per_range - 1) / keys_per_range;
    // One partial per (group, range), kept until the merge: O(groups ·
    // ranges · rows · head_dim), a few hundred KB at SmolLM2's 8k context.
    // This thread's, reused across calls: a decode step allocates nothing.
    thread_local std::vector<SoftmaxRows> partials_scratch;
    std::vector<SoftmaxRows>& partials = partials_scratch;
    if (partials.size() < size_t(num_groups * num_ranges)) {
        partials.resize(size_t(num_groups * num_ranges));
    }
    // BEGIN SOLUTION lab09 (flash_decoding)
    // HINT: one parallel_for item per (group, range): reset partials[item], then
    // HINT: attend_key_range over [range · keys_per_range, (range + 1) · keys_per_range).
    // HINT: Then, on this thread (it is little work), per group: a fresh running state,
    // HINT: every range merged in order 0, 1, ... (prefill's order: the same bits), and
    // HINT: write_normalized.
    parallel_for(num_groups * num_ranges, [&](int64_t item) {
        const AttentionGroup& group = groups[size_t(item / num_ranges)];
        const int64_t begin = (item % num_ranges) * keys_per_range;
        SoftmaxRows& partial = partials[size_t(item)];
        partial.reset(group.rows.num_rows, group.kv.head_dim);
        attend_key_range(group.rows, group.kv, begin, begin + keys_per_range, partial);
    });
    // The merge is a few hundred floats per row: on this thread, without
    // a second fork and join of the workers.
    for (int64_t g = 0; g < num_groups; ++g) {
        const AttentionGroup& group = groups[size_t(g)];
        const int64_t head_dim = group.kv.head_dim;
        thread_local SoftmaxRows running;
        running.reset(group.rows.num_rows, head_dim);
        for (int64_t range = 0; range < num_ranges; ++range) {
            const SoftmaxRows& partial = partials[size_t(g * num_ranges + range)];
            for (int64_t r = 0; r < group.rows.num_rows; ++r) {
                merge_softmax_partial(running.max[size_t(r)], running.sum[size_t(r)],
                                      running.out.data() + r * head_dim, partial.max[size_t(r)],
                                      partial.sum[size_t(r)], partial.out.data() + r * head_dim,
                                      head_dim);
            }
        }
        write_normalized(running, group.rows.num_rows, head_dim, group.out);
    }
    // END SOLUTION
}

}  // namespace servelab
