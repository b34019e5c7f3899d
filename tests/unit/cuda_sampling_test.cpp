// cuda_sampling_test.cpp — the GPU sampler (sample_tokens) against the CPU Sampler's filters.
//
// CUDA backend (issue 7; chapter: decoding strategies). Built only when nvcc
// was found; without a usable GPU every test reports skipped. The expected
// token is built on the CPU from the CPU's own pieces (apply_repetition_penalty,
// argmax, keep_top_k, keep_top_p, and sampler.cpp's softmax and min-p), then
// the draw rule of sampling_kernels.h: walk the kept tokens in vocabulary
// order until the running sum passes uniform * (kept mass).
//
// Greedy and top-k are exact (the scaled logits are the CPU's bit for bit).
// The probabilities are not: the GPU's expf and summation order differ from
// the CPU's in the last bits (a few 1e-7 relative). So
//  - each uniform is moved, if needed, to at least kUniformMargin from every
//    cumulative boundary of the draw (a uniform that close to one could pick
//    the neighbour on either side), and
//  - where top-p's or min-p's threshold falls within rounding of a token
//    (top_p +- 1e-6, min_p * (1 +- 1e-5)), either kept set is right, so the
//    draw from either is accepted.
// Workspaces and outputs are poisoned (0xFF bytes: NaN floats, token -1)
// before each launch.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/sampling_kernels.h"
#include "reference/sampling/sampler.h"
#include "reference/sampling/sampling_filters.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

using cuda::DeviceSample;

// Far above the GPU-vs-CPU probability differences (~4e-7 of the kept mass),
// and small enough to find room between the boundaries of 49152 tokens.
constexpr double kUniformMargin = 1e-5;

// Logits rows and the samples drawn from them: one sample_tokens launch.
struct Batch {
    int64_t vocab = 0;
    std::vector<float> logits;  // rows × vocab
    std::vector<DeviceSample> samples;
    std::vector<int32_t> penalty_tokens;  // samples index ranges of this
    std::vector<uint64_t> mask_words;     // constrained samples' grammar masks (mask_offset)

    std::span<const float> row(int32_t r) const {
        return {logits.data() + int64_t(r) * vocab, size_t(vocab)};
    }
    std::span<const int32_t> penalties(const DeviceSample& s) const {
        return {penalty_tokens.data() + s.penalty_begin, size_t(s.penalty_end - s.penalty_begin)};
    }
    // Appends `ids` to penalty_tokens and points `sample` at them.
    void penalize(DeviceSample& sample, float penalty, const std::vector<int32_t>& ids) {
        sample.repetition_penalty = penalty;
        sample.penalty_begin = int32_t(penalty_tokens.size());
        penalty_tokens.insert(penalty_tokens.end(), ids.begin(), ids.end());
        sample.penalty_end = int32_t(penalty_tokens.size());
    }
};

std::vector<float> penalized(std::span<const float> row, const DeviceSample& s,
                             std::span<const int32_t> ids) {
    std::vector<float> logits(row.begin(), row.end());
    apply_repetition_penalty(logits, ids, s.repetition_penalty, 0);  // ids are distinct
    return logits;
}

