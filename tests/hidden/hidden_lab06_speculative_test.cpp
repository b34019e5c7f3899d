// hidden_lab06_speculative_test.cpp — Lab 6's hidden tests: verification, lookup, rollback.
//
// Lab 6 (chapter 11.6, speculative decoding). The instructor's hidden tests,
// left out of the student release (never quote them in a handout): the same
// contracts as tests/unit/speculative_test.cpp — greedy verification keeps
// the drafts the argmax agrees with, stochastic verification accepts with
// min(1, p/q) and corrects from the residual, one uniform per judged draft
// and one for the next token, prompt lookup continues the latest repeat of
// the longest suffix, truncate keeps ceil(n / block_size) blocks — re-checked
// on random vocabularies, draft lengths (K = 0 included), block sizes and
// sequences, against plain loops written here from the formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "kernels/common/error.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/block_table.h"
#include "reference/speculative/ngram_proposer.h"
#include "reference/speculative/rejection_sampler.h"

namespace servelab {
namespace {

using test::RandomSource;

TokenId index_of_max(const std::vector<float>& values, size_t from, size_t count) {
    size_t best = from;
    for (size_t i = from; i < from + count; ++i) {
        if (values[i] > values[best]) best = i;
    }
    return TokenId(best - from);
}

// For every draft length K in 0..7 and every place m in 0..K where the
// drafts stop agreeing (m = K: all agree), on random vocabularies.
TEST(HiddenLab06Verify, GreedyKeepsExactlyTheAgreeingPrefixWhereverItEnds) {
    RandomSource random(601);
    SCOPED_TRACE(random.trace());
    for (int64_t k = 0; k <= 7; ++k) {
        for (int64_t m = 0; m <= k; ++m) {
            const int64_t vocab = random.integer(2, 37);
            const std::vector<float> logits = random.normal(size_t((k + 1) * vocab), 3.0f);
            std::vector<TokenId> draft;
            for (int64_t i = 0; i < k; ++i) {
                const TokenId best = index_of_max(logits, size_t(i * vocab), size_t(vocab));
                // Position m disagrees: any other token.
                draft.push_back(i == m  ? TokenId((best + random.integer(1, vocab - 1)) % vocab)
                                : i < m ? best
                                        : TokenId(random.integer(0, vocab - 1)));
            }
            const Verification v = verify_greedy(draft, logits, vocab);
            const TokenId next = index_of_max(logits, size_t(m * vocab), size_t(vocab));
            EXPECT_EQ(v.num_accepted, m)
                << k << " drafts over a vocabulary of " << vocab << ", the argmax agreeing with "
                << "the first " << m << ": greedy verification keeps exactly the drafts before "
                << "the first disagreement" << (m == k ? " (all of them)" : "");
            EXPECT_EQ(v.next_token, next)
                << k << " drafts, " << m << " kept: the next token is the argmax of row " << m
                << (m == k ? " (the bonus row after the last draft)" : " (the first mismatch)");
        }
    }
}

// A probability row: random weights, normalized; some entries exactly 0.
std::vector<float> random_row(RandomSource& random, int64_t vocab) {
    std::vector<float> row = random.uniform(size_t(vocab), 0.0f, 1.0f);
    for (float& v : row) {
        if (random.integer(0, 4) == 0) v = 0.0f;
    }
    row[size_t(random.integer(0, vocab - 1))] += 0.5f;  // never all zero
    float total = 0.0f;
    for (float v : row) total += v;
    for (float& v : row) v /= total;
    return row;
}

// The first index whose cumulative weight exceeds u * sum (the handout's draw).
TokenId pick(const std::vector<float>& weights, double u) {
    double total = 0.0;
    for (float w : weights) total += w;
    double cumulative = 0.0;
    TokenId last = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        if (weights[i] <= 0.0f) continue;
        cumulative += weights[i];
        last = TokenId(i);
        if (u * total < cumulative) return last;
    }
    return last;
}

struct Scripted {
    Verification verdict;
    size_t draws_used = 0;
};

// The rule, written from the formula, on the same draws in the same order:
// accept d with u * q(d) < p(d); on rejection the next token comes from
// max(0, p - q) (from p when that is all zero); all kept: from row K.
Scripted by_the_formula(const std::vector<TokenId>& draft, const std::vector<float>& p,
                        const std::vector<float>& q, int64_t vocab,
                        const std::vector<double>& draws) {
    Scripted s;
    const size_t v = size_t(vocab);
    for (size_t i = 0; i < draft.size(); ++i) {
        const size_t token = size_t(draft[i]);
        if (draws[s.draws_used++] * double(q[i * v + token]) < double(p[i * v + token])) {
            ++s.verdict.num_accepted;
            continue;
        }
        std::vector<float> residual(v);
        bool any = false;
        for (size_t t = 0; t < v; ++t) {
            residual[t] = std::max(0.0f, p[i * v + t] - q[i * v + t]);
            any = any || residual[t] > 0.0f;
        }
        if (!any) residual.assign(p.begin() + long(i * v), p.begin() + long((i + 1) * v));
        s.verdict.next_token = pick(residual, draws[s.draws_used++]);
        return s;
    }
    const std::vector<float> bonus(p.begin() + long(draft.size() * v), p.end());
    s.verdict.next_token = pick(bonus, draws[s.draws_used++]);
    return s;
}

struct Case {
    int64_t vocab = 0;
    std::vector<TokenId> draft;
    std::vector<float> p, q;
    std::vector<double> draws;
};

// K drafts sampled from their own q rows; some positions made a draft the
// target rules out (p(d) = 0, drawn against 0), some made p <= q everywhere
// (an empty residual), the rest random.
Case draw_case(RandomSource& random) {
    Case c;
    c.vocab = random.integer(2, 19);
    const int64_t k = random.integer(0, 6);
    for (int64_t i = 0; i <= k; ++i) {
        const std::vector<float> row = random_row(random, c.vocab);
        c.p.insert(c.p.end(), row.begin(), row.end());
    }
    for (int64_t i = 0; i < k; ++i) {
        std::vector<float> q = random_row(random, c.vocab);
        const TokenId d = pick(q, random.uniform(1, 0.0f, 1.0f)[0]);
        c.draft.push_back(d);
        float* p = c.p.data() + i * c.vocab;
        const int64_t kind = random.integer(0, 5);
        if (kind == 0) p[d] = 0.0f;  // the target rules the draft out
        if (kind == 1) {             // p = 0.9 q: rejected only by a high draw, residual empty
            for (int64_t t = 0; t < c.vocab; ++t) p[t] = 0.9f * q[size_t(t)];
        }
        c.q.insert(c.q.end(), q.begin(), q.end());
    }
    for (int64_t i = 0; i <= k; ++i) {
        const double u = random.uniform(1, 0.0f, 1.0f)[0];
        c.draws.push_back(random.integer(0, 4) == 0 ? (i % 2 ? 0.0 : 0.995) : u);
    }
    return c;
}

std::string describe(const Case& c) {
    std::string text = std::to_string(c.draft.size()) + " drafts [";
    for (size_t i = 0; i < c.draft.size(); ++i) {
        const size_t at = i * size_t(c.vocab) + size_t(c.draft[i]);
        text += (i ? ", " : "") + std::to_string(c.draft[i]) + " (p " + std::to_string(c.p[at]) +
                ", q " + std::to_string(c.q[at]) + ", u " + std::to_string(c.draws[i]) + ")";
    }
    return text + "] over a vocabulary of " + std::to_string(c.vocab);
}

// 400 random cases, each checked against the formula on the same scripted
// draws: how many drafts are kept, the next token, and how many draws.
TEST(HiddenLab06Verify, StochasticFollowsTheRuleDrawForDraw) {
    RandomSource random(602);
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 400 && !HasFailure(); ++trial) {
        const Case c = draw_case(random);
        const Scripted want = by_the_formula(c.draft, c.p, c.q, c.vocab, c.draws);
        size_t used = 0;
        const std::function<double()> uniform = [&] {
            return used < c.draws.size() ? c.draws[used++] : (++used, 0.5);
        };
        const Verification got = verify_stochastic(c.draft, c.p, c.q, c.vocab, uniform);
        EXPECT_EQ(got.num_accepted, want.verdict.num_accepted)
            << describe(c) << ": each draft is kept when u * q(d) < p(d) (probability "
            << "min(1, p/q)); a draft the target gives 0 is never kept, even on u = 0";
        EXPECT_EQ(got.next_token, want.verdict.next_token)
            << describe(c) << ", " << want.verdict.num_accepted << " kept: after a rejection the "
            << "next token comes from the residual max(0, p - q) of that row (from p when the "
            << "residual is all zero); when all are kept, the bonus comes from row K of p";
        EXPECT_EQ(used, want.draws_used)
            << describe(c) << ": one uniform per judged draft and one for the next token, in "
            << "that order";
    }
}

