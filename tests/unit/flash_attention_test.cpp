// flash_attention_test.cpp — Lab 9's tests: the online softmax, its merge, the tile loop of
// prefill and the key split of decode, each against the plain computation.
//
// Chapter 11.7 (FlashAttention). Every input is drawn fresh (the seed is in
// each failure message), every output poisoned with NaN first. The plain
// references: a softmax over all scores at once in double precision, and
// paged_attention (kernels/cpu/paged_attention.h), which holds every score
// of a query and normalizes once. Where a wrong output matches what a
// plausible mistake would give, the message names the mistake.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/flash_decoding.h"
#include "kernels/cpu/online_softmax.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_flash_attention.h"
#include "tests/unit/softmax_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

constexpr float kInf = std::numeric_limits<float>::infinity();

// ------------------------------------------------------------------ online softmax

using Softmax = test::ExactSoftmax;
using test::exact_softmax;

// Folds `scores` (and `values`) tile by tile through online_softmax_update,
// adding each tile's weights × values as tile_accumulate would.
struct RowState {
    float max = -kInf, sum = 0.0f;
    std::vector<float> out;
};

RowState fold_tiles(const std::vector<float>& scores, const std::vector<float>& values,
                    int64_t head_dim, int64_t tile) {
    RowState state;
    state.out.assign(size_t(head_dim), 0.0f);
    for (size_t j0 = 0; j0 < scores.size(); j0 += size_t(tile)) {
        const size_t n = std::min(size_t(tile), scores.size() - j0);
        std::vector<float> weights(scores.begin() + long(j0), scores.begin() + long(j0 + n));
        online_softmax_update(weights.data(), int64_t(n), state.max, state.sum, state.out.data(),
                              head_dim);
        for (size_t jj = 0; jj < n; ++jj) {
            for (int64_t d = 0; d < head_dim; ++d) {
                state.out[size_t(d)] +=
                    weights[jj] * values[(j0 + jj) * size_t(head_dim) + size_t(d)];
            }
        }
    }
    return state;
}

// The output o / l both ways, and how far apart, relative to the largest |value|.
double normalized_error(const RowState& got, const Softmax& want) {
    double worst = 0, largest = 1e-30;
    for (size_t d = 0; d < want.out.size(); ++d) {
        const double expected = want.out[d] / want.sum;
        const double actual = double(got.out[d]) / double(got.sum);
        if (!std::isfinite(actual)) return INFINITY;
        worst = std::max(worst, std::fabs(actual - expected));
        largest = std::max(largest, std::fabs(expected));
    }
    return worst / largest;
}

TEST(OnlineSoftmax, TileByTileEqualsTheSoftmaxOfAllScores) {
    RandomSource rng;
    for (int trial = 0; trial < 40; ++trial) {
        const int64_t head_dim = rng.integer(1, 80);
        const int64_t num_keys = rng.integer(1, 300);
        const int64_t tile = trial % 2 == 0 ? kKeyTile : rng.integer(1, 40);
        const float spread = trial % 3 == 0 ? 8.0f : 1.0f;
        const std::vector<float> scores = rng.normal(size_t(num_keys), spread);
        const std::vector<float> values = rng.normal(size_t(num_keys * head_dim));
        const Softmax want = exact_softmax(scores, values, head_dim);
        const RowState got = fold_tiles(scores, values, head_dim, tile);
        ASSERT_NEAR(got.max, want.max, 1e-6 * std::fabs(want.max))
            << "the running max must end as the largest score; " << rng.trace();
        ASSERT_NEAR(got.sum, want.sum, 1e-4 * want.sum)
            << "the running sum must end as Σ exp(s − max) over every key; " << rng.trace();
        ASSERT_LT(normalized_error(got, want), 1e-4)
            << fmt::format("{} keys in tiles of {}, head_dim {}: ", num_keys, tile, head_dim)
            << "the sum is right but the output is not: when a tile raises the max, the output "
               "summed so far must be rescaled by exp(m_old − m_new) too (a missing rescale of "
               "the running output); "
            << rng.trace();
    }
}

