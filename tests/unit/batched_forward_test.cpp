// batched_forward_test.cpp — Lab 5 groundwork: one forward pass over many sequences.
//
// ModelRunner::forward_batch runs the projections and the MLP once over the
// tokens of every sequence in the step and attention per sequence, through
// each one's block table. Batching must not change any sequence's numbers:
// each chunk's logits must equal what a forward pass of that sequence alone
// gives, whether the step mixes whole prompts, prefill chunks and decode
// tokens, and greedy decoding of a batch must give each sequence the tokens
// it gets alone.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/common/error.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/sampling/sampling_filters.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

class BatchedForward : public test::TinyModelTest {
  protected:
    void SetUp() override {
        load_tiny_model({.num_heads = 4,
                         .num_kv_heads = int64_t(1) << random_.integer(0, 2),
                         .context_length = 256});
    }
    // The logits of the last token of `tokens`, computed alone from scratch.
    std::vector<float> alone(std::span<const TokenId> tokens) {
        return runner_->forward({tokens, 0});
    }
};

TEST_F(BatchedForward, MixedPrefillChunksAndDecodeTokensEqualEachSequenceAlone) {
    SCOPED_TRACE(random_.trace());
    const int64_t vocab = model_->config.vocab_size;
    PagedKvCache pool(model_->config, 256, random_.integer(1, 8));
    KvBlockManager kv(pool, false);
    const int num_sequences = 6;
    std::vector<std::vector<TokenId>> tokens;  // each sequence's tokens so far
    std::vector<PagedSequence> sequences;
    for (int i = 0; i < num_sequences; ++i) {
        tokens.push_back(random_prompt(random_.integer(1, 30)));
        sequences.push_back(kv.start(tokens.back()));
    }
    // Several steps; in each, every sequence computes a random number of its
    // uncomputed tokens (a prefill chunk) or, once caught up, one new token.
    for (int step = 0; step < 8; ++step) {
        std::vector<SequenceChunk> chunks;
        std::vector<int> in_step;
        for (int i = 0; i < num_sequences; ++i) {
            PagedSequence& s = sequences[size_t(i)];
            if (s.num_computed_tokens == int64_t(tokens[size_t(i)].size())) {
                tokens[size_t(i)].push_back(TokenId(random_.integer(0, vocab - 1)));
            }
            const int64_t remaining = int64_t(tokens[size_t(i)].size()) - s.num_computed_tokens;
            const int64_t count = random_.integer(1, remaining);
            if (random_.integer(0, 3) == 0) continue;  // not scheduled this step
            ASSERT_TRUE(kv.reserve(s, count));
            const std::span<const TokenId> all(tokens[size_t(i)]);
            chunks.push_back({StepInput{all.subspan(size_t(s.num_computed_tokens), size_t(count)),
                                        s.num_computed_tokens},
                              &s.table});
            in_step.push_back(i);
        }
        if (chunks.empty()) continue;
        const std::vector<float> logits = runner_->forward_batch(chunks, pool);
        ASSERT_EQ(logits.size(), chunks.size() * size_t(vocab));
        for (size_t c = 0; c < chunks.size(); ++c) {
            PagedSequence& s = sequences[size_t(in_step[c])];
            const int64_t end = s.table.num_tokens();
            kv.commit(s, tokens[size_t(in_step[c])]);
            const std::vector<float> expected =
                alone(std::span(tokens[size_t(in_step[c])]).first(size_t(end)));
            const std::vector<float> got(logits.begin() + int64_t(c) * vocab,
                                         logits.begin() + int64_t(c + 1) * vocab);
            EXPECT_LE(test::max_relative_error(got, expected), 1e-5)
                << "step " << step << ", sequence " << in_step[c] << " at " << end;
        }
    }
    for (PagedSequence& s : sequences) kv.finish(s);
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks());
}

TEST_F(BatchedForward, GreedyDecodingOfABatchGivesEachSequenceItsOwnTokens) {
    SCOPED_TRACE(random_.trace());
    PagedKvCache pool(model_->config, 512, 16);
    KvBlockManager kv(pool, false);
    const int num_sequences = 8;
    const int32_t gen_tokens = 12;
    std::vector<std::vector<TokenId>> tokens;
    std::vector<PagedSequence> sequences;
    for (int i = 0; i < num_sequences; ++i) {
        tokens.push_back(random_prompt(random_.integer(1, 40)));
        sequences.push_back(kv.start(tokens.back()));
    }
    for (int32_t n = 0; n < gen_tokens; ++n) {
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i < num_sequences; ++i) {
            PagedSequence& s = sequences[size_t(i)];
            const int64_t count = int64_t(tokens[size_t(i)].size()) - s.num_computed_tokens;
            ASSERT_TRUE(kv.reserve(s, count));
            chunks.push_back(
                {StepInput{std::span(tokens[size_t(i)]).subspan(size_t(s.num_computed_tokens)),
                           s.num_computed_tokens},
                 &s.table});
        }
        const std::vector<float> logits = runner_->forward_batch(chunks, pool);
        for (int i = 0; i < num_sequences; ++i) {
            kv.commit(sequences[size_t(i)], tokens[size_t(i)]);
            const float* row = logits.data() + int64_t(i) * model_->config.vocab_size;
            tokens[size_t(i)].push_back(argmax(std::span(row, size_t(model_->config.vocab_size))));
        }
    }
    SamplingParams greedy;
    greedy.max_tokens = gen_tokens;
    greedy.ignore_eos = true;
    for (int i = 0; i < num_sequences; ++i) {
        const std::span<const TokenId> all(tokens[size_t(i)]);
        const std::span<const TokenId> prompt = all.first(all.size() - size_t(gen_tokens));
        const GenerationResult expected = solo(prompt, greedy);
        EXPECT_EQ(std::vector<TokenId>(all.begin() + int64_t(prompt.size()), all.end()),
                  expected.tokens)
            << "sequence " << i;
        kv.finish(sequences[size_t(i)]);
    }
}

