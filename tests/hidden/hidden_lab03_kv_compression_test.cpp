// hidden_lab03_kv_compression_test.cpp — Lab 3's hidden tests (chapter 11.3): the
// GQA/MQA head mapping, int8 KV rows and MLA's absorbed attention on inputs the
// public tests do not use (head ratios of 3, 5 and 8, odd and one-element rows,
// rows whose largest entry is negative, an int8 cache of odd heads, MLA shapes
// down to a width of 1, and one query after many keys).
//
// The instructor's hidden tests: tools/labkit/student_release.py leaves this file out of
// the student release, so never quote it in a handout. They check the contracts the
// handout states, so a solution tuned to the public tests' shapes fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/head_mapping.h"
#include "kernels/cpu/kv_quant.h"
#include "reference/attention/mla_attention.h"
#include "reference/kv/kv_cache.h"

namespace servelab {
namespace {

using test::GuardedArray;
using test::RandomSource;

// ---------------------------------------------------------------- head mapping

// Every query head of head counts the public tests do not use: consecutive
// groups of num_heads / num_kv_heads query heads share a KV head.
TEST(HiddenLab03HeadMapping, ConsecutiveGroupsForEveryRatio) {
    for (const auto& [heads, kv_heads] : std::vector<std::pair<int64_t, int64_t>>{
             {12, 4}, {15, 5}, {15, 3}, {7, 7}, {7, 1}, {1, 1}, {64, 8}, {10, 2}}) {
        for (int64_t h = 0; h < heads; ++h) {
            EXPECT_EQ(kv_head_for_query_head(h, heads, kv_heads), h / (heads / kv_heads))
                << "query head " << h << " of " << heads << " on " << kv_heads
                << " KV heads: heads [g * G, (g + 1) * G) read KV head g, G = num_heads / "
                   "num_kv_heads (MHA: h itself, MQA: 0)";
        }
    }
}

// The attention kernel reads its KV heads through the mapping: a ratio of 5
// and of 3 must equal attention on KV heads repeated for every query head.
TEST(HiddenLab03HeadMapping, GroupedAttentionEqualsAttentionOnRepeatedKvHeads) {
    RandomSource random(301);
    SCOPED_TRACE(random.trace());
    for (const auto& [heads, kv_heads] :
         std::vector<std::pair<int64_t, int64_t>>{{10, 2}, {9, 3}}) {
        const int64_t tokens = 6, dim = 4;
        const std::vector<float> q = random.normal(size_t(tokens * heads * dim));
        const std::vector<float> k = random.normal(size_t(tokens * kv_heads * dim));
        const std::vector<float> v = random.normal(size_t(tokens * kv_heads * dim));
        // The MHA twin: query head h gets a copy of KV head h / group.
        std::vector<float> k_rep(q.size()), v_rep(q.size());
        for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t h = 0; h < heads; ++h) {
                const int64_t from = (t * kv_heads + h / (heads / kv_heads)) * dim;
                std::copy_n(k.begin() + from, dim, k_rep.begin() + (t * heads + h) * dim);
                std::copy_n(v.begin() + from, dim, v_rep.begin() + (t * heads + h) * dim);
            }
        }
        std::vector<float> grouped(q.size(), std::nanf("")), twin(q.size(), std::nanf(""));
        attention_causal(q.data(), k.data(), v.data(), grouped.data(),
                         {tokens, tokens, heads, kv_heads, dim});
        attention_causal(q.data(), k_rep.data(), v_rep.data(), twin.data(),
                         {tokens, tokens, heads, heads, dim});
        EXPECT_TRUE(test::equal_or_explain(
            "attention of " + std::to_string(heads) + " heads on " + std::to_string(kv_heads) +
                " KV heads against its MHA twin (each KV head repeated for its group): the "
                "head mapping must give consecutive query heads one KV head",
            grouped, twin, 1e-6));
    }
}

// ---------------------------------------------------------------- int8 rows

// Quantizes `row` through guarded, poisoned arrays and checks the contract:
// scale = max|x| / 127, each code within half a step of x / scale, the
// largest magnitude at ±127, and dequantization code * scale exactly.
void expect_int8_row_contract(const std::vector<float>& row, const std::string& what) {
    const int64_t n = int64_t(row.size());
    const GuardedArray<float> x(row);
    GuardedArray<int8_t> codes(row.size(), int8_t(99));  // poisoned
    const float scale = quantize_int8_row(x.data(), n, codes.data());
    float largest = 0.0f;
    size_t largest_at = 0;
    for (size_t i = 0; i < row.size(); ++i) {
        if (std::fabs(row[i]) > largest) largest = std::fabs(row[i]), largest_at = i;
    }
    ASSERT_FLOAT_EQ(scale, largest / 127.0f)
        << what << ": scale = max |x| / 127, over every one of the " << n << " entries";
    for (size_t i = 0; i < row.size(); ++i) {
        ASSERT_LE(std::fabs(double(codes[i]) - double(row[i]) / scale), 0.5 + 1e-3)
            << what << ", element " << i << ": x / scale = " << row[i] / scale << " became code "
            << int(codes[i]) << ": each code is round(x / scale), every element written";
    }
    EXPECT_EQ(int(codes[largest_at]), row[largest_at] < 0 ? -127 : 127)
        << what << ": the largest magnitude maps to the largest code, with its sign";
    GuardedArray<float> back(row.size());  // NaN until written
    dequantize_int8_row(codes.data(), scale, n, back.data());
    for (size_t i = 0; i < row.size(); ++i) {
        ASSERT_EQ(back[i], float(codes[i]) * scale)
            << what << ", element " << i << ": dequantization is code * scale, every element";
    }
}

