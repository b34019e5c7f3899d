// hidden_lab01_naive_decoding_test.cpp — Lab 1's hidden tests (chapter 11.2): the
// kernels, the sampler's filters and the generation loop on inputs the public tests
// do not use (odd sizes, partial RoPE, GQA ratio 3, one query after many keys,
// exact top-p boundaries, another tiny model and context length).
//
// The instructor's hidden tests: tools/labkit/student_release.py leaves this file out of
// the student release, so never quote it in a handout. They check the contracts the
// handout states, so a solution tuned to the public tests' shapes fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../unit/test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "reference/engine/generator.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/sampling/sampling_filters.h"

namespace servelab {
namespace {

using test::GuardedArray;
using test::RandomSource;

// ---------------------------------------------------------------- kernels

// RMSNorm in place (out == x) on odd lengths, one of them a single element,
// with a large eps so that a misplaced eps shows. The array ends at a guard
// page: a loop one past dim crashes.
TEST(HiddenLab01Kernels, RmsNormInPlaceOnOddLengths) {
    RandomSource random(101);
    SCOPED_TRACE(random.trace());
    for (const int64_t dim : {1, 3, 129, 1001}) {
        const std::vector<float> x = random.normal(size_t(dim), 2.0f);
        const std::vector<float> w = random.uniform(size_t(dim), 0.5f, 1.5f);
        const float eps = 0.25f;
        double sum_squares = 0.0;
        for (float v : x) sum_squares += double(v) * double(v);
        const double inv_rms = 1.0 / std::sqrt(sum_squares / double(dim) + eps);
        std::vector<float> expected(x.size());
        for (size_t i = 0; i < x.size(); ++i) expected[i] = float(x[i] * inv_rms * w[i]);

        GuardedArray<float> row(x);
        const GuardedArray<float> weight(w);
        rmsnorm(row.data(), weight.data(), row.data(), dim, eps);
        EXPECT_TRUE(test::equal_or_explain(
            "rmsnorm in place (out == x), dim " + std::to_string(dim) +
                ": every element of the row, first and last included, is x / sqrt(mean(x^2) + "
                "eps) * w, with the mean over all dim entries",
            row.span(), expected, 1e-5));
    }
}

// RoPE's rotation by the formula, computed in double, for one head vector.
std::vector<float> rope_formula(const std::vector<float>& x, int64_t num_heads, int64_t position,
                                const RopeParams& p) {
    std::vector<float> out = x;
    for (int64_t h = 0; h < num_heads; ++h) {
        for (int64_t i = 0; i < p.rope_dim / 2; ++i) {
            const double angle =
                double(position) * std::pow(double(p.freq_base), -2.0 * double(i) / p.rope_dim);
            const size_t a = size_t(h * p.head_dim + 2 * i);
            out[a] = float(x[a] * std::cos(angle) - x[a + 1] * std::sin(angle));
            out[a + 1] = float(x[a] * std::sin(angle) + x[a + 1] * std::cos(angle));
        }
    }
    return out;
}

// Three heads (an odd count), only the first 6 of 10 dimensions rotated, a
// base that is not 10000, and positions from 1 to the thousands.
TEST(HiddenLab01Kernels, RopeOnThreeHeadsWithPartialRotation) {
    RandomSource random(102);
    SCOPED_TRACE(random.trace());
    const RopeParams params{10, 6, 500000.0f};
    const int64_t num_heads = 3;
    for (const int64_t position : {1, 2, 37, 4099}) {
        const std::vector<float> x = random.normal(size_t(num_heads * params.head_dim));
        GuardedArray<float> vec(x);
        rope_apply(vec.data(), num_heads, position, params);
        EXPECT_TRUE(test::equal_or_explain(
            "rope_apply at position " + std::to_string(position) +
                ", 3 heads of 10 with rope_dim 6: every head's adjacent pairs (x[2i], x[2i+1]), "
                "i < rope_dim / 2, turn by position * base^(-2i / rope_dim); dims 6..9 stay",
            vec.span(), rope_formula(x, num_heads, position, params), 2e-4));
    }
}

// SwiGLU on odd lengths, with out aliasing gate and then up, and one length
// above the size at which the reference goes parallel.
TEST(HiddenLab01Kernels, SwiGluOnOddLengthsWritingOverItsInputs) {
    RandomSource random(103);
    SCOPED_TRACE(random.trace());
    for (const int64_t n : {1, 7, 20001}) {
        const std::vector<float> g = random.normal(size_t(n), 3.0f);
        const std::vector<float> u = random.normal(size_t(n));
        std::vector<float> expected(g.size());
        for (size_t i = 0; i < g.size(); ++i) {
            expected[i] = float(double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i]);
        }
        GuardedArray<float> gate(g), up(u);
        swiglu(gate.data(), up.data(), gate.data(), n);  // out == gate
        EXPECT_TRUE(test::equal_or_explain(
            "swiglu with out == gate, n " + std::to_string(n) +
                ": every one of the n elements is silu(gate) * up = gate / (1 + exp(-gate)) * up",
            gate.span(), expected, 1e-4));
        GuardedArray<float> gate2(g), up2(u);
        swiglu(gate2.data(), up2.data(), up2.data(), n);  // out == up
        EXPECT_TRUE(test::equal_or_explain("swiglu with out == up, n " + std::to_string(n),
                                           up2.span(), expected, 1e-4));
    }
}

// ---------------------------------------------------------------- attention

// Attention by its definition, in double: query t at position
// num_keys - num_queries + t sees keys 0..position; head h reads KV head
// h / (num_heads / num_kv_heads).
std::vector<float> attention_by_definition(const std::vector<float>& q, const std::vector<float>& k,
                                           const std::vector<float>& v, const AttentionShape& s) {
    std::vector<float> out(size_t(s.num_queries * s.num_heads * s.head_dim));
    const int64_t group = s.num_heads / s.num_kv_heads;
    const auto at = [&](int64_t token, int64_t heads, int64_t head) {
        return size_t((token * heads + head) * s.head_dim);
    };
    for (int64_t t = 0; t < s.num_queries; ++t) {
        const int64_t position = s.num_keys - s.num_queries + t;
        for (int64_t h = 0; h < s.num_heads; ++h) {
            const int64_t g = h / group;
            std::vector<double> p(size_t(position + 1));
            for (int64_t j = 0; j <= position; ++j) {
                double dot = 0.0;
                for (int64_t d = 0; d < s.head_dim; ++d) {
                    dot += double(q[at(t, s.num_heads, h) + d]) * k[at(j, s.num_kv_heads, g) + d];
                }
                p[size_t(j)] = dot / std::sqrt(double(s.head_dim));
            }
            const double top = *std::max_element(p.begin(), p.end());
            double sum = 0.0;
            for (double& x : p) sum += (x = std::exp(x - top));
            for (int64_t d = 0; d < s.head_dim; ++d) {
                double acc = 0.0;
                for (int64_t j = 0; j <= position; ++j) {
                    acc += p[size_t(j)] / sum * v[at(j, s.num_kv_heads, g) + d];
                }
                out[at(t, s.num_heads, h) + d] = float(acc);
            }
        }
    }
    return out;
}

std::string describe(const AttentionShape& s) {
    std::ostringstream text;
    text << "attention over " << s.num_queries << " queries and " << s.num_keys << " keys, "
         << s.num_heads << " heads on " << s.num_kv_heads << " KV heads of " << s.head_dim
         << ": query head h reads KV head h / (num_heads / num_kv_heads), query t sees keys up to "
            "num_keys - num_queries + t, every head and query is written";
    return text.str();
}

// Shapes the public tests do not use: a GQA ratio of 3, MQA with an odd
// head_dim, one query after many keys (decode), several queries after a few
// keys, and odd head dims. Inputs and output end at guard pages.
TEST(HiddenLab01Attention, CausalGqaOnOddShapesAndDecodeSteps) {
    RandomSource random(104);
    SCOPED_TRACE(random.trace());
    const std::vector<AttentionShape> shapes = {
        {5, 5, 6, 2, 5}, {1, 13, 6, 3, 7}, {4, 11, 3, 1, 3}, {7, 7, 3, 3, 9}, {2, 3, 9, 3, 4}};
    for (const AttentionShape& s : shapes) {
        const size_t q_size = size_t(s.num_queries * s.num_heads * s.head_dim);
        const size_t kv_size = size_t(s.num_keys * s.num_kv_heads * s.head_dim);
        const std::vector<float> q = random.normal(q_size, 1.5f), k = random.normal(kv_size, 1.5f),
                                 v = random.normal(kv_size);
        const GuardedArray<float> gq(q), gk(k), gv(v);
        GuardedArray<float> out(q_size);  // NaN until written
        attention_causal(gq.data(), gk.data(), gv.data(), out.data(), s);
        EXPECT_TRUE(test::equal_or_explain(describe(s), out.span(),
                                           attention_by_definition(q, k, v, s), 1e-5));
    }
}

// ---------------------------------------------------------------- sampling filters

// argmax over random logits with the maximum planted at the first, a middle
// and the last index, and with ties spread over the array.
TEST(HiddenLab01Sampling, ArgmaxAtTheEndsAndOnScatteredTies) {
    RandomSource random(105);
    SCOPED_TRACE(random.trace());
    for (const size_t n : {size_t(1), size_t(2), size_t(37)}) {
        for (const size_t where : {size_t(0), n / 2, n - 1}) {
            // The largest only a little above the next: no margin to lean on.
            const std::vector<float> values = random.uniform(n, -5.0f, 4.0f);
            GuardedArray<float> logits(values);
            logits[where] = *std::max_element(values.begin(), values.end()) + 0.25f;
            EXPECT_EQ(argmax(std::span<const float>(logits.data(), n)), TokenId(where))
                << "argmax of " << n << " logits must find the largest at index " << where
                << ": the first and last entries are candidates too, and no entry past the end";
        }
    }
    std::vector<float> logits = random.uniform(40, -5.0f, 4.0f);
    for (const size_t tie : {size_t(11), size_t(12), size_t(30), size_t(39)}) logits[tie] = 6.0f;
    EXPECT_EQ(argmax(logits), TokenId(11))
        << "on a tie the lowest id must win: a later equal value must not replace the best one";
}

// keep_top_k against a full sort, with many tied scores and k at 1, in the
// middle, one below the size, the size, above it and 0.
TEST(HiddenLab01Sampling, TopKSortsTiesByIdForEveryK) {
    RandomSource random(106);
    SCOPED_TRACE(random.trace());
    const size_t n = 23;
    std::vector<Candidate> all;
    for (size_t i = 0; i < n; ++i) {
        all.push_back({float(random.integer(-3, 3)) * 0.5f, TokenId((i * 7) % n)});  // ties
    }
    std::vector<Candidate> sorted = all;
    // The order the handout defines: higher score first, then the lower id.
    std::sort(sorted.begin(), sorted.end(), [](const Candidate& a, const Candidate& b) {
        return std::make_pair(-a.score, a.id) < std::make_pair(-b.score, b.id);
    });
    for (const int32_t k : {1, 5, 22, 23, 40, 0}) {
        std::vector<Candidate> kept = all;
        keep_top_k(kept, k);
        const size_t expected_size = (k > 0 && size_t(k) < n) ? size_t(k) : n;
        ASSERT_EQ(kept.size(), expected_size)
            << "keep_top_k(k = " << k << ") of " << n
            << " candidates: keeps k of them, all of them when k is 0 or at least the size";
        for (size_t i = 0; i < kept.size(); ++i) {
            EXPECT_TRUE(kept[i].id == sorted[i].id && kept[i].score == sorted[i].score)
                << "keep_top_k(k = " << k << "): position " << i << " holds id " << kept[i].id
                << ", expected id " << sorted[i].id
                << ": most likely first, a tie goes to the lower id";
        }
    }
}

// keep_top_p where the running sum hits top_p exactly (powers of two add
// exactly), just below it, and where nothing but everything reaches it.
TEST(HiddenLab01Sampling, TopPStopsExactlyWhereTheSumReachesTopP) {
    const std::vector<float> probs = {0.375f, 0.25f, 0.125f, 0.125f, 0.0625f, 0.0625f};
    const auto kept_after = [&](float top_p) {
        std::vector<Candidate> candidates;
        for (size_t i = 0; i < probs.size(); ++i) candidates.push_back({probs[i], TokenId(40 - i)});
        keep_top_p(candidates, top_p);
        return candidates.size();
    };
    struct Case {
        float top_p;
        size_t keep;
    };
    for (const Case c : {Case{0.625f, 2}, Case{0.6249f, 2}, Case{0.6251f, 3}, Case{0.875f, 4},
                         Case{0.01f, 1}, Case{0.375f, 1}, Case{0.99f, 6}, Case{1.0f, 6}}) {
        EXPECT_EQ(kept_after(c.top_p), c.keep)
            << "keep_top_p(top_p = " << c.top_p
            << ") over 0.375, 0.25, 0.125, 0.125, 0.0625, 0.0625: keep the shortest prefix whose "
               "sum is at least top_p (a sum equal to top_p is enough), never fewer than one";
    }
    // Float probabilities may add up to a little less than 1: when even all of
    // them stay below top_p, all are kept, and nothing past the end is read.
    std::vector<Candidate> short_of_one = {{0.6f, 3}, {0.3f, 1}, {0.0999f, 2}};
    keep_top_p(short_of_one, 0.99995f);
    EXPECT_EQ(short_of_one.size(), 3u)
        << "keep_top_p(0.99995) over 0.6, 0.3, 0.0999 (sum 0.9999): keep all three, no more";
}

// ---------------------------------------------------------------- generation loop

// A tiny model with a GQA ratio of 3 and a short, odd context, so that the
// loop runs into the context limit after a handful of tokens.
class HiddenLab01Generation : public ::testing::Test {
  protected:
    void SetUp() override {
        TinyModelOptions options;
        options.seed = random_.seed();
        options.dim = 48, options.num_heads = 6, options.num_kv_heads = 2;
        options.ffn_dim = 80, options.context_length = 19;
        bytes_ = make_tiny_model(options);
        model_ = std::make_unique<Model>(Model::from_gguf(GgufFile::parse(bytes_)));
        runner_ = std::make_unique<ModelRunner>(model_->config, model_->weights);
        prompt_ = model_->tokenizer.encode("dogs run fast", false);
    }
    // Generates, counting the callbacks and concatenating the streamed pieces.
    GenerationResult run(const SamplingParams& params) {
        calls_ = 0;
        streamed_.clear();
        return generate(*runner_, model_->config, model_->tokenizer, prompt_, params,
                        [&](TokenId, const std::string& piece) {
                            ++calls_;
                            streamed_ += piece;
                        });
    }

