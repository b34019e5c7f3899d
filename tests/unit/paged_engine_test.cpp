// paged_engine_test.cpp — Lab 4: generation over the paged KV cache.
//
// The paged engine must change WHERE keys and values live, never what the
// model computes. The first test compares its tokens with Lab 2's contiguous
// cache (generate() in generator.h) for random block sizes, greedy and
// seeded sampling, up to rounding (another attention kernel:
// tokens_up_to_rounding.h); the others, on parallel sampling (n > 1,
// copy-on-write), the prefix cache on and off and eviction, compare them
// with each request alone on a paged cache of its own (solo()), exactly.
#include <gtest/gtest.h>

#include "kernels/common/error.h"
#include "reference/engine/engine.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/tokens_up_to_rounding.h"

namespace servelab {
namespace {

class PagedEngine : public test::TinyModelTest {
  protected:
    void SetUp() override {
        load_tiny_model({.num_heads = 4,
                         .num_kv_heads = int64_t(1) << random_.integer(0, 2),
                         .context_length = 256});
    }
    std::vector<GenerationResult> paged(std::span<const TokenId> prompt,
                                        const SamplingParams& params, KvBlockManager& kv,
                                        int n = 1) {
        Engine engine(*model_, *runner_, kv, SchedulerConfig{});
        return engine.generate_parallel(prompt, params, n);
    }
    static SamplingParams sampled(uint64_t seed, int32_t max_tokens) {
        SamplingParams params;
        params.temperature = 0.9f;
        params.top_p = 0.95f;
        params.seed = seed;
        params.max_tokens = max_tokens;
        params.ignore_eos = true;
        return params;
    }
    static SamplingParams greedy(int32_t max_tokens) {
        SamplingParams params;
        params.max_tokens = max_tokens;
        params.ignore_eos = true;
        return params;
    }
};

TEST_F(PagedEngine, GivesTheContiguousCachesTokensForAnyBlockSize) {
    SCOPED_TRACE(random_.trace());
    for (int trial = 0; trial < 4; ++trial) {
        const int64_t block_size = random_.integer(1, 17);
        PagedKvCache pool(model_->config, 64, block_size);
        KvBlockManager kv(pool, /*enable_prefix_caching=*/false);
        const std::vector<TokenId> prompt = random_prompt(random_.integer(1, 40));
        for (const SamplingParams& params :
             {greedy(24), sampled(uint64_t(random_.integer(0, 1 << 30)), 24)}) {
            SCOPED_TRACE("block size " + std::to_string(block_size));
            const GenerationResult expected = contiguous_solo(prompt, params);
            const GenerationResult got = paged(prompt, params, kv).at(0);
            test::expect_same_tokens_up_to_rounding(
                *model_, prompt, params, test::AttentionPath::kPaged, got.tokens,
                test::AttentionPath::kContiguous, expected.tokens);
            EXPECT_EQ(got.finish_reason, expected.finish_reason);
            EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks()) << "blocks leaked";
        }
    }
}

TEST_F(PagedEngine, ParallelSamplingSharesThePromptAndEqualsIndependentRuns) {
    SCOPED_TRACE(random_.trace());
    const int64_t block_size = random_.integer(2, 8);
    PagedKvCache pool(model_->config, 128, block_size);
    KvBlockManager kv(pool, false);
    // A prompt ending mid-block, so every completion's first write copies it.
    const std::vector<TokenId> prompt = random_prompt(3 * block_size + 1);
    const SamplingParams params = sampled(uint64_t(random_.integer(0, 1 << 30)), 20);
    const int n = 3;
    const int64_t before = runner_->num_tokens_computed();
    const std::vector<GenerationResult> results = paged(prompt, params, kv, n);
    // The prompt was computed once, then one token per decode step.
    int64_t decode_steps = 0;
    for (const GenerationResult& r : results) decode_steps += int64_t(r.tokens.size()) - 1;
    EXPECT_EQ(runner_->num_tokens_computed() - before, int64_t(prompt.size()) + decode_steps);
    ASSERT_EQ(results.size(), size_t(n));
    for (int i = 0; i < n; ++i) {
        SamplingParams own = params;
        own.seed = params.seed + uint64_t(i);
        EXPECT_EQ(results[size_t(i)].tokens, solo(prompt, own).tokens) << "completion " << i;
    }
    EXPECT_NE(results[0].tokens, results[1].tokens) << "different seeds, same completion";
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks());
}

