// sampler_test.cpp — greedy, temperature, top-k/top-p/min-p, penalty, seeds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "kernels/common/error.h"
#include "reference/sampling/sampler.h"
#include "reference/sampling/sampling_filters.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

std::vector<float> logits_from_probs(const std::vector<double>& probs) {
    std::vector<float> logits;
    for (double p : probs) logits.push_back(p > 0 ? float(std::log(p)) : -1e9f);
    return logits;
}

// Empirical token frequencies of `draws` samples.
std::map<TokenId, double> frequencies(const SamplingParams& params,
                                      const std::vector<float>& logits, int draws) {
    Sampler sampler(params);
    std::map<TokenId, double> counts;
    for (int i = 0; i < draws; ++i) {
        std::vector<float> copy = logits;
        counts[sampler.sample(copy, {})] += 1.0 / draws;
    }
    return counts;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    std::vector<float> logits = random.normal(1000);
    const TokenId best = TokenId(random.integer(0, 999));
    logits[best] = 100.0f;
    Sampler sampler(SamplingParams{});
    EXPECT_EQ(sampler.sample(logits, {}), best);
    std::vector<float> tied = {1.0f, 3.0f, 3.0f, 2.0f};
    EXPECT_EQ(argmax(tied), 1);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
    const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
    SamplingParams params;
    params.temperature = 1.0f;
    params.seed = test::test_seed();
    const auto freq = frequencies(params, logits_from_probs(probs), 20000);
    for (size_t i = 0; i < probs.size(); ++i) {
        // 20000 draws: the standard error is below 0.0036, so 0.02 is > 5 sigma.
        EXPECT_NEAR(freq.count(TokenId(i)) ? freq.at(TokenId(i)) : 0.0, probs[i], 0.02) << i;
    }
}

TEST(Sampler, LowTemperatureSharpens) {
    SamplingParams params;
    params.temperature = 0.25f;  // p^4, renormalized: 0.5^4 / (0.5^4 + 0.3^4 + ...) ~ 0.88
    params.seed = test::test_seed();
    const auto freq = frequencies(params, logits_from_probs({0.5, 0.3, 0.15, 0.05}), 20000);
    const double expected = std::pow(0.5, 4) / (std::pow(0.5, 4) + std::pow(0.3, 4) +
                                                std::pow(0.15, 4) + std::pow(0.05, 4));
    EXPECT_NEAR(freq.at(0), expected, 0.02);
}

TEST(Sampler, TopKKeepsOnlyKTokens) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 2;
    params.seed = test::test_seed();
    const auto freq = frequencies(params, logits_from_probs({0.1, 0.4, 0.2, 0.3}), 20000);
    EXPECT_EQ(freq.size(), 2u);
    EXPECT_NEAR(freq.at(1), 0.4 / 0.7, 0.02);
    EXPECT_NEAR(freq.at(3), 0.3 / 0.7, 0.02);
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_p = 0.75f;  // 0.5 + 0.3 reaches 0.75: tokens 0 and 1 only
    params.seed = test::test_seed();
    const auto freq = frequencies(params, logits_from_probs({0.5, 0.3, 0.15, 0.05}), 20000);
    EXPECT_EQ(freq.size(), 2u);
    EXPECT_NEAR(freq.at(0), 0.5 / 0.8, 0.02);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.min_p = 0.35f;  // threshold 0.175: keeps 0.5 and 0.3
    params.seed = test::test_seed();
    const auto freq = frequencies(params, logits_from_probs({0.5, 0.3, 0.15, 0.05}), 5000);
    EXPECT_EQ(freq.size(), 2u);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<float> logits = random.normal(500);
    SamplingParams params;
    params.temperature = 1.0f;
    params.seed = random.seed();
    const auto draw_sequence = [&](uint64_t seed) {
        params.seed = seed;
        Sampler sampler(params);
        std::vector<TokenId> ids;
        for (int i = 0; i < 50; ++i) {
            std::vector<float> copy = logits;
            ids.push_back(sampler.sample(copy, {}));
        }
        return ids;
    };
    EXPECT_EQ(draw_sequence(7), draw_sequence(7));
    EXPECT_NE(draw_sequence(7), draw_sequence(8));
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
    std::vector<float> logits = {2.0f, -2.0f, 1.0f, 4.0f};
    const std::vector<TokenId> history = {0, 1, 1, 3};
    apply_repetition_penalty(logits, history, 2.0f, 0);
    EXPECT_FLOAT_EQ(logits[0], 1.0f);
    EXPECT_FLOAT_EQ(logits[1], -4.0f);  // penalized once though it appears twice
    EXPECT_FLOAT_EQ(logits[2], 1.0f);   // not in history
    EXPECT_FLOAT_EQ(logits[3], 2.0f);
    std::vector<float> windowed = {2.0f, -2.0f, 1.0f, 4.0f};
    apply_repetition_penalty(windowed, history, 2.0f, 1);  // only the last token (3)
    EXPECT_FLOAT_EQ(windowed[0], 2.0f);
    EXPECT_FLOAT_EQ(windowed[3], 2.0f);
}