// The engine tests hold each request to its solo run on a paged cache of
// its own, token for token (TinyModelTest::solo()). That is fair only if a
// sequence's logits on the paged path have the same bits whatever shares its
// step, however its prompt is chunked and whatever the block size: this test
// says so directly, so that a kernel that breaks it is named here rather
// than flipping a sampled token in an engine test once in a while.
TEST_F(BatchedForward, PagedLogitsHaveTheSameBitsWhateverTheBatchTheChunksAndTheBlockSize) {
    SCOPED_TRACE(random_.trace());
    const size_t vocab = size_t(model_->config.vocab_size);
    const std::vector<TokenId> prompt = random_prompt(random_.integer(2, 40));
    const std::vector<TokenId> other = random_prompt(random_.integer(1, 40));
    std::vector<float> alone;
    {
        PagedKvCache pool(model_->config, 64, 16);
        KvBlockManager kv(pool, false);
        PagedSequence s = kv.start(prompt);
        ASSERT_TRUE(kv.reserve(s, int64_t(prompt.size())));
        const std::vector<float> logits = runner_->forward({prompt, 0}, pool, s.table);
        alone.assign(logits.end() - int64_t(vocab), logits.end());
        kv.finish(s);
    }
    for (const int64_t block_size : {1, 3, 4, 7, 32}) {
        PagedKvCache pool(model_->config, 128, block_size);
        KvBlockManager kv(pool, false);
        PagedSequence s = kv.start(prompt), o = kv.start(other);
        std::vector<float> last;
        while (s.num_computed_tokens < int64_t(prompt.size())) {
            // A random chunk of the prompt, beside a chunk of the other sequence
            // (or beside nothing once the other is computed).
            const int64_t count =
                random_.integer(1, int64_t(prompt.size()) - s.num_computed_tokens);
            ASSERT_TRUE(kv.reserve(s, count));
            std::vector<SequenceChunk> chunks;
            const int64_t other_count = std::min<int64_t>(
                random_.integer(1, 8), int64_t(other.size()) - o.num_computed_tokens);
            if (other_count > 0) {
                ASSERT_TRUE(kv.reserve(o, other_count));
                chunks.push_back({StepInput{std::span(other).subspan(size_t(o.num_computed_tokens),
                                                                     size_t(other_count)),
                                            o.num_computed_tokens},
                                  &o.table});
            }
            chunks.push_back(
                {StepInput{std::span(prompt).subspan(size_t(s.num_computed_tokens), size_t(count)),
                           s.num_computed_tokens},
                 &s.table});
            const std::vector<float> logits = runner_->forward_batch(chunks, pool);
            last.assign(logits.end() - int64_t(vocab), logits.end());
            kv.commit(s, prompt);
            if (other_count > 0) kv.commit(o, other);
        }
        EXPECT_EQ(last, alone) << "block size " << block_size
                               << ": the last prompt token's logits are not the same bits as "
                               << "the prompt's alone, in one chunk, with blocks of 16";
        kv.finish(s);
        kv.finish(o);
    }
}

TEST_F(BatchedForward, RejectsAnEmptyBatchAndUnreservedSlots) {
    PagedKvCache pool(model_->config, 16, 4);
    KvBlockManager kv(pool, false);
    EXPECT_THROW(runner_->forward_batch({}, pool), Error);
    const std::vector<TokenId> prompt = random_prompt(5);
    PagedSequence s = kv.start(prompt);
    ASSERT_TRUE(kv.reserve(s, 4));  // one slot short
    const SequenceChunk chunk{StepInput{prompt, 0}, &s.table};
    EXPECT_NE(test::error_of([&] {
                  runner_->forward_batch(std::span(&chunk, 1), pool);
              }).find("slots reserved"),
              std::string::npos);
    const SequenceChunk no_table{StepInput{prompt, 0}, nullptr};
    EXPECT_THROW(runner_->forward_batch(std::span(&no_table, 1), pool), Error);
    kv.finish(s);
}

}  // namespace
}  // namespace servelab