TEST_F(PagedEngine, ForkedCompletionsHoldThePromptBlocksOnce) {
    SCOPED_TRACE(random_.trace());
    PagedKvCache pool(model_->config, 64, 4);
    KvBlockManager kv(pool, false);
    const std::vector<TokenId> prompt = random_prompt(10);  // 2 full blocks + 2 tokens
    PagedSequence parent = kv.start(prompt);
    ASSERT_TRUE(kv.reserve(parent, 10));
    runner_->forward({prompt, 0}, pool, parent.table);
    kv.commit(parent, prompt);
    std::vector<PagedSequence> children;
    for (int i = 0; i < 3; ++i) children.push_back(kv.fork(parent));
    EXPECT_EQ(pool.allocator().num_used(), 3);  // 4 sequences, 3 blocks
    for (PagedSequence& child : children) ASSERT_TRUE(kv.reserve(child, 1));
    // Each child copied the shared partial block; the full blocks stay shared.
    EXPECT_EQ(pool.allocator().num_used(), 6);
    EXPECT_EQ(pool.allocator().ref_count(parent.table.blocks()[0]), 4);
    for (PagedSequence& child : children) kv.finish(child);
    kv.finish(parent);
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks());
}

TEST_F(PagedEngine, PrefixCacheGivesTheSameTokensAndSkipsThePrefill) {
    SCOPED_TRACE(random_.trace());
    const int64_t block_size = random_.integer(1, 8);
    PagedKvCache pool_on(model_->config, 256, block_size);
    PagedKvCache pool_off(model_->config, 256, block_size);
    KvBlockManager with_cache(pool_on, true);
    KvBlockManager without_cache(pool_off, false);
    const std::vector<TokenId> system = random_prompt(random_.integer(8, 40));
    int64_t expected_hits = 0;
    for (int request = 0; request < 6; ++request) {
        std::vector<TokenId> prompt = system;
        for (TokenId t : random_prompt(random_.integer(1, 12))) prompt.push_back(t);
        const SamplingParams params =
            request % 2 ? greedy(12) : sampled(uint64_t(random_.integer(0, 1 << 30)), 12);

        // Sampled requests ask for two completions: forks of a prompt whose
        // leading blocks came from the cache.
        const int n = request % 2 ? 1 : 2;
        const int64_t computed_before = runner_->num_tokens_computed();
        const std::vector<GenerationResult> on_all = paged(prompt, params, with_cache, n);
        const int64_t computed = runner_->num_tokens_computed() - computed_before;
        const std::vector<GenerationResult> off_all = paged(prompt, params, without_cache, n);
        for (int i = 0; i < n; ++i) {
            EXPECT_EQ(on_all[size_t(i)].tokens, off_all[size_t(i)].tokens)
                << "request " << request << " completion " << i;
        }
        const GenerationResult& on = on_all[0];
        const GenerationResult& off = off_all[0];
        EXPECT_EQ(off.cached_prompt_tokens, 0);
        // After the first request, the system prompt's full blocks are hits
        // (at least; an earlier request may share more), and hits are not
        // computed: the prefill is only the rest of the prompt.
        const int64_t system_blocks_tokens = int64_t(system.size()) / block_size * block_size;
        if (request > 0) {
            EXPECT_GE(on.cached_prompt_tokens,
                      std::min(system_blocks_tokens,
                               (int64_t(prompt.size()) - 1) / block_size * block_size));
            expected_hits += on.cached_prompt_tokens;
        }
        int64_t decode_steps = 0;
        for (const GenerationResult& r : on_all) decode_steps += int64_t(r.tokens.size()) - 1;
        EXPECT_EQ(computed, int64_t(prompt.size()) - on.cached_prompt_tokens + decode_steps);
    }
    EXPECT_GT(expected_hits, 0);
}