TEST(Sampler, PenaltyCanChangeTheGreedyChoice) {
    std::vector<float> logits = {3.0f, 2.0f};
    SamplingParams params;
    params.repetition_penalty = 2.0f;
    Sampler sampler(params);
    const std::vector<TokenId> history = {0};
    EXPECT_EQ(sampler.sample(logits, history), 1);
}

// ---- The filters one by one: argmax, keep_top_k, keep_top_p ------------------

std::string ids_of(const std::vector<Candidate>& candidates) {
    std::ostringstream out;
    out << "[";
    for (size_t i = 0; i < candidates.size(); ++i) out << (i ? ", " : "") << candidates[i].id;
    return out.str() + "]";
}

TEST(SamplingFilters, ArgmaxFindsTheLargestValueWhereverItIs) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    // The logits end at an inaccessible page: reading past the last one stops
    // the test with SIGSEGV.
    for (size_t n : {1, 2, 7, 50}) {
        for (size_t at = 0; at < n; ++at) {
            test::GuardedArray<float> logits(random.uniform(n, -5.0f, 4.0f));
            logits[at] = 5.0f;
            EXPECT_EQ(argmax(logits.span()), TokenId(at))
                << "the largest of " << n << " logits is at index " << at;
        }
    }
}

TEST(SamplingFilters, ArgmaxGivesATieToTheLowestId) {
    for (const std::vector<float>& tied :
         {std::vector<float>{3, 1, 3, 3}, {1, 3, 3, 2}, {-1, -1}, {0, 2, 2, 2, 2}}) {
        const TokenId first = TokenId(std::max_element(tied.begin(), tied.end()) - tied.begin());
        const TokenId got = argmax(tied);
        EXPECT_EQ(got, first) << "on a tie argmax returned id " << got << ": the lowest id must "
                              << "win (" << first << "); a later equal value must not replace "
                              << "the best one";
    }
}

// What keep_top_k must leave: most likely first, ties broken by the lower id,
// the first k of them (all when k is 0 or at least the count).
std::vector<Candidate> top_k_by_definition(std::vector<Candidate> candidates, int32_t k) {
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) {
                         return a.score != b.score ? a.score > b.score : a.id < b.id;
                     });
    if (k > 0 && size_t(k) < candidates.size()) candidates.resize(size_t(k));
    return candidates;
}

TEST(SamplingFilters, KeepTopKSortsByScoreThenIdAndKeepsTheFirstK) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 40; ++trial) {
        const int64_t n = random.integer(2, 12);
        // Probabilities close together, many of them tied (steps of 0.01).
        std::vector<Candidate> candidates;
        for (int64_t id = 0; id < n; ++id) {
            candidates.push_back({float(random.integer(1, 6)) * 0.01f, TokenId(id)});
        }
        std::shuffle(candidates.begin(), candidates.end(), random.engine());
        for (int32_t k :
             {0, 1, int32_t(n - 1), int32_t(n), int32_t(n + 3), int32_t(random.integer(1, n))}) {
            std::vector<Candidate> kept = candidates;
            keep_top_k(kept, k);
            const std::vector<Candidate> expected = top_k_by_definition(candidates, k);
            EXPECT_EQ(ids_of(kept), ids_of(expected))
                << "keep_top_k(k = " << k << ") of " << n << " candidates kept " << kept.size()
                << " (expected " << expected.size() << ": k of them, or all when k is 0 or "
                << "at least their count), most likely first, ties: the lower id first";
        }
    }
}