// Lengths of 1, 2, odd and long; the largest entry negative, first, last.
TEST(HiddenLab03Int8, RowsOfOddLengthsWithTheLargestEntryAnywhere) {
    RandomSource random(302);
    SCOPED_TRACE(random.trace());
    for (const int64_t n : {1, 2, 5, 127, 129, 1000}) {
        for (const int64_t where : {int64_t(0), n - 1, n / 2}) {
            std::vector<float> row = random.normal(size_t(n), 0.3f);
            row[size_t(where)] = (where % 2 == 0 ? -1.0f : 1.0f) * 4.0f;
            std::ostringstream what;
            what << "a row of " << n << " with its largest magnitude " << row[size_t(where)]
                 << " at " << where;
            expect_int8_row_contract(row, what.str());
        }
    }
}

// A zero row of odd length: scale 0, every code written as 0, zeros back;
// a one-element row of a tiny value keeps the full range.
TEST(HiddenLab03Int8, ZeroRowsAndTinyRows) {
    const int64_t n = 37;
    const GuardedArray<float> zeros(std::vector<float>(size_t(n), 0.0f));
    GuardedArray<int8_t> codes(size_t(n), int8_t(7));
    EXPECT_EQ(quantize_int8_row(zeros.data(), n, codes.data()), 0.0f)
        << "an all-zero row gets scale 0";
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(int(codes[size_t(i)]), 0)
            << "code " << i << " of an all-zero row: every code must be written as 0";
    }
    GuardedArray<float> back(static_cast<size_t>(n));
    dequantize_int8_row(codes.data(), 0.0f, n, back.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[size_t(i)], 0.0f);
    expect_int8_row_contract({-3e-6f}, "a one-element row of -3e-6");
    expect_int8_row_contract({2e-7f, -1e-7f, 0.0f}, "a row of tiny values");
}

// An int8 cache of three KV heads of 7, written in steps of 2, 1 and 4:
// every row reads back within half of its own row's step.
TEST(HiddenLab03Int8, CacheRowsKeepTheirOwnScales) {
    RandomSource random(303);
    SCOPED_TRACE(random.trace());
    ModelConfig c;
    c.num_layers = 2, c.num_heads = 6, c.num_kv_heads = 3, c.head_dim = 7, c.v_head_dim = 7;
    c.rope_dim = 7, c.dim = 42, c.context_length = 64;
    KvCache cache(c, 7, KvDtype::kInt8);
    std::vector<float> written;
    int64_t start = 0;
    for (const int64_t count : {2, 1, 4}) {
        std::vector<float> k = random.normal(size_t(count * 3 * 7));
        // Rows of very different magnitudes: one scale per row, not per cache.
        for (size_t i = 0; i < k.size(); ++i) k[i] *= std::pow(10.0f, float((i / 7) % 4) - 2);
        for (int64_t layer = 0; layer < 2; ++layer) {
            cache.write(layer, start, k.data(), k.data(), count);
        }
        cache.commit(count);
        written.insert(written.end(), k.begin(), k.end());
        start += count;
    }
    std::vector<float> scratch(7);
    for (int64_t row = 0; row < start * 3; ++row) {
        const auto first = written.begin() + row * 7;
        float largest = 0.0f;
        for (int64_t d = 0; d < 7; ++d) largest = std::max(largest, std::fabs(first[d]));
        const float* got = kv_row(cache.values(1), row / 3, row % 3, scratch.data());
        for (int64_t d = 0; d < 7; ++d) {
            ASSERT_LE(std::fabs(got[d] - first[d]), largest / 127.0f * 0.5f * 1.001f)
                << "int8 cache, position " << row / 3 << ", head " << row % 3 << ", element " << d
                << ": more than half a step of its row's scale (max |row| / 127) away";
        }
    }
}

// ---------------------------------------------------------------- MLA absorbed

struct MlaInputs {
    std::vector<float> q_nope, q_pe, latents, rope_keys, wkv_b;
};

MlaInputs random_mla_inputs(RandomSource& random, const MlaShape& s) {
    MlaInputs in;
    in.q_nope = random.normal(size_t(s.num_queries * s.num_heads * s.qk_nope_dim));
    in.q_pe = random.normal(size_t(s.num_queries * s.num_heads * s.rope_dim));
    in.latents = random.normal(size_t(s.num_keys * s.kv_lora_rank));
    in.rope_keys = random.normal(size_t(s.num_keys * s.rope_dim));
    in.wkv_b = random.normal(size_t(s.num_heads * (s.qk_nope_dim + s.v_head_dim) * s.kv_lora_rank),
                             1.0f / std::sqrt(float(s.kv_lora_rank)));
    return in;
}

