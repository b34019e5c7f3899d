// tokens_up_to_rounding.h — holding two attention paths to the same tokens
// when their logits may differ in the last bits (Labs 1, 2, 4 and 9).
//
// The engine attends with FlashAttention over paged blocks (Lab 9's online
// softmax): its logits have the same bits whatever shares the step, however
// the prompt is chunked and whatever the block size, so an engine's request
// must equal its solo run on that path token for token. Lab 1's attention
// without a cache and Lab 2's on a contiguous cache are other kernels: they
// add the same products in another order, and their logits differ from the
// paged path's by about 1e-6. A sampled token whose draw lands that close to
// the edge between two tokens, or a greedy near-tie, then differs now and
// then (about once in thirty runs of the 16-request engine test). So two
// runs on different paths must give the same tokens, or else differ first at
// a token where both paths' logits agree up to rounding (kRoundingLogitGap)
// and each path's row gives its own token to the same sampler. After that
// the sequences are no longer comparable.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "kernels/common/error.h"
#include "reference/engine/model_runner.h"
#include "reference/engine/step_plan.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/model/model.h"
#include "reference/sampling/sampler.h"

namespace servelab::test {

enum class AttentionPath { kNoCache, kContiguous, kPaged };

// Far above rounding (1e-6 on the tiny models), far below what a wrong KV
// row, position or mask does to a logit.
constexpr float kRoundingLogitGap = 1e-4f;

inline const char* path_name(AttentionPath path) {
    switch (path) {
        case AttentionPath::kNoCache:
            return "no cache";
        case AttentionPath::kContiguous:
            return "contiguous cache";
        case AttentionPath::kPaged:
            return "paged cache";
    }
    return "?";
}

// The logits of the last token of `sequence` on `path`, computed from scratch.
inline std::vector<float> last_logits(ModelRunner& runner, const Model& model, AttentionPath path,
                                      std::span<const TokenId> sequence) {
    const int64_t length = int64_t(sequence.size());
    std::vector<float> logits;
    if (path == AttentionPath::kNoCache) {
        logits = runner.forward({sequence, 0});
    } else if (path == AttentionPath::kContiguous) {
        KvCache cache(model.config, length);
        logits = runner.forward(plan_step(sequence, &cache), &cache);
    } else {
        const int64_t block_size = 16;
        PagedKvCache pool(model.config, (length + block_size - 1) / block_size, block_size);
        KvBlockManager kv(pool, false);
        PagedSequence paged = kv.start(sequence);
        if (!kv.reserve(paged, length)) throw Error("last_logits: the pool is too small");
        logits = runner.forward({sequence, 0}, pool, paged.table);
        kv.finish(paged);
    }
    const size_t vocab = size_t(model.config.vocab_size);
    return std::vector<float>(logits.end() - int64_t(vocab), logits.end());
}

// The token `params`' sampler draws at output position `last`, replayed on
// `rows` (rows[j]: the logits before output token j, tokens[j] the token then
// appended); every earlier draw must give tokens[j] too.
inline void expect_replay_gives(const SamplingParams& params, std::span<const TokenId> prompt,
                                const std::vector<std::vector<float>>& rows,
                                const std::vector<TokenId>& tokens, AttentionPath path) {
    Sampler sampler(params);
    std::vector<TokenId> history(prompt.begin(), prompt.end());
    for (size_t j = 0; j < rows.size(); ++j) {
        std::vector<float> row = rows[j];
        const TokenId drawn = sampler.sample(row, history);
        ASSERT_EQ(drawn, tokens[j]) << "replaying the sampler on the " << path_name(path)
                                    << "'s logits does not give its run's output token " << j;
        history.push_back(tokens[j]);
    }
}

// `a` (generated on path_a) and `b` (on path_b) from the same prompt and
// params: the same tokens, or a first difference that rounding explains.
inline void expect_same_tokens_up_to_rounding(const Model& model, std::span<const TokenId> prompt,
                                              const SamplingParams& params, AttentionPath path_a,
                                              const std::vector<TokenId>& a, AttentionPath path_b,
                                              const std::vector<TokenId>& b) {
    if (a == b) return;
    const size_t shorter = std::min(a.size(), b.size());
    const size_t first =
        size_t(std::mismatch(a.begin(), a.begin() + int64_t(shorter), b.begin()).first - a.begin());
    ASSERT_LT(first, shorter) << "one run's tokens are the other's first " << shorter
                              << " tokens and then go on: they stopped differently";
    ModelRunner runner(model.config, model.weights);
    std::vector<std::vector<float>> rows_a, rows_b;
    std::vector<TokenId> sequence(prompt.begin(), prompt.end());
    for (size_t j = 0; j <= first; ++j) {
        rows_a.push_back(last_logits(runner, model, path_a, sequence));
        rows_b.push_back(last_logits(runner, model, path_b, sequence));
        sequence.push_back(a[j]);
    }
    float gap = 0.0f;
    for (size_t v = 0; v < rows_a[first].size(); ++v) {
        gap = std::max(gap, std::abs(rows_a[first][v] - rows_b[first][v]));
    }
    ASSERT_LE(gap, kRoundingLogitGap)
        << "output token " << first << " is " << a[first] << " on the " << path_name(path_a)
        << " and " << b[first] << " on the " << path_name(path_b)
        << ", and their logits there differ by " << gap
        << ": more than rounding, so one path computed something else";
    expect_replay_gives(params, prompt, rows_a, a, path_a);
    expect_replay_gives(params, prompt, rows_b, b, path_b);
}

}  // namespace servelab::test