    RandomSource random_{107};
    std::vector<uint8_t> bytes_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<ModelRunner> runner_;
    std::vector<TokenId> prompt_;
    int calls_ = 0;
    std::string streamed_;
};

// Greedy until the context is full: each token is the argmax of a full
// recompute of the sequence so far, the sequence ends exactly at the context
// length, one callback and one latency per token.
TEST_F(HiddenLab01Generation, GreedyRunsToExactlyTheContextLength) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 500;
    params.ignore_eos = true;
    const GenerationResult result = run(params);
    const size_t context = size_t(model_->config.context_length);
    ASSERT_EQ(prompt_.size() + result.tokens.size(), context)
        << "generation must stop when the sequence reaches the context length (" << context
        << " tokens), not before or after";
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
    std::vector<TokenId> sequence = prompt_;
    for (size_t i = 0; i < result.tokens.size(); ++i) {
        ASSERT_EQ(result.tokens[i], argmax(runner_->forward({sequence, 0})))
            << "token " << i << " is not the argmax of the logits of the sequence so far";
        sequence.push_back(result.tokens[i]);
    }
    EXPECT_EQ(size_t(calls_), result.tokens.size()) << "on_token is called once per token";
    EXPECT_EQ(streamed_, result.text) << "the streamed pieces must add up to the text";
    ASSERT_EQ(result.timings.step_latency_ms.size(), result.tokens.size())
        << "timings.step_latency_ms gets one entry per generated token";
    EXPECT_EQ(result.timings.first_step_ms, result.timings.step_latency_ms.front());
}