TEST(OnlineSoftmax, RescalesTheRunningOutputWhenTheMaxGrows) {
    // Scores that rise tile after tile: every tile raises the max, so every
    // tile must rescale what was summed before it.
    RandomSource rng;
    const int64_t head_dim = 64, num_keys = 96;
    std::vector<float> scores(static_cast<size_t>(num_keys));
    for (int64_t j = 0; j < num_keys; ++j)
        scores[size_t(j)] = 0.05f * float(j) + 0.01f * rng.normal(1)[0];
    const std::vector<float> values = rng.normal(size_t(num_keys * head_dim));
    const Softmax want = exact_softmax(scores, values, head_dim);
    const RowState got = fold_tiles(scores, values, head_dim, kKeyTile);
    ASSERT_NEAR(got.sum, want.sum, 1e-4 * want.sum)
        << "the sum must be rescaled by exp(m_old − m_new) when the max grows; " << rng.trace();
    EXPECT_LT(normalized_error(got, want), 1e-4)
        << "rising scores: the output is wrong though the sum is right — the running output "
           "was not rescaled by exp(m_old − m_new) when the max grew (a missing rescale); "
        << rng.trace();
}

TEST(OnlineSoftmax, AFullyMaskedTileChangesNothingAndGivesNoNaN) {
    RandomSource rng;
    const int64_t head_dim = 16;
    // From an empty state (the first tile of a row that sees none of it) and
    // from a state that has seen keys.
    for (const bool seen_before : {false, true}) {
        float max = -kInf, sum = 0.0f;
        std::vector<float> out(size_t(head_dim), 0.0f);
        if (seen_before) {
            max = 1.5f;
            sum = 3.25f;
            out = rng.normal(size_t(head_dim));
        }
        const std::vector<float> out_before = out;
        std::vector<float> masked(size_t(kKeyTile), -kInf);
        online_softmax_update(masked.data(), kKeyTile, max, sum, out.data(), head_dim);
        for (float w : masked) {
            ASSERT_EQ(w, 0.0f) << "a masked key (score −inf) must weigh exactly 0, not NaN: "
                                  "exp(−inf − (−inf)) is NaN, so a tile with no visible key "
                                  "must be skipped; "
                               << rng.trace();
        }
        EXPECT_EQ(max, seen_before ? 1.5f : -kInf) << "a fully masked tile must leave the max";
        EXPECT_EQ(sum, seen_before ? 3.25f : 0.0f) << "a fully masked tile must leave the sum";
        for (int64_t d = 0; d < head_dim; ++d) {
            ASSERT_EQ(out[size_t(d)], out_before[size_t(d)])
                << "a fully masked tile must leave the output as it was (no NaN, no rescale)";
        }
    }
}

TEST(OnlineSoftmax, MaskedScoresWeighNothingInAPartlyMaskedTile) {
    RandomSource rng;
    const int64_t head_dim = 8;
    std::vector<float> scores = rng.normal(size_t(kKeyTile), 2.0f);
    for (int64_t j = 5; j < kKeyTile; ++j) scores[size_t(j)] = -kInf;
    const std::vector<float> values = rng.normal(size_t(kKeyTile * head_dim));
    const Softmax want = exact_softmax(scores, values, head_dim);
    const RowState got = fold_tiles(scores, values, head_dim, kKeyTile);
    EXPECT_NEAR(got.sum, want.sum, 1e-5 * want.sum) << "masked keys must add nothing to the sum";
    EXPECT_LT(normalized_error(got, want), 1e-5) << rng.trace();
}

// ------------------------------------------------------------------ merge