TEST_F(PagedEngine, EvictionUnderASmallPoolKeepsTheTokensUnchanged) {
    SCOPED_TRACE(random_.trace());
    const int64_t block_size = 4;
    // Room for about two requests: the prefix cache must evict to go on.
    PagedKvCache pool_on(model_->config, 24, block_size);
    PagedKvCache pool_off(model_->config, 24, block_size);
    KvBlockManager with_cache(pool_on, true);
    KvBlockManager without_cache(pool_off, false);
    std::vector<std::vector<TokenId>> systems = {random_prompt(20), random_prompt(20),
                                                 random_prompt(20)};
    for (int request = 0; request < 12; ++request) {
        std::vector<TokenId> prompt = systems[size_t(random_.integer(0, 2))];
        for (TokenId t : random_prompt(random_.integer(1, 6))) prompt.push_back(t);
        const SamplingParams params = sampled(uint64_t(request), 16);
        const std::vector<GenerationResult> on = paged(prompt, params, with_cache, 2);
        const std::vector<GenerationResult> off = paged(prompt, params, without_cache, 2);
        for (int i = 0; i < 2; ++i) {
            EXPECT_EQ(on[size_t(i)].tokens, off[size_t(i)].tokens)
                << "request " << request << " completion " << i;
        }
    }
    EXPECT_LE(with_cache.prefix_cache()->num_cached_blocks(), 24);
}

TEST_F(PagedEngine, APoolTooSmallForARequestIsAClearError) {
    SCOPED_TRACE(random_.trace());
    PagedKvCache pool(model_->config, 3, 4);  // 12 token slots
    KvBlockManager kv(pool, false);
    // The prompt alone, or the prompt with every token it may generate,
    // does not fit the whole pool: refused up front, never left waiting.
    for (const std::pair<int, int>& lengths : {std::pair{13, 4}, std::pair{10, 8}}) {
        // Plain locals for the lambda: clang 14 (the TSan build) cannot
        // capture structured bindings.
        const int prompt_length = lengths.first, max_tokens = lengths.second;
        const std::string error =
            test::error_of([&] { paged(random_prompt(prompt_length), greedy(max_tokens), kv); });
        EXPECT_NE(error.find("raise --kv-memory"), std::string::npos) << error;
        EXPECT_EQ(pool.allocator().num_free(), 3);
    }
    const GenerationResult r = paged(random_prompt(10), greedy(2), kv).at(0);
    EXPECT_EQ(r.tokens.size(), 2u);  // exactly fills the pool: positions 10 and 11
    EXPECT_EQ(pool.allocator().num_free(), 3);
}

TEST_F(PagedEngine, RejectsBadRequests) {
    PagedKvCache pool(model_->config, 8, 4);
    KvBlockManager kv(pool, true);
    EXPECT_THROW(paged({}, greedy(4), kv), Error);
    EXPECT_THROW(paged(random_prompt(4), greedy(4), kv, 0), Error);
    EXPECT_THROW(paged(random_prompt(256), greedy(4), kv), Error);
    PagedSequence seq = kv.start(random_prompt(4));
    ASSERT_TRUE(kv.reserve(seq, 4));
    const std::vector<TokenId> three = random_prompt(3);
    EXPECT_THROW(runner_->forward({three, 0}, pool, seq.table), Error);  // 3 != 4 reserved
    kv.finish(seq);
}

}  // namespace
}  // namespace servelab
