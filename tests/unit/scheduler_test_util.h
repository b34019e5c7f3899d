// scheduler_test_util.h — shared by the scheduler's tests (Lab 5, scheduler_test.cpp) and the
// radix cache's scheduling tests (Lab 11, radix_scheduling_test.cpp): requests, a step's batch in
// words, a step without the model, and the equivalence test of 64 requests against their solo
// runs.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/engine/runner_generate.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/sampling/sampler.h"
#include "reference/scheduler/scheduler.h"
#include "tests/unit/engine_test_util.h"

namespace servelab::test {

inline std::unique_ptr<Request> request_with(int64_t id, std::vector<TokenId> prompt,
                                             int32_t max_tokens, int64_t block_size,
                                             int32_t priority = 0) {
    SamplingParams params;
    params.max_tokens = max_tokens;
    return std::make_unique<Request>(id, std::move(prompt), params, priority, block_size);
}

// Request `id` with a prompt of distinct tokens id * 1000 + i.
inline std::unique_ptr<Request> make_request(int64_t id, int64_t prompt_tokens, int32_t max_tokens,
                                             int64_t block_size, int32_t priority = 0) {
    std::vector<TokenId> prompt;
    for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(TokenId(id * 1000 + i));
    return request_with(id, prompt, max_tokens, block_size, priority);
}

// A step's batch in the student's terms: "[request 1: 32 tokens, request 2: 1 token]".
inline std::string batch(const SchedulerOutput& out) {
    std::string text = "[";
    for (const ScheduledChunk& c : out.chunks) {
        text += (text.size() > 1 ? ", " : "") + std::string("request ") +
                std::to_string(c.request->id) + ": " + std::to_string(c.num_tokens) +
                (c.num_tokens == 1 ? " token" : " tokens");
    }
    return text + "]";
}

// What the engine does after a step, minus the model: the chunks' tokens are
// computed, and a request that caught up gets a new token.
inline void pretend_step(KvBlockManager& kv, const SchedulerOutput& out) {
    for (const ScheduledChunk& c : out.chunks) {
        kv.commit(c.request->kv, c.request->tokens);
        if (c.request->num_uncomputed() == 0) c.request->tokens.push_back(7);
    }
}

struct LiveRequest {
    std::unique_ptr<Request> request;
    std::unique_ptr<Sampler> sampler;
    std::vector<TokenId> solo_tokens;  // what generate() gives it alone
};

// 64 requests through the scheduler and the batched forward pass, each
// checked against its solo run. FCFS: all queued at once. Priority: each
// request has a random priority and they arrive two per step, so an urgent
// newcomer often finds older, less urgent requests running: those become
// the victims, often after they were already put in this step's batch
// (which they must then leave).
inline void run_sixty_four_requests(SchedulingPolicy policy,
                                    PrefixCacheKind prefix_cache = PrefixCacheKind::kHash) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const auto bytes = make_tiny_model({.seed = random.seed(), .context_length = 128});
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    ModelRunner runner(model.config, model.weights);
    const int64_t block_size = 4;
    // 48 blocks = 192 slots for 64 requests of up to 56 tokens (one of up
    // to 90): preemption is certain. Prefix caching on, and prompts share
    // prefixes.
    PagedKvCache pool(model.config, 48, block_size);
    KvBlockManager kv(pool, prefix_cache);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 48, .max_num_seqs = 24, .policy = policy},
                        128);

    std::vector<std::vector<TokenId>> prefixes(3);
    for (auto& prefix : prefixes) {
        for (int64_t n = random.integer(4, 24); n > 0; --n) {
            prefix.push_back(TokenId(random.integer(0, model.config.vocab_size - 1)));
        }
    }
    std::vector<LiveRequest> live;
    for (int64_t id = 0; id < 64; ++id) {
        std::vector<TokenId> prompt = prefixes[size_t(random.integer(0, 2))];
        // The last request's prompt never fits one 48-token step, so some
        // prompt is always chunked, whatever the arrivals.
        for (int64_t n = id == 63 ? 50 : random.integer(1, 16); n > 0; --n) {
            prompt.push_back(TokenId(random.integer(0, model.config.vocab_size - 1)));
        }
        SamplingParams params;
        params.max_tokens = int32_t(random.integer(1, 16));
        params.ignore_eos = true;
        if (id % 2 == 1) {  // half sampled with their own seeds, half greedy
            params.temperature = 0.8f;
            params.seed = uint64_t(random.integer(0, 1 << 30));
        }
        // Alone on a paged cache of its own: the same attention path as the
        // batch, whose bits do not depend on what shares a step, on chunking
        // or on the block size. So any difference is the batching's.
        const GenerationResult solo =
            generate_on_runner(runner, model, prompt, params, RunnerLayout::kContiguous, 16);
        const int32_t priority =
            policy == SchedulingPolicy::kPriority ? int32_t(random.integer(0, 3)) : 0;
        auto request = std::make_unique<Request>(id, prompt, params, priority, block_size);
        auto sampler = std::make_unique<Sampler>(request->params);
        live.push_back({std::move(request), std::move(sampler), solo.tokens});
    }

    const size_t arrivals_per_step = policy == SchedulingPolicy::kFcfs ? live.size() : 2;
    size_t num_arrived = 0;
    int64_t preemptions = 0, partial_chunks = 0, steps = 0, finished = 0;
    while (finished < int64_t(live.size())) {
        ASSERT_LT(++steps, 20'000) << "no progress";
        for (size_t n = 0; n < arrivals_per_step && num_arrived < live.size(); ++n) {
            scheduler.add(*live[num_arrived++].request);
        }
        const SchedulerOutput out = scheduler.schedule();
        ASSERT_FALSE(out.chunks.empty()) << "an idle step with requests waiting";
        preemptions += int64_t(out.preempted.size());
        for (const Request* victim : out.preempted) {
            // In the batch first: a victim scheduled again also holds blocks again.
            for (const ScheduledChunk& c : out.chunks) {
                ASSERT_NE(c.request, victim)
                    << "request " << victim->id << " was preempted in this step but is still in "
                    << "its batch (" << c.num_tokens << " tokens): a preempted request leaves "
                    << "the batch and its tokens go back to the budget (take_out_of_batch), and "
                    << "when make_room preempts the very request being scheduled, scheduling it "
                    << "stops";
            }
            ASSERT_EQ(victim->kv.table.blocks().size(), 0u)
                << "request " << victim->id << " was preempted but still holds "
                << victim->kv.table.blocks().size() << " KV blocks: preempting frees the "
                << "victim's blocks (kv_.finish); it recomputes its tokens later";
        }
        std::vector<SequenceChunk> chunks;
        for (const ScheduledChunk& c : out.chunks) {
            Request& r = *c.request;
            partial_chunks += c.num_tokens < r.num_uncomputed() ? 1 : 0;
            chunks.push_back({StepInput{std::span(r.tokens).subspan(
                                            size_t(r.kv.num_computed_tokens), size_t(c.num_tokens)),
                                        r.kv.num_computed_tokens},
                              &r.kv.table});
        }
        std::vector<float> logits = runner.forward_batch(chunks, pool);
        const size_t vocab = size_t(model.config.vocab_size);
        for (size_t i = 0; i < out.chunks.size(); ++i) {
            Request& r = *out.chunks[i].request;
            kv.commit(r.kv, r.tokens);
            if (r.num_uncomputed() > 0) continue;  // mid-prompt: no token yet
            LiveRequest& l = live[size_t(r.id)];
            r.tokens.push_back(
                l.sampler->sample(std::span(logits).subspan(i * vocab, vocab), r.tokens));
            if (r.num_generated() == r.params.max_tokens) {
                scheduler.finish(r);
                ++finished;
            }
        }
    }
    for (const LiveRequest& l : live) {
        const std::vector<TokenId> generated(
            l.request->tokens.begin() + l.request->num_prompt_tokens, l.request->tokens.end());
        EXPECT_EQ(generated, l.solo_tokens)
            << "request " << l.request->id << " (" << l.request->num_preemptions
            << " preemptions) generated other tokens than it does alone";
    }
    EXPECT_GT(preemptions, 0) << "the pool was meant to force preemption";
    EXPECT_GT(partial_chunks, 0) << "no prompt was chunked";
    // Every block comes back: only the prefix cache still holds some.
    kv.clear_prefix_cache();
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks())
        << pool.num_blocks() - pool.allocator().num_free()
        << " blocks are still taken after every request finished";
}

}  // namespace servelab::test