// The CPU pipeline from the penalty to min-p (sampler.cpp), with top_p and
// min_p given separately so they can be nudged; the kept tokens with their
// probabilities, sorted by id.
std::vector<Candidate> cpu_kept(std::span<const float> row, const DeviceSample& s,
                                std::span<const int32_t> ids, float top_p, float min_p) {
    const std::vector<float> logits = penalized(row, s, ids);
    std::vector<Candidate> candidates;
    for (size_t i = 0; i < logits.size(); ++i)
        candidates.push_back({logits[i] / s.temperature, TokenId(i)});
    keep_top_k(candidates, s.top_k);
    const float max_logit = candidates.front().score;
    double total = 0.0;
    for (Candidate& c : candidates) {
        c.score = std::exp(c.score - max_logit);
        total += c.score;
    }
    for (Candidate& c : candidates) c.score = float(c.score / total);
    if (top_p < 1.0f) keep_top_p(candidates, top_p);
    if (min_p > 0.0f) {
        const float threshold = min_p * candidates.front().score;
        size_t kept = 1;
        while (kept < candidates.size() && candidates[kept].score >= threshold) ++kept;
        candidates.resize(kept);
    }
    std::sort(candidates.begin(), candidates.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    return candidates;
}

double kept_mass(const std::vector<Candidate>& kept) {
    double mass = 0.0;
    for (const Candidate& c : kept) mass += c.score;
    return mass;
}

// sampling_kernels.h's draw: kept tokens in id order, the first whose
// running sum exceeds uniform * mass (the last one if rounding runs past).
TokenId draw_by_id(const std::vector<Candidate>& kept, double uniform) {
    const double target = uniform * kept_mass(kept);
    double cumulative = 0.0;
    for (const Candidate& c : kept) {
        cumulative += c.score;
        if (target < cumulative) return c.id;
    }
    return kept.back().id;
}

// The uniforms at which the draw switches tokens (running sum / mass).
void add_boundaries(const std::vector<Candidate>& kept, std::vector<double>& out) {
    const double mass = kept_mass(kept);
    double cumulative = 0.0;
    for (size_t i = 0; i + 1 < kept.size(); ++i) {
        cumulative += kept[i].score;
        out.push_back(cumulative / mass);
    }
}

// `uniform` if it is kUniformMargin clear of every boundary, else the
// closest point that is (still near 0 or 1 when it started there).
double clear_of(double uniform, std::vector<double> boundaries) {
    boundaries.push_back(-1.0);  // sentinels: the ends of [0, 1) are no boundary
    boundaries.push_back(2.0);
    std::sort(boundaries.begin(), boundaries.end());
    double best = uniform, best_distance = INFINITY;
    for (size_t i = 0; i + 1 < boundaries.size(); ++i) {
        const double lo = std::max(0.0, boundaries[i] + kUniformMargin);
        const double hi = std::min(1.0 - 1e-12, boundaries[i + 1] - kUniformMargin);
        if (lo > hi) continue;
        const double candidate = std::clamp(uniform, lo, hi);
        if (std::fabs(candidate - uniform) < best_distance) {
            best = candidate;
            best_distance = std::fabs(candidate - uniform);
        }
    }
    return best;
}

// What the GPU may answer for one sample: the uniform to send (moved clear
// of the boundaries) and the acceptable tokens (one, unless a filter's
// threshold sits within rounding of a token).
struct Expected {
    double uniform;
    std::set<TokenId> tokens;
};

Expected expect(const Batch& batch, const DeviceSample& s) {
    const std::span<const float> row = batch.row(s.logits_row);
    if (s.temperature == 0.0f) return {s.uniform, {argmax(penalized(row, s, batch.penalties(s)))}};
    const std::vector<float> top_ps =
        s.top_p < 1.0f
            ? std::vector<float>{s.top_p, s.top_p - 1e-6f, std::min(1.0f, s.top_p + 1e-6f)}
            : std::vector<float>{s.top_p};
    const std::vector<float> min_ps =
        s.min_p > 0.0f ? std::vector<float>{s.min_p, s.min_p * (1.0f - 1e-5f),
                                            std::min(1.0f, s.min_p * (1.0f + 1e-5f))}
                       : std::vector<float>{s.min_p};
    std::vector<std::vector<Candidate>> kept_sets;
    std::vector<double> boundaries;
    for (float top_p : top_ps) {
        for (float min_p : min_ps) {
            kept_sets.push_back(cpu_kept(row, s, batch.penalties(s), top_p, min_p));
            add_boundaries(kept_sets.back(), boundaries);
        }
    }
    Expected expected{clear_of(s.uniform, boundaries), {}};
    for (const auto& kept : kept_sets) expected.tokens.insert(draw_by_id(kept, expected.uniform));
    return expected;
}

std::string describe(const DeviceSample& s) {
    std::ostringstream out;
    out << "row " << s.logits_row << " T " << s.temperature << " top_k " << s.top_k << " top_p "
        << s.top_p << " min_p " << s.min_p << " penalty " << s.repetition_penalty << " x"
        << (s.penalty_end - s.penalty_begin) << " uniform " << s.uniform;
    return out.str();
}

std::vector<int32_t> sample_on_gpu(const Batch& batch) {
    const size_t n = batch.samples.size();
    cuda::DeviceBuffer<float> logits(batch.logits.size());
    logits.upload(batch.logits);
    cuda::DeviceBuffer<DeviceSample> samples(n);
    samples.upload(batch.samples);
    std::vector<int32_t> penalty_tokens = batch.penalty_tokens;
    penalty_tokens.push_back(0);  // never read; keeps the buffer non-empty
    cuda::DeviceBuffer<int32_t> penalties(penalty_tokens.size());
    penalties.upload(penalty_tokens);
    cuda::DeviceBuffer<float> workspace(
        static_cast<size_t>(cuda::sampling_workspace_floats(int64_t(n), batch.vocab)));
    workspace.fill_bytes(0xFF);
    std::vector<uint64_t> mask_words = batch.mask_words;
    mask_words.push_back(0);  // never read; keeps the buffer non-empty
    cuda::DeviceBuffer<uint64_t> masks(mask_words.size());
    masks.upload(mask_words);
    cuda::DeviceBuffer<int32_t> out(n);
    out.fill_bytes(0xFF);
    cuda::sample_tokens(logits.data(), samples.data(), penalties.data(), masks.data(), out.data(),
                        int64_t(n), batch.vocab, workspace.data(), 0);
    return out.download();
}

// Moves each sample's uniform clear of its boundaries, samples on the GPU
// and checks every token against the CPU's.
void expect_cpu_tokens(Batch& batch) {
    std::vector<Expected> expected;
    for (DeviceSample& s : batch.samples) {
        expected.push_back(expect(batch, s));
        s.uniform = expected.back().uniform;
    }
    const std::vector<int32_t> tokens = sample_on_gpu(batch);
    ASSERT_EQ(tokens.size(), batch.samples.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        EXPECT_TRUE(expected[i].tokens.count(tokens[i]))
            << "vocab " << batch.vocab << " sample " << i << " (" << describe(batch.samples[i])
            << "): gpu " << tokens[i] << ", cpu " << *expected[i].tokens.begin();
    }
}

DeviceSample make_sample(int32_t row, float temperature, double uniform) {
    DeviceSample s;
    s.logits_row = row;
    s.temperature = temperature;
    s.uniform = uniform;
    return s;
}

// Uniforms at both ends and in between, including the Sampler's extremes.
const std::vector<double> kUniforms = {0.0, 1e-9, 0.1, 0.37, 0.5, 0.83, 0.999, 1.0 - 1e-12};

class CudaSampling : public test::CudaTest {
  protected:
    // Normal logits, or ones rounded to multiples of 0.5 so that many tokens
    // tie (the filters' tie rules matter), -0.0 and +0.0 among them.
    std::vector<float> logits_row(int64_t vocab, float stddev, bool with_ties) {
        std::vector<float> row = random_.normal(size_t(vocab), stddev);
        if (with_ties) {
            for (float& v : row) v = std::round(v * 2.0f) / 2.0f;
            row[0] = -0.0f;
            if (vocab > 2) row[2] = 0.0f;
        }
        return row;
    }
    double uniform() { return double(random_.engine()() >> 11) * 0x1.0p-53; }
    test::RandomSource random_;
};

TEST_F(CudaSampling, GreedyPicksTheFirstOfTiedMaxima) {
    SCOPED_TRACE(random_.trace());
    for (int64_t vocab : {int64_t(49152), int64_t(1000), int64_t(7)}) {
        Batch batch;
        batch.vocab = vocab;
        const auto add_row = [&](std::vector<float> row) {
            batch.logits.insert(batch.logits.end(), row.begin(), row.end());
            batch.samples.push_back(make_sample(int32_t(batch.samples.size()), 0.0f, 0.5));
        };
        add_row(random_.normal(size_t(vocab), 3.0f));
        std::vector<float> tied = random_.normal(size_t(vocab));
        tied[3] = tied[size_t(vocab) - 1] = 50.0f;  // two maxima: the lower id wins
        add_row(tied);
        add_row(std::vector<float>(size_t(vocab), -INFINITY));  // fully masked: id 0, as the CPU
        std::vector<float> zeros(size_t(vocab), -1.0f);
        zeros[5] = 0.0f;
        zeros[4] = -0.0f;  // -0 == +0: a tie, so id 4
        add_row(zeros);
        add_row(logits_row(vocab, 2.0f, true));
        const std::vector<int32_t> want_planted = {3, 0, 4};
        for (int r = 1; r <= 3; ++r) {
            EXPECT_EQ(argmax(batch.row(r)), want_planted[size_t(r - 1)]);  // the CPU agrees
        }
        expect_cpu_tokens(batch);
    }
}

TEST_F(CudaSampling, RepetitionPenaltyCanChangeTheArgmax) {
    SCOPED_TRACE(random_.trace());
    const int64_t vocab = 1000;
    Batch batch;
    batch.vocab = vocab;
    // Row 0: positive leader 10 (5.0) over 20 (4.0): 5 / 1.5 < 4 hands it to 20.
    std::vector<float> positive = random_.uniform(size_t(vocab), -3.0f, 3.0f);
    positive[10] = 5.0f;
    positive[20] = 4.0f;
    // Row 1: all negative, leader 7 (-0.5) over 8 (-0.6): -0.5 * 1.5 < -0.6 hands it to 8.
    std::vector<float> negative = random_.uniform(size_t(vocab), -5.0f, -1.0f);
    negative[7] = -0.5f;
    negative[8] = -0.6f;
    batch.logits = positive;
    batch.logits.insert(batch.logits.end(), negative.begin(), negative.end());

    // Out-of-range ids are skipped, as the CPU skips them.
    batch.samples.push_back(make_sample(0, 0.0f, 0.0));
    batch.penalize(batch.samples.back(), 1.5f, {10, 999, -1, int32_t(vocab), 500});
    batch.samples.push_back(make_sample(1, 0.0f, 0.0));
    batch.penalize(batch.samples.back(), 1.5f, {7, 0});
    batch.samples.push_back(make_sample(0, 0.0f, 0.0));  // no penalty: 10 stays
    // Sampled with a penalty on many ids, and a penalty below 1 (a bonus).
    std::vector<int32_t> many;
    for (int32_t id = 0; id < 300; id += 3) many.push_back(id);
    for (double u : kUniforms) {
        batch.samples.push_back(make_sample(0, 1.0f, u));
        batch.penalize(batch.samples.back(), 1.3f, many);
        batch.samples.push_back(make_sample(1, 0.8f, u));
        batch.penalize(batch.samples.back(), 0.7f, many);
    }
    EXPECT_EQ(argmax(penalized(batch.row(0), batch.samples[0], batch.penalties(batch.samples[0]))),
              20);
    EXPECT_EQ(argmax(penalized(batch.row(1), batch.samples[1], batch.penalties(batch.samples[1]))),
              8);
    expect_cpu_tokens(batch);
}

TEST_F(CudaSampling, TemperatureOnlyDrawsAsTheCpu) {
    SCOPED_TRACE(random_.trace());
    for (int64_t vocab : {int64_t(49152), int64_t(1000), int64_t(7)}) {
        Batch batch;
        batch.vocab = vocab;
        batch.logits = logits_row(vocab, 2.0f, false);
        for (float temperature : {0.7f, 1.0f, 1.5f}) {
            for (double u : kUniforms) batch.samples.push_back(make_sample(0, temperature, u));
            batch.samples.push_back(make_sample(0, temperature, uniform()));
        }
        expect_cpu_tokens(batch);
    }
}

TEST_F(CudaSampling, TopKKeepsTheCpuSetWithTiesAtTheBoundary) {
    SCOPED_TRACE(random_.trace());
    for (int64_t vocab : {int64_t(49152), int64_t(1000), int64_t(7)}) {
        Batch batch;
        batch.vocab = vocab;
        batch.logits = logits_row(vocab, 2.0f, true);  // row 0: many ties
        const std::vector<float> smooth = logits_row(vocab, 2.0f, false);
        batch.logits.insert(batch.logits.end(), smooth.begin(), smooth.end());
        for (int32_t row : {0, 1}) {
            for (int32_t k : {1, 2, 40, int32_t(vocab) - 1, int32_t(vocab), int32_t(vocab) + 5}) {
                for (double u : kUniforms) {
                    batch.samples.push_back(make_sample(row, 1.0f, u));
                    batch.samples.back().top_k = k;
                }
            }
        }
        expect_cpu_tokens(batch);
    }
}

TEST_F(CudaSampling, TopPAndMinPKeepTheCpuSet) {
    SCOPED_TRACE(random_.trace());
    for (int64_t vocab : {int64_t(49152), int64_t(1000), int64_t(7)}) {
        Batch batch;
        batch.vocab = vocab;
        batch.logits = logits_row(vocab, 2.0f, true);
        const std::vector<float> smooth = logits_row(vocab, 3.0f, false);
        batch.logits.insert(batch.logits.end(), smooth.begin(), smooth.end());
        struct Filters {
            int32_t top_k;
            float top_p, min_p;
        };
        const std::vector<Filters> filters = {
            {0, 0.1f, 0.0f},  {0, 0.9f, 0.0f},  {0, 1.0f, 0.05f},
            {0, 1.0f, 0.3f},  {0, 0.9f, 0.05f}, {40, 0.9f, 0.0f},
            {40, 0.5f, 0.1f}, {3, 0.1f, 1.0f},  {0, 0.999f, 0.0f}};
        for (int32_t row : {0, 1}) {
            for (const Filters& f : filters) {
                for (double u : {1e-9, 0.3, 0.7, 1.0 - 1e-12, uniform()}) {
                    batch.samples.push_back(make_sample(row, 0.9f, u));
                    batch.samples.back().top_k = f.top_k;
                    batch.samples.back().top_p = f.top_p;
                    batch.samples.back().min_p = f.min_p;
                }
            }
        }
        // All of it at once, with a penalty.
        batch.samples.push_back(make_sample(1, 1.2f, uniform()));
        batch.samples.back().top_k = 50;
        batch.samples.back().top_p = 0.8f;
        batch.samples.back().min_p = 0.02f;
        batch.penalize(batch.samples.back(), 1.2f, {0, 1, 2, 3});
        expect_cpu_tokens(batch);
    }
}

TEST_F(CudaSampling, SamplesShareRowsWithDifferentParams) {
    SCOPED_TRACE(random_.trace());
    // n completions of one prompt fork from one logits row, each with its
    // own parameters and uniform; one launch serves all of them.
    const int64_t vocab = 49152;
    Batch batch;
    batch.vocab = vocab;
    for (int r = 0; r < 3; ++r) {
        const std::vector<float> row = logits_row(vocab, 2.5f, r == 1);
        batch.logits.insert(batch.logits.end(), row.begin(), row.end());
    }
    for (int32_t row : {2, 0, 2, 1, 2, 0}) {
        batch.samples.push_back(make_sample(row, 0.0f, 0.0));  // greedy
        batch.samples.push_back(make_sample(row, 0.8f, uniform()));
        batch.samples.back().top_k = 40;
        batch.samples.push_back(make_sample(row, 1.0f, uniform()));
        batch.samples.back().top_p = 0.9f;
        batch.samples.push_back(make_sample(row, 0.6f, uniform()));
        batch.samples.back().min_p = 0.1f;
        batch.penalize(batch.samples.back(), 1.1f, {int32_t(row), 100, 4000});
    }
    expect_cpu_tokens(batch);
}

TEST_F(CudaSampling, DrawsFollowTheFilteredDistribution) {
    SCOPED_TRACE(random_.trace());
    // 20k draws with fresh uniforms from one small row; the observed
    // frequencies against the CPU's exact probabilities over the kept set.
    // E[TV] <= 1/2 sum sqrt(p_i / N) <= 1/2 sqrt(K / N) = 0.012 for K = 12
    // kept tokens; one draw moves TV by at most 1/N, so (McDiarmid)
    // P(TV > 0.012 + t) <= exp(-2 N t^2): below e^-30 for the bound 0.04.
    const int64_t vocab = 20, draws = 20000;
    DeviceSample params = make_sample(0, 0.8f, 0.0);
    params.top_k = 12;
    params.top_p = 0.95f;
    params.min_p = 0.02f;
    Batch batch;
    batch.vocab = vocab;
    std::vector<Candidate> kept;
    for (int attempt = 0;; ++attempt) {  // a row with no threshold within rounding of a token
        ASSERT_LT(attempt, 100);
        batch.logits = random_.normal(size_t(vocab), 1.5f);
        kept = cpu_kept(batch.row(0), params, {}, params.top_p, params.min_p);
        bool stable = true;
        for (float dp : {-1e-6f, 1e-6f}) {
            for (float dm : {-1e-5f, 1e-5f}) {
                const auto other =
                    cpu_kept(batch.row(0), params, {}, params.top_p + dp, params.min_p * (1 + dm));
                stable = stable && other.size() == kept.size();
            }
        }
        if (stable && kept.size() >= 3) break;
    }
    for (int64_t i = 0; i < draws; ++i) {
        batch.samples.push_back(params);
        batch.samples.back().uniform = uniform();
    }
    const std::vector<int32_t> tokens = sample_on_gpu(batch);
    std::vector<double> frequency(size_t(vocab), 0.0);
    for (int32_t t : tokens) {
        ASSERT_TRUE(t >= 0 && t < vocab) << t;
        frequency[size_t(t)] += 1.0 / double(draws);
    }
    std::vector<double> probability(size_t(vocab), 0.0);
    const double mass = kept_mass(kept);
    for (const Candidate& c : kept) probability[size_t(c.id)] = c.score / mass;
    double total_variation = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
        if (probability[size_t(i)] == 0.0) {
            EXPECT_EQ(frequency[size_t(i)], 0.0) << "token " << i << " was filtered out";
        }
        total_variation += 0.5 * std::fabs(frequency[size_t(i)] - probability[size_t(i)]);
    }
    EXPECT_LT(total_variation, 0.04) << kept.size() << " kept tokens";
}

