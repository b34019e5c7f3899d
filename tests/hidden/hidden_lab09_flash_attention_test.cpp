// hidden_lab09_flash_attention_test.cpp — Lab 9 (FlashAttention on the CPU;
// chapter 11.7): the instructor's hidden tests of the online softmax, the
// merge, the tile loop and flash-decoding.
//
// These are the course autograder's hidden tests: they are left out of the
// student release, so never quote them in handouts. They check the contracts
// the handout states on inputs the public tests do not use: the softmax
// state checked after every tile (and the weights each update leaves), the
// max falling as well as rising, masked keys scattered inside a tile, merges
// in any order, a key range that starts past 0 and ends inside a tile, rows
// whose visible counts are in no order (GQA ratio 5), flash-decoding over
// groups of different lengths and called twice with different shapes. The
// expected values are computed here in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "../unit/softmax_oracle.h"
#include "../unit/test_util.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/flash_decoding.h"
#include "kernels/cpu/online_softmax.h"

namespace servelab {
namespace {

using test::RandomSource;

constexpr float kInf = std::numeric_limits<float>::infinity();

using Exact = test::ExactSoftmax;
using test::exact_softmax;

// Whether (max, sum, out) is the exact state `e` (the same max: out and sum
// are taken against it, so they are compared unnormalized).
std::string state_mismatch(float max, float sum, const float* out, const Exact& e) {
    if (e.sum == 0) {
        if (max != -kInf || sum != 0.0f) return "a state that saw no visible key must stay empty";
        for (size_t d = 0; d < e.out.size(); ++d)
            if (out[d] != 0.0f) return "a state that saw no visible key must keep a zero output";
        return "";
    }
    if (!(std::abs(max - e.max) <= 1e-6 * std::abs(e.max) + 1e-6))
        return "the max is " + std::to_string(max) + ", not the largest score seen so far " +
               std::to_string(e.max);
    if (!(std::abs(sum - e.sum) <= 1e-4 * e.sum))
        return "the sum is " + std::to_string(sum) +
               ", not Σ exp(s − max) = " + std::to_string(e.sum) + " over the keys seen so far";
    double scale = 1e-30;
    for (double o : e.out) scale = std::max(scale, std::abs(o));
    for (size_t d = 0; d < e.out.size(); ++d) {
        if (!(std::abs(out[d] - e.out[d]) <= 1e-4 * scale))
            return "the unnormalized output is not Σ exp(s − max)·v against the current max "
                   "(the output summed before must be rescaled by exp(m_old − m_new))";
    }
    return "";
}

// Scores whose tile maxima fall, rise and repeat, with masked keys anywhere
// in a tile and one tile wholly masked: the state after every tile must be
// the exact softmax of the scores so far, and the weights left in the tile
// must be exp(s − max_new).
TEST(HiddenLab09Softmax, TheStateIsExactAfterEveryTileWhateverTheOrderOfTheMaxima) {
    RandomSource rng(901);
    const int64_t head_dim = 23, tile = 7;
    const float offsets[] = {5, -3, 0, 5, 9, -20, 2};  // falls, rises, repeats
    std::vector<float> seen_scores, seen_values;
    float max = -kInf, sum = 0;
    std::vector<float> out(size_t(head_dim), 0.0f);
    for (size_t t = 0; t < std::size(offsets); ++t) {
        std::vector<float> scores = rng.normal(size_t(tile), 1.5f);
        for (float& s : scores) s += offsets[t];
        for (int64_t j = 0; j < tile; ++j)
            if (t == 2 || rng.integer(0, 3) == 0) scores[size_t(j)] = -kInf;  // tile 2: all
        const std::vector<float> values = rng.normal(size_t(tile * head_dim));
        std::vector<float> weights = scores;
        online_softmax_update(weights.data(), tile, max, sum, out.data(), head_dim);
        for (int64_t j = 0; j < tile; ++j) {
            const double want =
                scores[size_t(j)] == -kInf ? 0.0 : std::exp(scores[size_t(j)] - max);
            ASSERT_NEAR(weights[size_t(j)], want, 1e-5 * want + 1e-30)
                << "tile " << t << ", key " << j << ": the update must leave exp(s − max_new) "
                << "in scores (0 for a masked key); " << rng.trace();
        }
        for (int64_t j = 0; j < tile; ++j)  // what tile_accumulate would add
            for (int64_t d = 0; d < head_dim; ++d)
                out[size_t(d)] += weights[size_t(j)] * values[size_t(j * head_dim + d)];
        seen_scores.insert(seen_scores.end(), scores.begin(), scores.end());
        seen_values.insert(seen_values.end(), values.begin(), values.end());
        const std::string why =
            state_mismatch(max, sum, out.data(), exact_softmax(seen_scores, seen_values, head_dim));
        ASSERT_TRUE(why.empty()) << "after tile " << t << " (tile maxima offset " << offsets[t]
                                 << "): " << why << "; " << rng.trace();
    }
}

// Partials merged in shuffled order (a later range first, a smaller max
// into a larger one and back), empty partials among them: after every
// merge the state is the exact softmax of the partials merged so far.
TEST(HiddenLab09Softmax, MergesInAnyOrderAreExactAfterEveryMerge) {
    RandomSource rng(902);
    const int64_t head_dim = 9;
    struct Part {
        std::vector<float> scores, values;
    };
    std::vector<Part> parts;
    for (int p = 0; p < 7; ++p) {
        const int64_t n = p == 3 ? 4 : rng.integer(1, 30);
        Part part{rng.normal(size_t(n), 2.0f), rng.normal(size_t(n * head_dim))};
        const float offset = float(rng.integer(-8, 8));
        for (float& s : part.scores) s = p == 3 ? -kInf : s + offset;  // part 3 sees no key
        parts.push_back(part);
    }
    std::vector<size_t> order(parts.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng.engine());
    float max = -kInf, sum = 0;
    std::vector<float> out(size_t(head_dim), 0.0f), merged_scores, merged_values;
    for (size_t i : order) {
        const Exact part = exact_softmax(parts[i].scores, parts[i].values, head_dim);
        std::vector<float> part_out(part.out.begin(), part.out.end());
        merge_softmax_partial(max, sum, out.data(), part.sum == 0 ? -kInf : float(part.max),
                              float(part.sum), part_out.data(), head_dim);
        merged_scores.insert(merged_scores.end(), parts[i].scores.begin(), parts[i].scores.end());
        merged_values.insert(merged_values.end(), parts[i].values.begin(), parts[i].values.end());
        const std::string why = state_mismatch(
            max, sum, out.data(), exact_softmax(merged_scores, merged_values, head_dim));
        ASSERT_TRUE(why.empty()) << "after merging partial " << i
                                 << " (of 7, in shuffled order): " << why
                                 << "; both sides are scaled by exp(m − M) before they are "
                                 << "added, and an empty partial changes nothing; " << rng.trace();
    }
}

// A paged pool of one KV head: keys and values in shuffled pool rows, rows
// past num_keys NaN so that a key no row may see poisons the output.
struct Pool {
    int64_t head_dim = 0, num_keys = 0;
    std::vector<float> keys, values, q;
    std::vector<int64_t> pool_row, visible;
    std::vector<float> out;