std::vector<Candidate> probabilities(const std::vector<float>& sorted_probs) {
    std::vector<Candidate> candidates;
    for (size_t i = 0; i < sorted_probs.size(); ++i) {
        candidates.push_back({sorted_probs[i], TokenId(10 + i)});
    }
    return candidates;
}

TEST(SamplingFilters, KeepTopPKeepsTheShortestPrefixThatReachesTopP) {
    // Binary fractions: every partial sum is exact, so "reaches" is exact too.
    const std::vector<float> probs = {0.5f, 0.25f, 0.125f, 0.125f};
    for (auto [top_p, expected] : std::vector<std::pair<float, size_t>>{
             {0.1f, 1}, {0.5f, 1}, {0.6f, 2}, {0.75f, 2}, {0.8f, 3}, {0.875f, 3}, {1.0f, 4}}) {
        std::vector<Candidate> kept = probabilities(probs);
        keep_top_p(kept, top_p);
        EXPECT_EQ(kept.size(), expected)
            << "top_p = " << top_p << " of 0.5, 0.25, 0.125, 0.125: keep the shortest prefix "
            << "whose sum reaches top_p (a sum equal to top_p reaches it), at least one";
    }
    // Probabilities that add up to less than top_p (rounding, or min-p before):
    // every candidate is kept, and nothing past the last is read.
    std::vector<Candidate> short_mass = probabilities({0.5f, 0.25f, 0.125f});
    keep_top_p(short_mass, 0.95f);
    EXPECT_EQ(ids_of(short_mass), "[10, 11, 12]")
        << "candidates summing to 0.875 < top_p 0.95: all three stay, and no more";
}