TEST(OnlineSoftmaxMerge, PartialsOfKeyRangesMergeToTheWholeSoftmax) {
    RandomSource rng;
    for (int trial = 0; trial < 40; ++trial) {
        const int64_t head_dim = rng.integer(1, 70);
        const int64_t num_ranges = rng.integer(2, 9);
        // Ranges with very different scores: their maxes differ by several units.
        std::vector<float> scores, values;
        std::vector<RowState> partials;
        for (int64_t r = 0; r < num_ranges; ++r) {
            const int64_t n = rng.integer(1, 50);
            std::vector<float> s = rng.normal(size_t(n), 1.0f);
            const float offset = float(rng.integer(-6, 6));
            for (float& x : s) x += offset;
            const std::vector<float> v = rng.normal(size_t(n * head_dim));
            partials.push_back(fold_tiles(s, v, head_dim, kKeyTile));
            scores.insert(scores.end(), s.begin(), s.end());
            values.insert(values.end(), v.begin(), v.end());
        }
        RowState merged;
        merged.out.assign(size_t(head_dim), 0.0f);  // the empty state: no key seen
        for (const RowState& p : partials) {
            merge_softmax_partial(merged.max, merged.sum, merged.out.data(), p.max, p.sum,
                                  p.out.data(), head_dim);
        }
        const Softmax want = exact_softmax(scores, values, head_dim);
        ASSERT_LT(normalized_error(merged, want), 1e-4)
            << num_ranges << " ranges: "
            << "each partial's sum and output were taken against its own max; both sides must "
               "be scaled by exp(m − M), M the larger max, before they are added (a merge that "
               "sums unnormalized partials); "
            << rng.trace();
        ASSERT_NEAR(merged.max, want.max, 1e-6 * std::fabs(want.max) + 1e-6)
            << "the merged max must be the larger of the two";
    }
}

TEST(OnlineSoftmaxMerge, AnEmptyPartialChangesNothingAndMergingIntoEmptyCopies) {
    RandomSource rng;
    const int64_t head_dim = 12;
    const std::vector<float> part_out = rng.normal(size_t(head_dim));
    // Into the empty state: the result is the partial itself.
    float max = -kInf, sum = 0.0f;
    std::vector<float> out(size_t(head_dim), 0.0f);
    merge_softmax_partial(max, sum, out.data(), 0.75f, 2.5f, part_out.data(), head_dim);
    EXPECT_EQ(max, 0.75f) << "merging into an empty state must take the partial's max";
    EXPECT_FLOAT_EQ(sum, 2.5f) << "merging into an empty state must take the partial's sum";
    for (int64_t d = 0; d < head_dim; ++d) {
        ASSERT_FLOAT_EQ(out[size_t(d)], part_out[size_t(d)])
            << "merging into an empty state must copy the partial's output";
    }
    // An empty partial (a range this row sees none of): nothing changes, no NaN.
    const std::vector<float> empty_out(size_t(head_dim), 0.0f);
    const std::vector<float> before = out;
    merge_softmax_partial(max, sum, out.data(), -kInf, 0.0f, empty_out.data(), head_dim);
    EXPECT_EQ(max, 0.75f) << "an empty partial must not change the max";
    EXPECT_FLOAT_EQ(sum, 2.5f) << "an empty partial must not change the sum";
    for (int64_t d = 0; d < head_dim; ++d) {
        ASSERT_EQ(out[size_t(d)], before[size_t(d)])
            << "an empty partial (max −inf) must change nothing: exp(−inf − (−inf)) is NaN";
    }
}

// ------------------------------------------------------------------ tile loops

// A random paged pool and query rows of one KV head.
struct Problem {
    int64_t head_dim = 64, num_rows = 0, num_keys = 0;
    std::vector<float> keys, values, q;
    std::vector<int64_t> pool_row, visible;
    std::vector<float> out;

    KvRows kv() const {
        return {keys.data(), values.data(), pool_row.data(), head_dim, num_keys, head_dim};
    }
    QueryRows rows() const { return {q.data(), visible.data(), num_rows}; }
    AttentionGroup group() { return {rows(), kv(), out.data()}; }
};

