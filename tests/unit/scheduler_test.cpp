// scheduler_test.cpp — Lab 5 groundwork: the iteration-level scheduler.
//
// Rules one by one (token budget and chunked prefill, running before
// waiting, the sequence cap, rejection of requests that can never fit,
// priorities), then the equivalence test: 64 requests of mixed lengths run
// through the scheduler and the batched forward pass together — with
// chunked prefill, prefix caching and preemption forced by a small KV pool —
// must each produce exactly the tokens they produce alone.
#include <gtest/gtest.h>

#include <memory>

#include "reference/common/error.h"
#include "reference/engine/generator.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/sampling/sampler.h"
#include "reference/scheduler/scheduler.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

using test::one_float_config;
using test::RandomSource;

std::unique_ptr<Request> make_request(int64_t id, int64_t prompt_tokens, int32_t max_tokens,
                                      int64_t block_size, int32_t priority = 0) {
    SamplingParams params;
    params.max_tokens = max_tokens;
    std::vector<TokenId> prompt;
    for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(TokenId(id * 1000 + i));
    return std::make_unique<Request>(id, prompt, params, priority, block_size);
}

// What the engine does after a step, minus the model: the chunks' tokens are
// computed, and a request that caught up gets a new token.
void pretend_step(KvBlockManager& kv, const SchedulerOutput& out) {
    for (const ScheduledChunk& c : out.chunks) {
        kv.commit(c.request->kv, c.request->tokens);
        if (c.request->num_uncomputed() == 0) c.request->tokens.push_back(7);
    }
}

TEST(Scheduler, ChunksALongPromptUnderTheTokenBudget) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 32}, 4096);
    auto request = make_request(1, 100, 4, 4);
    scheduler.add(*request);
    std::vector<int64_t> chunk_sizes;
    for (int step = 0; step < 4; ++step) {
        const SchedulerOutput out = scheduler.schedule();
        ASSERT_EQ(out.chunks.size(), 1u);
        chunk_sizes.push_back(out.chunks[0].num_tokens);
        pretend_step(kv, out);
    }
    EXPECT_EQ(chunk_sizes, (std::vector<int64_t>{32, 32, 32, 4}));
    EXPECT_EQ(request->num_generated(), 1);                      // the last chunk ended the prompt
    EXPECT_EQ(scheduler.schedule().chunks.at(0).num_tokens, 1);  // decoding now
    scheduler.finish(*request);
    EXPECT_EQ(pool.allocator().num_free(), 64);
}

TEST(Scheduler, WithoutChunkingAPromptWaitsForAWholeStep) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 32, .chunked_prefill = false}, 4096);
    auto small = make_request(1, 20, 4, 4);
    auto large = make_request(2, 20, 4, 4);
    scheduler.add(*small);
    scheduler.add(*large);
    const SchedulerOutput out = scheduler.schedule();  // 20 + 20 > 32: only the first
    ASSERT_EQ(out.chunks.size(), 1u);
    EXPECT_EQ(out.chunks[0].request, small.get());
    EXPECT_EQ(scheduler.num_waiting(), 1);
}

TEST(Scheduler, RunningRequestsGoFirstAndTheCapHolds) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 16, .max_num_seqs = 2}, 4096);
    std::vector<std::unique_ptr<Request>> requests;
    for (int64_t id = 0; id < 4; ++id) {
        requests.push_back(make_request(id, 6, 8, 4));
        scheduler.add(*requests.back());
    }
    SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(out.chunks.size(), 2u);  // the cap: 2 running
    pretend_step(kv, out);
    out = scheduler.schedule();
    ASSERT_EQ(out.chunks.size(), 2u);
    EXPECT_EQ(out.chunks[0].request, requests[0].get());  // decode tokens of the running two
    EXPECT_EQ(out.chunks[0].num_tokens, 1);
    scheduler.finish(*requests[0]);  // a request leaves...
    pretend_step(kv, out);
    out = scheduler.schedule();  // ...and a waiting one joins at the next step
    ASSERT_EQ(out.chunks.size(), 2u);
    EXPECT_EQ(out.chunks[0].request, requests[1].get());
    EXPECT_EQ(out.chunks[1].request, requests[2].get());
    EXPECT_EQ(out.chunks[1].num_tokens, 6);
}