// A draft the draft model gave probability 0 cannot have been sampled from
// it: an error, at whichever position it is judged (the ones before it kept).
TEST(HiddenLab06Verify, ADraftItsOwnModelRuledOutIsAnErrorAtAnyPosition) {
    RandomSource random(607);
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 20; ++trial) {
        Case c = draw_case(random);
        if (c.draft.empty()) continue;
        const size_t bad = size_t(random.integer(0, int64_t(c.draft.size()) - 1));
        const size_t v = size_t(c.vocab);
        for (size_t i = 0; i < bad; ++i) {  // kept: p(d) > 0 and a draw of 0
            c.p[i * v + size_t(c.draft[i])] = std::max(c.p[i * v + size_t(c.draft[i])], 0.01f);
            c.draws[i] = 0.0;
        }
        c.q[bad * v + size_t(c.draft[bad])] = 0.0f;
        size_t used = 0;
        const std::function<double()> uniform = [&] { return c.draws[std::min(used++, bad)]; };
        EXPECT_THROW(verify_stochastic(c.draft, c.p, c.q, c.vocab, uniform), Error)
            << "draft " << bad << " of " << c.draft.size() << " has q(d) = 0: the draft model "
            << "could not have drawn it, so verification must refuse it (servelab::Error)";
    }
}

// Chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<float>& probs) {
    int64_t n = 0;
    for (int64_t c : counts) n += c;
    double stat = 0.0;
    for (size_t t = 0; t < counts.size(); ++t) {
        const double expected = double(n) * probs[t];
        if (expected > 0)
            stat += (double(counts[t]) - expected) * (double(counts[t]) - expected) / expected;
        else if (counts[t] > 0)
            return INFINITY;  // a token p rules out was emitted
    }
    return stat;
}

// 60,000 verifications of K = 2 drafts over 6 tokens: at each position the
// emitted token (the kept draft or the correction) follows p, whatever q.
TEST(HiddenLab06Verify, EveryEmittedTokenFollowsTheTargetOnASixTokenVocabulary) {
    RandomSource random(603);
    SCOPED_TRACE(random.trace());
    const int64_t vocab = 6, k = 2;
    std::vector<float> p, q;
    for (int64_t i = 0; i <= k; ++i) {
        const auto row = random_row(random, vocab);
        p.insert(p.end(), row.begin(), row.end());
    }
    for (int64_t i = 0; i < k; ++i) {
        const auto row = random_row(random, vocab);
        q.insert(q.end(), row.begin(), row.end());
    }
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const std::function<double()> uniform = [&] { return unit(random.engine()); };
    std::vector<std::vector<int64_t>> counts(size_t(k + 1), std::vector<int64_t>(size_t(vocab)));
    for (int trial = 0; trial < 60'000; ++trial) {
        std::vector<TokenId> draft;
        for (int64_t i = 0; i < k; ++i) {
            draft.push_back(pick({q.begin() + i * vocab, q.begin() + (i + 1) * vocab}, uniform()));
        }
        const Verification v = verify_stochastic(draft, p, q, vocab, uniform);
        for (int64_t i = 0; i < v.num_accepted; ++i) ++counts[size_t(i)][size_t(draft[i])];
        ++counts[size_t(v.num_accepted)][size_t(v.next_token)];
    }
    for (int64_t i = 0; i <= k; ++i) {
        const double stat =
            chi_square(counts[size_t(i)], {p.begin() + i * vocab, p.begin() + (i + 1) * vocab});
        EXPECT_LT(stat, 50.0) << "position " << i << ": the emitted tokens do not follow the "
                              << "target's p (chi-square " << stat << " at 5 degrees of freedom; "
                              << "the limit 50 is P < 1e-9): a rejection's correction comes from "
                              << "max(0, p - q), the bonus from p_K, each draft is kept with "
                              << "probability min(1, p/q)";
    }
}

// Brute force: every earlier occurrence of the last n tokens, the latest one.
std::vector<TokenId> lookup(const std::vector<TokenId>& tokens, int64_t k, int64_t max_n,
                            int64_t min_n) {
    const int64_t num_tokens = int64_t(tokens.size());
    for (int64_t n = max_n; n >= min_n; --n) {
        if (n >= num_tokens) continue;  // the suffix needs a token after an earlier copy
        int64_t latest = -1;
        for (int64_t start = 0; start + n < num_tokens; ++start) {
            bool same = true;
            for (int64_t j = 0; j < n; ++j)
                same = same && tokens[start + j] == tokens[num_tokens - n + j];
            if (same) latest = start;
        }
        if (latest < 0) continue;
        const int64_t from = latest + n;
        return {tokens.begin() + from, tokens.begin() + std::min(num_tokens, from + k)};
    }
    return {};
}

std::string text(const std::vector<TokenId>& tokens) {
    std::string out = "[";
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + std::to_string(tokens[i]);
    return out + "]";
}