// Rows whose visible counts are `visible`, over `num_keys` keys in shuffled
// pool rows. Pool rows past num_keys hold NaN: a kernel that reads a key no
// row may see poisons its output.
Problem make_problem(RandomSource& rng, int64_t head_dim, const std::vector<int64_t>& visible,
                     int64_t num_keys) {
    Problem p;
    p.head_dim = head_dim;
    p.num_rows = int64_t(visible.size());
    p.num_keys = num_keys;
    p.visible = visible;
    const int64_t pool_rows = num_keys + 7;
    p.keys = rng.normal(size_t(pool_rows * head_dim), 2.0f);
    p.values = rng.normal(size_t(pool_rows * head_dim));
    p.pool_row.resize(size_t(pool_rows));
    std::iota(p.pool_row.begin(), p.pool_row.end(), 0);
    for (size_t i = p.pool_row.size() - 1; i > 0; --i) {
        std::swap(p.pool_row[i], p.pool_row[size_t(rng.integer(0, int64_t(i)))]);
    }
    for (int64_t j = num_keys; j < pool_rows; ++j) {
        const int64_t row = p.pool_row[size_t(j)];
        std::fill(p.keys.begin() + row * head_dim, p.keys.begin() + (row + 1) * head_dim, NAN);
        std::fill(p.values.begin() + row * head_dim, p.values.begin() + (row + 1) * head_dim, NAN);
    }
    p.pool_row.resize(size_t(num_keys));
    p.q = rng.normal(size_t(p.num_rows * head_dim), 1.0f / std::sqrt(float(head_dim)));
    p.out.assign(size_t(p.num_rows * head_dim), NAN);
    return p;
}

// Row r's attention in double: softmax(q_r · k_j) over j < visible[r], times v.
std::vector<float> plain_attention(const Problem& p) {
    std::vector<float> out(size_t(p.num_rows * p.head_dim));
    for (int64_t r = 0; r < p.num_rows; ++r) {
        std::vector<float> scores(size_t(p.visible[size_t(r)])), values;
        for (int64_t j = 0; j < p.visible[size_t(r)]; ++j) {
            const float* k = p.keys.data() + p.pool_row[size_t(j)] * p.head_dim;
            const float* v = p.values.data() + p.pool_row[size_t(j)] * p.head_dim;
            double dot = 0;
            for (int64_t d = 0; d < p.head_dim; ++d)
                dot += double(p.q[size_t(r * p.head_dim + d)]) * k[d];
            scores[size_t(j)] = float(dot);
            values.insert(values.end(), v, v + p.head_dim);
        }
        const Softmax s = exact_softmax(scores, values, p.head_dim);
        for (int64_t d = 0; d < p.head_dim; ++d) {
            out[size_t(r * p.head_dim + d)] = float(s.out[size_t(d)] / s.sum);
        }
    }
    return out;
}

double worst_error(const std::vector<float>& got, const std::vector<float>& want) {
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        worst = std::max(worst, double(std::fabs(got[i] - want[i])));
    }
    return worst;
}

// Causal rows as prefill lays them out: `queries` tokens ending at key
// num_keys − 1, `group` heads each.
std::vector<int64_t> causal_visible(int64_t first_position, int64_t queries, int64_t group) {
    std::vector<int64_t> visible;
    for (int64_t t = 0; t < queries; ++t) {
        for (int64_t h = 0; h < group; ++h) visible.push_back(first_position + t + 1);
    }
    return visible;
}

constexpr const char* kMaskMistake =
    "row r may see keys 0 .. visible[r] − 1 and no other: its own position included, none "
    "after it (a causal mask off by one at a tile's edge)";

TEST(FlashAttentionPrefill, EqualsPlainAttentionForAnyLengthAndTileEdge) {
    RandomSource rng;
    const int64_t head_dims[] = {64, 128, 16, 40};
    for (int trial = 0; trial < 40; ++trial) {
        const int64_t head_dim = head_dims[size_t(trial) % std::size(head_dims)];
        const int64_t group = rng.integer(1, 4);
        const int64_t queries = rng.integer(1, 12);
        const int64_t num_keys = queries + rng.integer(0, trial % 4 == 0 ? 700 : 60);
        Problem p = make_problem(rng, head_dim, causal_visible(num_keys - queries, queries, group),
                                 num_keys);
        flash_attention_prefill(p.group());
        const double worst = worst_error(p.out, plain_attention(p));
        ASSERT_LT(worst, 3e-5) << fmt::format(
            "{} queries × {} heads over {} keys, head_dim {}: {}; or a range or tile not merged "
            "in; {}",
            queries, group, num_keys, head_dim, kMaskMistake, rng.trace());
    }
}