TEST(Scheduler, RejectsRequestsThatCouldNeverRun) {
    PagedKvCache pool(one_float_config(), 8, 4);  // 32 token slots
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {}, 64);
    auto empty = make_request(1, 0, 4, 4);
    EXPECT_THROW(scheduler.add(*empty), Error);
    auto too_long_for_context = make_request(2, 64, 4, 4);
    EXPECT_NE(test::error_of([&] {
                  scheduler.add(*too_long_for_context);
              }).find("does not fit the context"),
              std::string::npos);
    auto too_big_for_pool = make_request(3, 20, 20, 4);  // up to 40 tokens, 10 blocks
    EXPECT_NE(test::error_of([&] { scheduler.add(*too_big_for_pool); }).find("more than the pool"),
              std::string::npos);
    EXPECT_EQ(scheduler.num_waiting(), 0);
    // One that fits exactly (32 tokens, 8 blocks) is admitted and scheduled.
    auto fits = make_request(4, 20, 12, 4);
    scheduler.add(*fits);
    const SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(out.chunks.size(), 1u);
    EXPECT_EQ(out.chunks[0].request, fits.get());
    EXPECT_EQ(out.chunks[0].num_tokens, 20);
}

TEST(Scheduler, PreemptsTheNewestAndTheOldestKeepsGoing) {
    PagedKvCache pool(one_float_config(), 6, 4);  // 24 slots
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 64}, 4096);
    auto old_request = make_request(1, 8, 12, 4);  // up to 20 tokens
    auto new_request = make_request(2, 8, 12, 4);
    scheduler.add(*old_request);
    scheduler.add(*new_request);
    int64_t preemptions = 0;
    for (int step = 0; step < 40 && old_request->num_generated() < 12; ++step) {
        const SchedulerOutput out = scheduler.schedule();
        for (const Request* r : out.preempted) {
            EXPECT_EQ(r, new_request.get());
            ++preemptions;
        }
        pretend_step(kv, out);
    }
    EXPECT_EQ(old_request->num_generated(), 12);
    EXPECT_GT(preemptions, 0);
    EXPECT_EQ(new_request->status, RequestStatus::kWaiting);
}

TEST(Scheduler, PriorityPolicyAdmitsTheUrgentFirstAndPreemptsTheLeastUrgent) {
    PagedKvCache pool(one_float_config(), 6, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.policy = SchedulingPolicy::kPriority}, 4096);
    auto relaxed = make_request(1, 8, 12, 4, /*priority=*/5);
    auto urgent = make_request(2, 8, 12, 4, /*priority=*/0);
    scheduler.add(*relaxed);
    scheduler.add(*urgent);
    SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(out.chunks.size(), 2u);
    EXPECT_EQ(out.chunks[0].request, urgent.get());
    pretend_step(kv, out);
    for (int step = 0; step < 40 && urgent->num_generated() < 12; ++step) {
        out = scheduler.schedule();
        for (const Request* r : out.preempted) EXPECT_EQ(r, relaxed.get());
        pretend_step(kv, out);
    }
    EXPECT_EQ(urgent->num_generated(), 12);
    EXPECT_GT(relaxed->num_preemptions, 0);
}

// ---- Continuous batching equals solo runs ------------------------------------

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
void run_sixty_four_requests(SchedulingPolicy policy) {
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
    KvBlockManager kv(pool, true);
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
        KvCache solo_cache(model.config, 128);
        const GenerationResult solo =
            generate(runner, model.config, model.tokenizer, prompt, params, {}, &solo_cache);
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
            << "request " << l.request->id << " (" << l.request->num_preemptions << " preemptions)";
    }
    EXPECT_GT(preemptions, 0) << "the pool was meant to force preemption";
    EXPECT_GT(partial_chunks, 0) << "no prompt was chunked";
    // Every block comes back: only the prefix cache still holds some.
    kv.clear_prefix_cache();
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks());
}

TEST(ContinuousBatching, SixtyFourRequestsEqualTheirSoloRunsDespitePreemption) {
    run_sixty_four_requests(SchedulingPolicy::kFcfs);
}

TEST(ContinuousBatching, SixtyFourPrioritizedRequestsEqualTheirSoloRunsDespitePreemption) {
    run_sixty_four_requests(SchedulingPolicy::kPriority);
}

}  // namespace
}  // namespace servelab