TEST(SamplingParams, RejectsOutOfRangeValues) {
    const auto expect_error = [](auto mutate, const char* field) {
        SamplingParams params;
        mutate(params);
        EXPECT_THAT(test::error_of([&] { params.validate(); }), ::testing::HasSubstr(field));
    };
    expect_error([](SamplingParams& p) { p.temperature = -1; }, "temperature");
    expect_error([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
    expect_error([](SamplingParams& p) { p.top_k = -1; }, "top_k");
    expect_error([](SamplingParams& p) { p.top_p = 0; }, "top_p");
    expect_error([](SamplingParams& p) { p.top_p = 1.5; }, "top_p");
    expect_error([](SamplingParams& p) { p.min_p = 2; }, "min_p");
    expect_error([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
    expect_error([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
    expect_error([](SamplingParams& p) { p.stop_strings = {""}; }, "stop strings");
    expect_error([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
    expect_error([](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty");
    expect_error([](SamplingParams& p) { p.logit_bias = {{4, 101.0f}}; }, "logit_bias");
    expect_error([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias");
}

// The distribution after OpenAI's penalties and the bias, computed directly:
// counts over the generated tokens only, then a plain softmax.
std::vector<double> expected_penalized(std::vector<float> logits, size_t prompt_length,
                                       const std::vector<TokenId>& history,
                                       const SamplingParams& p) {
    std::map<TokenId, int> counts;
    for (size_t i = prompt_length; i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [id, count] : counts) {
        logits[size_t(id)] -= p.frequency_penalty * float(count) + p.presence_penalty;
    }
    for (const auto& [id, bias] : p.logit_bias) logits[size_t(id)] += bias;
    const float top = *std::max_element(logits.begin(), logits.end());
    std::vector<double> probs;
    double total = 0.0;
    for (float l : logits) total += std::exp(double(l - top));
    for (float l : logits) probs.push_back(std::exp(double(l - top)) / total);
    return probs;
}

TEST(Sampler, PresenceFrequencyPenaltiesAndLogitBiasMatchADirectComputation) {
    RandomSource rng;
    for (int trial = 0; trial < 50; ++trial) {
        const size_t vocab = size_t(rng.integer(4, 40));
        SamplingParams params;
        params.temperature = 1.0f;
        params.presence_penalty = rng.uniform(1, -2.0f, 2.0f)[0];
        params.frequency_penalty = rng.uniform(1, -2.0f, 2.0f)[0];
        for (int i = 0; i < rng.integer(0, 3); ++i) {
            params.logit_bias.emplace_back(TokenId(rng.integer(0, int64_t(vocab) - 1)),
                                           rng.uniform(1, -100.0f, 100.0f)[0]);
        }
        std::vector<TokenId> history;
        const size_t prompt_length = size_t(rng.integer(0, 8));
        for (size_t i = 0; i < prompt_length; ++i) {
            history.push_back(TokenId(rng.integer(0, int64_t(vocab) - 1)));
        }
        Sampler sampler(params);
        // The first call sees the prompt alone: nothing generated is penalized yet.
        const std::vector<float> first_logits = rng.normal(vocab, 2.0f);
        std::vector<float> scratch = first_logits;
        std::vector<float> probs;
        sampler.distribution(scratch, history, probs);
        const std::vector<double> want_first =
            expected_penalized(first_logits, prompt_length, history, params);
        for (int step = 0; step < 6; ++step) {
            history.push_back(TokenId(rng.integer(0, int64_t(vocab) - 1)));
        }
        const std::vector<float> logits = rng.normal(vocab, 2.0f);
        scratch = logits;
        std::vector<float> later;
        sampler.distribution(scratch, history, later);
        const std::vector<double> want = expected_penalized(logits, prompt_length, history, params);
        for (size_t t = 0; t < vocab; ++t) {
            ASSERT_NEAR(probs[t], want_first[t], 1e-5)
                << "first call, token " << t << ": the prompt's tokens must not be penalized "
                << "(presence and frequency count generated tokens only); " << rng.trace();
            ASSERT_NEAR(later[t], want[t], 1e-5)
                << "token " << t << ": expected logit - frequency * count - presence * (count > "
                << "0) + bias over the generated tokens; " << rng.trace();
        }
    }
}

TEST(Sampler, ALogitBiasOfMinus100BansTheGreedyChoice) {
    SamplingParams params;
    const std::vector<float> logits = {0.5f, 3.0f, 1.0f};
    std::vector<float> copy = logits;
    EXPECT_EQ(Sampler(params).sample(copy, {}), 1);
    params.logit_bias = {{1, -100.0f}};
    copy = logits;
    EXPECT_EQ(Sampler(params).sample(copy, {}), 2) << "logit_bias -100 must remove token 1";
}

// The log-probabilities the sampler should report, computed directly in
// double: log-softmax of (logits - presence/frequency penalties) / T over
// the tokens top-k keeps (all of them when greedy: T = 1, no filter).
std::vector<double> expected_logprobs(const std::vector<float>& logits, float temperature,
                                      int32_t top_k) {
    const double scale = temperature > 0.0f ? double(temperature) : 1.0;
    std::vector<double> scaled;
    for (const float l : logits) scaled.push_back(double(l) / scale);
    std::vector<double> sorted = scaled;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const bool filtered = temperature > 0.0f && top_k > 0 && size_t(top_k) < logits.size();
    const double threshold = filtered ? sorted[size_t(top_k) - 1] : -INFINITY;
    double total = 0.0;
    for (const double x : scaled) total += x >= threshold ? std::exp(x - sorted[0]) : 0.0;
    std::vector<double> out;
    for (const double x : scaled) {
        out.push_back(x >= threshold ? x - sorted[0] - std::log(total) : -INFINITY);
    }
    return out;
}

TEST(SamplerLogprobs, MatchADirectLogSoftmaxGreedyAndSampled) {
    RandomSource rng;
    for (int trial = 0; trial < 40; ++trial) {
        const size_t vocab = size_t(rng.integer(5, 300));
        SamplingParams params;
        const bool greedy = trial % 2 == 0;
        params.temperature = greedy ? 0.0f : rng.uniform(1, 0.3f, 1.7f)[0];
        params.top_k = greedy ? 0 : int32_t(rng.integer(0, int64_t(vocab)));
        params.logprobs = int32_t(rng.integer(0, kMaxTopLogprobs));
        params.seed = uint64_t(rng.integer(0, 1000000));
        const std::vector<float> logits = rng.normal(vocab, 3.0f);
        std::vector<float> scratch = logits;
        SampledLogprobs got;
        const TokenId chosen = Sampler(params).sample(scratch, {}, &got);
        const std::vector<double> want =
            expected_logprobs(logits, params.temperature, params.top_k);
        const std::string where = fmt::format("vocab {}, temperature {}, top_k {}; {}", vocab,
                                              params.temperature, params.top_k, rng.trace());
        ASSERT_EQ(got.chosen.token, chosen) << where;
        ASSERT_NEAR(got.chosen.logprob, want[size_t(chosen)], 1e-4)
            << "the chosen token's logprob must be log p under the distribution it was drawn "
               "from; "
            << where;
        std::vector<size_t> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return logits[a] > logits[b]; });
        size_t expected_top = std::min(size_t(params.logprobs), vocab);
        if (!greedy && params.top_k > 0)
            expected_top = std::min(expected_top, size_t(params.top_k));
        ASSERT_EQ(got.top.size(), expected_top) << where;
        for (size_t i = 0; i < got.top.size(); ++i) {
            ASSERT_EQ(got.top[i].token, TokenId(order[i]))
                << "top_logprobs must list the most likely tokens first; " << where;
            ASSERT_NEAR(got.top[i].logprob, want[order[i]], 1e-4) << where;
        }
        if (greedy) ASSERT_EQ(chosen, TokenId(order[0])) << where;
    }
}

TEST(SamplerLogprobs, FilteredTokensHaveMinusInfinityAndPenaltiesCount) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 2;
    params.logprobs = 3;
    Sampler sampler(params);
    // A token the filter dropped: -inf (and top_logprobs stops at the kept set).
    std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
    const SampledLogprobs dropped = sampler.logprobs_of(logits, {}, 3);
    EXPECT_EQ(dropped.chosen.logprob, -INFINITY);
    ASSERT_EQ(dropped.top.size(), 2u);
    EXPECT_NEAR(dropped.top[0].logprob, 2.0 - std::log(std::exp(2.0) + std::exp(1.0)), 1e-5);

    // A greedy request's logprobs come after the presence penalty: the
    // generated token 0 loses 1.5, so token 1 is chosen and reported.
    SamplingParams greedy;
    greedy.presence_penalty = 1.5f;
    greedy.logprobs = 1;
    Sampler penalized(greedy);
    std::vector<float> first = {0.0f, 0.0f};
    penalized.sample(first, std::vector<TokenId>{7});  // the prompt: nothing penalized
    std::vector<float> row = {1.0f, 0.5f};
    SampledLogprobs got;
    EXPECT_EQ(penalized.sample(row, std::vector<TokenId>{7, 0}, &got), 1);
    const double z = std::log(std::exp(-0.5) + std::exp(0.5));
    EXPECT_NEAR(got.chosen.logprob, 0.5 - z, 1e-5)
        << "logprobs must be computed after the penalties (processed logprobs)";
}

TEST(SamplerLogprobs, LogprobsOfDrawsNothingFromTheRandomStream) {
    RandomSource rng;
    SamplingParams params;
    params.temperature = 0.8f;
    params.logprobs = 2;
    params.seed = uint64_t(rng.integer(0, 1000000));
    const std::vector<float> logits = rng.normal(50, 2.0f);
    Sampler a(params);
    Sampler b(params);
    std::vector<float> copy = logits;
    SampledLogprobs from_sample;
    const TokenId token = a.sample(copy, {}, &from_sample);
    copy = logits;
    const SampledLogprobs described = b.logprobs_of(copy, {}, token);
    EXPECT_EQ(described.chosen.logprob, from_sample.chosen.logprob);
    // b drew nothing, so its next draw is a's first.
    copy = logits;
    EXPECT_EQ(b.sample(copy, {}), token) << rng.trace();
}

TEST(SamplingParams, LogprobsRangeAndNoSpeculation) {
    SamplingParams params;
    params.logprobs = kMaxTopLogprobs + 1;
    EXPECT_THROW(params.validate(), Error);
    params.logprobs = -2;
    EXPECT_THROW(params.validate(), Error);
    params.logprobs = 0;
    EXPECT_NO_THROW(params.validate());
    params.num_speculative_tokens = 2;
    EXPECT_THROW(params.validate(), Error);
}

}  // namespace
}  // namespace servelab