TEST(FlashAttentionPrefill, QueriesAtEveryPositionAroundATileEdge) {
    // One query per row at positions 0 .. 40: the first key of a tile, its
    // last, and one either side, for ranges and tiles alike.
    RandomSource rng;
    for (const int64_t num_keys : {1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129, 130}) {
        std::vector<int64_t> visible;
        for (int64_t v = std::max<int64_t>(1, num_keys - 20); v <= num_keys; ++v)
            visible.push_back(v);
        Problem p = make_problem(rng, 64, visible, num_keys);
        flash_attention_prefill(p.group());
        const std::vector<float> want = plain_attention(p);
        for (int64_t r = 0; r < p.num_rows; ++r) {
            const std::vector<float> got_row(p.out.begin() + r * 64, p.out.begin() + (r + 1) * 64);
            const std::vector<float> want_row(want.begin() + r * 64, want.begin() + (r + 1) * 64);
            ASSERT_LT(worst_error(got_row, want_row), 3e-5) << fmt::format(
                "the row that sees {} keys (its position {}), of {} keys: {}; {}",
                visible[size_t(r)], visible[size_t(r)] - 1, num_keys, kMaskMistake, rng.trace());
        }
    }
}

TEST(FlashAttentionPrefill, AttendKeyRangeReadsNoKeyPastTheLastVisibleOne) {
    // Keys past the largest visible count are NaN in the pool (make_problem):
    // the tiles wholly above the diagonal must never be computed.
    RandomSource rng;
    for (const int64_t visible_count : {1, 5, 16, 17, 100}) {
        Problem p = make_problem(rng, 64, {visible_count}, visible_count);
        SoftmaxRows state;
        state.reset(1, 64);
        attend_key_range(p.rows(), p.kv(), 0, kKeysPerRange, state);
        for (float x : state.out) {
            ASSERT_TRUE(std::isfinite(x))
                << visible_count
                << " visible keys: a key past the last visible one was read "
                   "(tiles above the diagonal must be skipped, and the last tile cut at the "
                   "visible count); "
                << rng.trace();
        }
        EXPECT_TRUE(std::isfinite(state.sum[0]) && state.sum[0] > 0);
    }
}

TEST(FlashAttentionPrefill, ARowThatSeesNoKeyOfARangeKeepsAnEmptyState) {
    // Two rows: one sees 3 keys, the other 40. Over keys [16, 32) the first
    // sees nothing: its state must stay empty, not NaN.
    RandomSource rng;
    Problem p = make_problem(rng, 64, {3, 40}, 40);
    SoftmaxRows state;
    state.reset(2, 64);
    attend_key_range(p.rows(), p.kv(), 16, 32, state);
    EXPECT_EQ(state.max[0], -kInf) << "a row that sees no key of the range must keep max −inf";
    EXPECT_EQ(state.sum[0], 0.0f) << "a row that sees no key of the range must keep sum 0";
    for (int64_t d = 0; d < 64; ++d) {
        ASSERT_EQ(state.out[size_t(d)], 0.0f)
            << "a row that sees no key of the range must keep a zero output (no NaN from "
               "exp(−inf − (−inf)))";
    }
    EXPECT_TRUE(std::isfinite(state.max[1]) && state.sum[1] > 0)
        << "the row that sees keys 16 .. 31 must have taken them";
}

// The engine's kernel against paged_attention on a random SmolLM2-shaped
// pool (9 heads, 3 KV heads of 64) with its blocks in reverse order: the
// worst absolute difference.
double engine_kernel_error(RandomSource& rng, int64_t queries, int64_t num_keys) {
    const int64_t heads = 9, kv_heads = 3, head_dim = 64, block_size = 16;
    const int64_t blocks = (num_keys + block_size - 1) / block_size;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::reverse(table.begin(), table.end());
    const size_t pool = size_t(blocks * block_size * kv_heads * head_dim);
    const std::vector<float> keys = rng.normal(pool, 2.0f), values = rng.normal(pool);
    const std::vector<float> q = rng.normal(size_t(queries * heads * head_dim));
    std::vector<float> want(q.size(), NAN), got(q.size(), NAN);
    const AttentionShape shape{queries, num_keys, heads, kv_heads, head_dim};
    paged_attention(q.data(), keys.data(), values.data(), table.data(), block_size, want.data(),
                    shape);
    paged_flash_attention(q.data(), keys.data(), values.data(), table.data(), block_size,
                          got.data(), shape);
    return worst_error(got, want);
}