// max_tokens of 1 and a stop token at the first and the fourth step: the loop
// ends where the stop checker says, with its reason.
TEST_F(HiddenLab01Generation, EndsWhereTheStopCheckerSaysWithItsReason) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.ignore_eos = true;
    params.max_tokens = 1;
    const GenerationResult one = run(params);
    EXPECT_EQ(one.tokens.size(), 1u) << "max_tokens = 1 gives exactly one token";
    EXPECT_EQ(one.finish_reason, FinishReason::kLength);
    EXPECT_EQ(calls_, 1);

    params.max_tokens = 6;
    const GenerationResult free_run = run(params);
    ASSERT_EQ(free_run.tokens.size(), 6u);
    for (const size_t at : {size_t(0), size_t(3)}) {
        params.stop_token_ids = {free_run.tokens[at]};
        const GenerationResult stopped = run(params);
        const size_t first =
            size_t(std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[at]) -
                   free_run.tokens.begin());
        EXPECT_EQ(stopped.tokens.size(), first + 1)
            << "the request ends at the first stop token, which is kept in result.tokens";
        EXPECT_EQ(stopped.finish_reason, FinishReason::kStop)
            << "result.finish_reason must be the reason stop.push returned";
        EXPECT_EQ(size_t(calls_), stopped.tokens.size()) << "on_token is called once per token";
    }
}

}  // namespace
}  // namespace servelab