    KvRows kv() const {
        return {keys.data(), values.data(), pool_row.data(), head_dim, num_keys, head_dim};
    }
    QueryRows rows() const { return {q.data(), visible.data(), int64_t(visible.size())}; }
    AttentionGroup group() { return {rows(), kv(), out.data()}; }
};

Pool make_pool(RandomSource& rng, int64_t head_dim, std::vector<int64_t> visible) {
    Pool p;
    p.head_dim = head_dim;
    p.visible = std::move(visible);
    p.num_keys = *std::max_element(p.visible.begin(), p.visible.end());
    const int64_t pool_rows = p.num_keys + 5;
    p.keys = rng.normal(size_t(pool_rows * head_dim), 2.0f);
    p.values = rng.normal(size_t(pool_rows * head_dim));
    p.pool_row.resize(size_t(pool_rows));
    std::iota(p.pool_row.begin(), p.pool_row.end(), 0);
    std::shuffle(p.pool_row.begin(), p.pool_row.end(), rng.engine());
    for (int64_t j = p.num_keys; j < pool_rows; ++j) {
        const int64_t row = p.pool_row[size_t(j)];
        std::fill_n(p.keys.begin() + row * head_dim, head_dim, NAN);
        std::fill_n(p.values.begin() + row * head_dim, head_dim, NAN);
    }
    p.pool_row.resize(size_t(p.num_keys));
    p.q = rng.normal(p.visible.size() * size_t(head_dim), 1.0f / std::sqrt(float(head_dim)));
    p.out.assign(p.visible.size() * size_t(head_dim), NAN);
    return p;
}

// Row r's exact softmax over keys [begin, min(end, visible[r])).
Exact exact_row(const Pool& p, int64_t r, int64_t begin, int64_t end) {
    std::vector<float> scores, values;
    for (int64_t j = begin; j < std::min(end, p.visible[size_t(r)]); ++j) {
        const float* k = p.keys.data() + p.pool_row[size_t(j)] * p.head_dim;
        const float* v = p.values.data() + p.pool_row[size_t(j)] * p.head_dim;
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim; ++d)
            dot += double(p.q[size_t(r * p.head_dim + d)]) * k[d];
        scores.push_back(float(dot));
        values.insert(values.end(), v, v + p.head_dim);
    }
    return exact_softmax(scores, values, p.head_dim);
}

// The worst |out − o/l| of any row, relative to 1 (values are ~N(0, 1)).
double worst_output_error(const Pool& p) {
    double worst = 0;
    for (int64_t r = 0; r < int64_t(p.visible.size()); ++r) {
        const Exact e = exact_row(p, r, 0, p.num_keys);
        for (int64_t d = 0; d < p.head_dim; ++d) {
            const double got = p.out[size_t(r * p.head_dim + d)];
            if (!std::isfinite(got)) return INFINITY;
            worst = std::max(worst, std::abs(got - e.out[size_t(d)] / e.sum));
        }
    }
    return worst;
}

// A key range that starts past 0 and ends inside a tile, rows whose visible
// counts are in no order, some before the range, some inside, some past it.
TEST(HiddenLab09TileLoop, AttendKeyRangeTakesExactlyTheVisibleKeysOfItsRange) {
    RandomSource rng(903);
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{48, 101}, {128, 256}, {16, 17}}) {
        std::vector<int64_t> visible = {begin + 9, 3, end + 40, begin, begin + 1, end, end - 1, 77};
        std::shuffle(visible.begin(), visible.end(), rng.engine());
        Pool p = make_pool(rng, 40, visible);
        SoftmaxRows state;
        state.reset(int64_t(visible.size()), p.head_dim);
        attend_key_range(p.rows(), p.kv(), begin, end, state);
        for (size_t r = 0; r < visible.size(); ++r) {
            const std::string why =
                state_mismatch(state.max[r], state.sum[r], state.out.data() + r * p.head_dim,
                               exact_row(p, int64_t(r), begin, end));
            ASSERT_TRUE(why.empty())
                << "keys [" << begin << ", " << end << "), the row that sees " << visible[r]
                << " keys: " << why << "; a row takes the keys j of [begin, end) with "
                << "j < visible[r], no other; " << rng.trace();
        }
    }
}