TEST(FlashAttentionPrefill, TheEnginesKernelEqualsPagedAttentionOnAPrefill) {
    // paged_flash_attention lays out query tiles and takes the prefill path
    // for more than kQueriesPerTile queries.
    RandomSource rng;
    for (const auto& [queries, cached] :
         {std::pair<int64_t, int64_t>{37, 0}, {kQueriesPerTile + 1, 300}, {64, 1000}}) {
        ASSERT_LT(engine_kernel_error(rng, queries, queries + cached), 3e-5)
            << queries << " queries after " << cached << " cached keys; " << rng.trace();
    }
}

// ------------------------------------------------------------------ flash-decoding

TEST(FlashDecoding, TheSplitEqualsPlainAttentionForAnySplit) {
    RandomSource rng;
    for (int trial = 0; trial < 30; ++trial) {
        const int64_t head_dim = trial % 2 == 0 ? 64 : 16;
        const int64_t num_groups = rng.integer(1, 3);
        const int64_t queries = rng.integer(1, 4), group = rng.integer(1, 4);
        const int64_t num_keys = queries + rng.integer(0, 900);
        const int64_t keys_per_range = kKeyTile * rng.integer(1, 12);
        std::vector<Problem> problems;
        std::vector<AttentionGroup> groups;
        for (int64_t g = 0; g < num_groups; ++g) {
            problems.push_back(make_problem(
                rng, head_dim, causal_visible(num_keys - queries, queries, group), num_keys));
        }
        for (Problem& p : problems) groups.push_back(p.group());
        flash_decoding(groups, keys_per_range);
        for (const Problem& p : problems) {
            ASSERT_LT(worst_error(p.out, plain_attention(p)), 3e-5) << fmt::format(
                "{} keys in ranges of {}, {} groups of {} rows: every range must be computed "
                "and every range's partial merged into the result exactly once; {}",
                num_keys, keys_per_range, num_groups, p.num_rows, rng.trace());
        }
    }
}

TEST(FlashDecoding, GivesTheSameBitsAsThePrefillSchedule) {
    // With the engine's ranges, decode and prefill compute a query the same
    // way: greedy speculative decoding and recomputed prompts rely on it.
    RandomSource rng;
    for (const int64_t num_keys : {2, 16, 129, 1000, 2100}) {
        Problem decode = make_problem(rng, 64, causal_visible(num_keys - 2, 2, 3), num_keys);
        Problem prefill = decode;
        const AttentionGroup group = decode.group();
        flash_decoding({&group, 1}, kKeysPerRange);
        flash_attention_prefill(prefill.group());
        for (size_t i = 0; i < decode.out.size(); ++i) {
            ASSERT_EQ(decode.out[i], prefill.out[i])
                << num_keys << " keys, output " << i
                << ": flash_decoding must walk the same ranges as flash_attention_prefill and "
                   "merge them in the same order (0, 1, 2, ...); "
                << rng.trace();
        }
    }
}

TEST(FlashDecodingArguments, RefusesARangeThatIsNotAMultipleOfTheTile) {
    RandomSource rng;
    Problem p = make_problem(rng, 16, {4}, 4);
    const AttentionGroup group = p.group();
    EXPECT_THROW(flash_decoding({&group, 1}, 0), Error);
    EXPECT_THROW(flash_decoding({&group, 1}, kKeyTile + 1), Error);
}

TEST(FlashDecoding, TheEnginesKernelEqualsPagedAttentionOnADecodeStep) {
    RandomSource rng;
    for (const int64_t num_keys : {1, 17, 128, 129, 3000}) {
        for (const int64_t queries : {int64_t(1), std::min<int64_t>(num_keys, 5)}) {
            ASSERT_LT(engine_kernel_error(rng, queries, num_keys), 3e-5)
                << queries << " queries over " << num_keys << " keys; " << rng.trace();
        }
    }
}

}  // namespace
}  // namespace servelab