// MLA by its definition, in double: each head's keys k_nope = W_UK c_kv and
// values W_UV c_kv rebuilt from the latent, scores over qk_nope_dim + rope_dim.
std::vector<float> mla_by_definition(const MlaInputs& in, const MlaShape& s) {
    const int64_t d_c = s.kv_lora_rank, up = s.qk_nope_dim + s.v_head_dim;
    std::vector<float> out(size_t(s.num_queries * s.num_heads * s.v_head_dim));
    const auto up_project = [&](int64_t h, int64_t row, int64_t j) {  // row of wkv_b times c_kv_j
        double sum = 0.0;
        for (int64_t c = 0; c < d_c; ++c) {
            sum += double(in.wkv_b[size_t((h * up + row) * d_c + c)]) *
                   in.latents[size_t(j * d_c + c)];
        }
        return sum;
    };
    for (int64_t t = 0; t < s.num_queries; ++t) {
        const int64_t position = s.num_keys - s.num_queries + t;
        for (int64_t h = 0; h < s.num_heads; ++h) {
            const int64_t qh = t * s.num_heads + h;
            std::vector<double> p(size_t(position + 1));
            for (int64_t j = 0; j <= position; ++j) {
                double score = 0.0;
                for (int64_t n = 0; n < s.qk_nope_dim; ++n)
                    score += in.q_nope[size_t(qh * s.qk_nope_dim + n)] * up_project(h, n, j);
                for (int64_t r = 0; r < s.rope_dim; ++r)
                    score += double(in.q_pe[size_t(qh * s.rope_dim + r)]) *
                             in.rope_keys[size_t(j * s.rope_dim + r)];
                p[size_t(j)] = score / std::sqrt(double(s.qk_nope_dim + s.rope_dim));
            }
            const double top = *std::max_element(p.begin(), p.end());
            double sum = 0.0;
            for (double& x : p) sum += (x = std::exp(x - top));
            for (int64_t v = 0; v < s.v_head_dim; ++v) {
                double acc = 0.0;
                for (int64_t j = 0; j <= position; ++j)
                    acc += p[size_t(j)] / sum * up_project(h, s.qk_nope_dim + v, j);
                out[size_t(qh * s.v_head_dim + v)] = float(acc);
            }
        }
    }
    return out;
}

KvView f32_rows(const GuardedArray<float>& rows, int64_t width) {
    return KvView{
        .data = reinterpret_cast<const uint8_t*>(rows.data()), .num_heads = 1, .head_dim = width};
}

// Shapes down to a width of 1 in every dimension, prefill (queries == keys),
// and one query after many keys; every array ends at a guard page.
TEST(HiddenLab03Mla, AbsorbedEqualsTheDefinitionOnEdgeShapes) {
    RandomSource random(304);
    SCOPED_TRACE(random.trace());
    // {queries, keys, heads, qk_nope_dim, rope_dim, v_head_dim, kv_lora_rank}
    const std::vector<MlaShape> shapes = {{1, 1, 1, 1, 2, 1, 1},
                                          {7, 7, 3, 5, 4, 9, 11},
                                          {1, 41, 2, 8, 6, 3, 64},
                                          {3, 10, 5, 1, 2, 1, 2},
                                          {4, 6, 1, 12, 8, 16, 5}};
    for (const MlaShape& s : shapes) {
        const MlaInputs in = random_mla_inputs(random, s);
        const GuardedArray<float> q_nope(in.q_nope), q_pe(in.q_pe), latents(in.latents),
            rope_keys(in.rope_keys), wkv_b(in.wkv_b);
        GuardedArray<float> out(size_t(s.num_queries * s.num_heads * s.v_head_dim));  // NaN
        mla_attention_absorbed(q_nope.data(), q_pe.data(), f32_rows(rope_keys, s.rope_dim),
                               f32_rows(latents, s.kv_lora_rank), wkv_b.data(), out.data(), s);
        std::ostringstream what;
        what << "absorbed MLA, " << s.num_queries << " queries over " << s.num_keys << " keys, "
             << s.num_heads << " heads, qk_nope " << s.qk_nope_dim << ", rope " << s.rope_dim
             << ", v " << s.v_head_dim << ", d_c " << s.kv_lora_rank
             << ": q_latent = W_UK^T q_nope, scores (q_latent . c_kv + q_pe . k_pe) / "
                "sqrt(qk_nope_dim + rope_dim) over keys up to the query's position, out = W_UV "
                "o_latent, every head and query written";
        EXPECT_TRUE(test::equal_or_explain(what.str(), out.span(), mla_by_definition(in, s), 2e-4));
    }
}

}  // namespace
}  // namespace servelab