// Prefill of one GQA group of 5 heads over several ranges, each row with its
// own visible count in no particular order (1 and exact range edges among
// them), on an odd head_dim.
TEST(HiddenLab09TileLoop, PrefillEqualsExactAttentionForRowsInAnyOrder) {
    RandomSource rng(904);
    for (int64_t longest : {129, 383, 640}) {
        std::vector<int64_t> visible = {longest, 1, 128, 256, 127, 17};
        for (int i = 0; i < 9; ++i) visible.push_back(rng.integer(1, longest));
        std::shuffle(visible.begin(), visible.end(), rng.engine());
        Pool p = make_pool(rng, 24, visible);
        flash_attention_prefill(p.group());
        ASSERT_LT(worst_output_error(p), 3e-5)
            << "15 rows (a GQA group of 5 heads × 3 tokens) seeing up to " << longest
            << " keys: every range must be walked from a fresh state and merged in, and row r "
            << "must see keys 0 .. visible[r] − 1 and no other; " << rng.trace();
    }
}

// Groups of different lengths (one far shorter than the rest: most of its
// ranges are empty) and different row counts in one call, for several range
// sizes; then the same call again with fewer ranges (the scratch partials
// reused must start empty).
TEST(HiddenLab09Decoding, GroupsOfDifferentLengthsAndARepeatedCall) {
    RandomSource rng(905);
    for (int64_t keys_per_range : {16, 48, 128, 4096}) {
        for (int64_t longest : {700, 90}) {
            std::vector<Pool> pools;
            pools.push_back(make_pool(rng, 32, {longest, longest - 1, longest - 2}));
            pools.push_back(make_pool(rng, 32, {5, 4}));
            pools.push_back(make_pool(rng, 32, {longest / 2 + 3}));
            std::vector<AttentionGroup> groups;
            for (Pool& p : pools) groups.push_back(p.group());
            flash_decoding(groups, keys_per_range);
            for (size_t g = 0; g < pools.size(); ++g) {
                ASSERT_LT(worst_output_error(pools[g]), 3e-5)
                    << "ranges of " << keys_per_range << " keys, group " << g << " of 3 seeing "
                    << pools[g].num_keys << " keys (the longest " << longest << "): every "
                    << "range of every group computed from an empty partial and merged once, "
                    << "a range a group does not reach changing nothing; " << rng.trace();
            }
        }
    }
}

// The same bits as prefill for a single row at every length around the
// range edges, group by group in one call.
TEST(HiddenLab09Decoding, EveryGroupGetsThePrefillBitsAroundRangeEdges) {
    RandomSource rng(906);
    std::vector<Pool> decode;
    for (int64_t keys : {127, 128, 129, 255, 257, 300})
        decode.push_back(make_pool(rng, 16, {keys}));
    std::vector<Pool> prefill = decode;
    std::vector<AttentionGroup> groups;
    for (Pool& p : decode) groups.push_back(p.group());
    flash_decoding(groups, kKeysPerRange);
    for (size_t g = 0; g < decode.size(); ++g) {
        flash_attention_prefill(prefill[g].group());
        for (size_t i = 0; i < decode[g].out.size(); ++i) {
            ASSERT_EQ(decode[g].out[i], prefill[g].out[i])
                << decode[g].num_keys << " keys, output " << i << ": flash_decoding with "
                << "kKeysPerRange must walk prefill's ranges and merge them in order 0, 1, 2, "
                << "...; " << rng.trace();
        }
    }
}

}  // namespace
}  // namespace servelab