// 3,000 random sequences over 2 to 4 token values (repeats everywhere),
// lengths 1 to 24, k 0 to 6, and random max_n / min_n.
TEST(HiddenLab06Ngram, ProposesWhatFollowsTheLatestRepeatOfTheLongestSuffix) {
    RandomSource random(604);
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 3000 && !HasFailure(); ++trial) {
        const int64_t values = random.integer(2, 4);
        std::vector<TokenId> tokens(size_t(random.integer(1, 24)));
        for (TokenId& t : tokens) t = TokenId(random.integer(0, values - 1) * 7 + 3);
        const int64_t min_n = random.integer(1, 4), max_n = min_n + random.integer(0, 3);
        const int64_t k = random.integer(0, 6);
        const std::vector<TokenId> got = propose_ngram(tokens, k, {.max_n = max_n, .min_n = min_n});
        EXPECT_EQ(text(got), text(lookup(tokens, k, max_n, min_n)))
            << "tokens " << text(tokens) << ", k " << k << ", n from " << max_n << " down to "
            << min_n << ": the longest suffix (of at most length - 1 tokens) that occurs earlier, "
            << "its latest occurrence (one at the very start counts), then up to k tokens after it";
    }
}

// For every block size 1..7 and every new length 0..L: ceil(n / block_size)
// blocks kept (the first ones, in order), the rest released, slots reused.
TEST(HiddenLab06Rollback, TruncateKeepsTheFirstCeilBlocksForEveryLength) {
    RandomSource random(605);
    SCOPED_TRACE(random.trace());
    for (int64_t block_size = 1; block_size <= 7; ++block_size) {
        const int64_t length = random.integer(1, 4 * block_size + 3);
        for (int64_t keep = 0; keep <= length; ++keep) {
            BlockAllocator allocator(64);
            BlockTable table(block_size);
            for (int64_t i = 0; i < length; ++i) table.append_slot(allocator);
            const std::vector<BlockId> before = table.blocks();
            const int64_t kept = (keep + block_size - 1) / block_size;
            table.truncate(keep, allocator);
            ASSERT_EQ(table.num_tokens(), keep) << "truncate(" << keep << ") of " << length;
            ASSERT_EQ(int64_t(table.blocks().size()), kept)
                << length << " tokens truncated to " << keep << " in blocks of " << block_size
                << ": truncate keeps ceil(" << keep << " / " << block_size << ") = " << kept
                << " blocks";
            EXPECT_TRUE(std::equal(table.blocks().begin(), table.blocks().end(), before.begin()))
                << "truncate keeps the table's first blocks and releases the last ones";
            EXPECT_EQ(allocator.num_free(), 64 - kept)
                << "the " << int64_t(before.size()) - kept << " blocks past the new end go back "
                << "to the pool";
            for (size_t b = size_t(kept); b < before.size(); ++b) {
                EXPECT_EQ(allocator.ref_count(before[b]), 0) << "block " << b << " stayed taken";
            }
            const KvSlot next = table.append_slot(allocator).slot;
            EXPECT_EQ(next.offset, keep % block_size)
                << "after truncate(" << keep << ") the next token goes to offset "
                << keep % block_size << " of its block";
        }
    }
}

// Out of range refuses and changes nothing; a shared block stays with the fork.
TEST(HiddenLab06Rollback, TruncateRefusesOutOfRangeAndLeavesSharedBlocksToTheFork) {
    RandomSource random(606);
    SCOPED_TRACE(random.trace());
    const int64_t block_size = random.integer(2, 6);
    const int64_t length = random.integer(2 * block_size + 1, 5 * block_size);
    BlockAllocator allocator(32);
    BlockTable table(block_size);
    for (int64_t i = 0; i < length; ++i) table.append_slot(allocator);
    const std::vector<BlockId> before = table.blocks();
    EXPECT_THROW(table.truncate(length + 1, allocator), Error)
        << "truncate past the end (" << length + 1 << " of " << length << ") must throw";
    EXPECT_THROW(table.truncate(-1, allocator), Error) << "truncate(-1) must throw";
    EXPECT_EQ(table.num_tokens(), length) << "a refused truncate changes nothing";
    EXPECT_EQ(table.blocks(), before) << "a refused truncate changes nothing";
    table.truncate(length, allocator);  // to its own length: nothing to do
    EXPECT_EQ(table.blocks(), before) << "truncate to the current length keeps every block";
    BlockTable fork = table.fork(allocator);
    table.truncate(0, allocator);
    EXPECT_TRUE(table.blocks().empty());
    for (BlockId b : before) {
        EXPECT_EQ(allocator.ref_count(b), 1)
            << "after truncate(0) of one of two tables sharing blocks, the fork still holds "
            << "each block once: truncate releases (a reference), it does not free for all";
    }
    EXPECT_EQ(fork.num_tokens(), length);
}

}  // namespace
}  // namespace servelab