// Constrained decoding (Lab 12): a grammar mask leaves only its tokens. Greedy
// picks the best allowed token (the CPU Sampler's choice under the same
// mask), and a draw at any uniform, through every filter, is an allowed token.
TEST_F(CudaSampling, AGrammarMaskLeavesOnlyItsTokens) {
    SCOPED_TRACE(random_.trace());
    for (const int64_t vocab : {int64_t(7), int64_t(200), int64_t(50000)}) {
        Batch batch;
        batch.vocab = vocab;
        batch.logits = logits_row(vocab, 3.0f, /*with_ties=*/false);
        TokenBitmask mask{int32_t(vocab)};
        for (int64_t t = 0; t < vocab; ++t) {
            if (random_.engine()() % 3 == 0) mask.set(TokenId(t));
        }
        mask.set(TokenId(vocab - 1));  // never empty
        batch.mask_words.assign(mask.words().begin(), mask.words().end());
        for (const double u : kUniforms) {
            for (const float temperature : {0.0f, 0.7f, 1.5f}) {
                DeviceSample s = make_sample(0, temperature, u);
                s.mask_offset = 0;
                s.top_k = temperature > 1.0f ? 3 : 0;
                s.top_p = temperature > 1.0f ? 0.9f : 1.0f;
                batch.samples.push_back(s);
            }
        }
        const std::vector<int32_t> tokens = sample_on_gpu(batch);
        std::vector<float> cpu_row(batch.logits.begin(), batch.logits.end());
        const TokenId cpu_greedy = Sampler(SamplingParams{}).sample(cpu_row, {}, nullptr, &mask);
        for (size_t i = 0; i < tokens.size(); ++i) {
            EXPECT_TRUE(mask.test(tokens[i]))
                << "vocab " << vocab << ": " << describe(batch.samples[i]) << " drew token "
                << tokens[i] << ", which the grammar mask forbids";
            if (batch.samples[i].temperature == 0.0f) {
                EXPECT_EQ(tokens[i], cpu_greedy) << "greedy under a mask must pick the best "
                                                    "allowed token, as the CPU Sampler does";
            }
        }
    }
}

}  // namespace
}  // namespace servelab
#endif
