// scheduler_test.cpp — Lab 5 groundwork: the iteration-level scheduler.
//
// Rules one by one (token budget and chunked prefill, running before
// waiting, the sequence cap, rejection of requests that can never fit, fair
// prefill's cap on a long prompt's chunk, priorities), then the equivalence
// test: 64 requests of mixed lengths run through the scheduler and the
// batched forward pass together — with chunked prefill, prefix caching and
// preemption forced by a small KV pool — must each produce exactly the
// tokens they produce alone.
#include <gtest/gtest.h>

#include <memory>

#include "kernels/common/error.h"
#include "reference/engine/generator.h"
#include "reference/engine/runner_generate.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/sampling/sampler.h"
#include "reference/scheduler/scheduler.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/scheduler_test_util.h"

namespace servelab {
namespace {

using test::batch;
using test::make_request;
using test::one_float_config;
using test::pretend_step;
using test::RandomSource;
using test::request_with;
using test::run_sixty_four_requests;

std::vector<int64_t> ids(const std::vector<Request*>& requests) {
    std::vector<int64_t> out;
    for (const Request* r : requests) out.push_back(r->id);
    return out;
}

std::string id_list(const std::vector<int64_t>& values) {
    std::string text = "[";
    for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
    return text + "]";
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
        ASSERT_EQ(out.chunks.size(), 1u) << "step " << step << ": " << batch(out);
        chunk_sizes.push_back(out.chunks[0].num_tokens);
        ASSERT_LE(out.chunks[0].num_tokens, 32)
            << "step " << step << " computes " << batch(out) << " with a token budget of 32: a "
            << "running request computes at most what the budget leaves (the next chunk of its "
            << "prompt)";
        pretend_step(kv, out);
    }
    EXPECT_EQ(chunk_sizes, (std::vector<int64_t>{32, 32, 32, 4}))
        << "a 100-token prompt under a 32-token budget; chunks were " << id_list(chunk_sizes);
    EXPECT_EQ(request->num_generated(), 1);                      // the last chunk ended the prompt
    EXPECT_EQ(scheduler.schedule().chunks.at(0).num_tokens, 1);  // decoding now
    scheduler.finish(*request);
    EXPECT_EQ(pool.allocator().num_free(), 64);
}

// With 7 of its 8 tokens spent on running requests, the budget's last token
// still admits the next waiting request, with a 1-token chunk of its prompt.
TEST(Scheduler, TheBudgetsLastTokenAdmitsAWaitingRequestsFirstChunk) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 8, .max_num_seqs = 16}, 4096);
    std::vector<std::unique_ptr<Request>> requests;
    for (int64_t id = 1; id <= 7; ++id) {
        requests.push_back(make_request(id, 1, 4, 4));
        scheduler.add(*requests.back());
    }
    auto last = make_request(8, 5, 4, 4);
    scheduler.add(*last);
    const SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(out.chunks.size(), 8u)
        << "7 one-token prompts leave 1 token of the budget of 8, and request 8's prompt can "
        << "start with a 1-token chunk; the batch was " << batch(out);
    EXPECT_EQ(out.chunks.back().request->id, 8);
    EXPECT_EQ(out.chunks.back().num_tokens, 1);
}

TEST(Scheduler, WithoutChunkingAPromptWaitsForAWholeStep) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 32, .chunked_prefill = false}, 4096);
    auto first = make_request(1, 20, 4, 4);
    auto second = make_request(2, 20, 4, 4);
    scheduler.add(*first);
    scheduler.add(*second);
    const SchedulerOutput out = scheduler.schedule();  // 20 + 20 > 32: only the first
    ASSERT_EQ(out.chunks.size(), 1u) << batch(out);
    EXPECT_EQ(out.chunks[0].request->id, 1);
    EXPECT_EQ(scheduler.num_waiting(), 1);
}

// Without chunked prefill a prompt goes in whole or waits: one that fits what
// is left of the budget exactly goes in; one a token longer waits.
TEST(Scheduler, WithoutChunkingAPromptThatFitsWhatIsLeftGoesInWholeAndOneMoreWaits) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    const SchedulerConfig config{.max_num_batched_tokens = 32, .chunked_prefill = false};
    {
        Scheduler scheduler(kv, config, 4096);
        auto first = make_request(1, 20, 1, 4), second = make_request(2, 12, 1, 4);
        scheduler.add(*first);
        scheduler.add(*second);
        const SchedulerOutput out = scheduler.schedule();
        EXPECT_EQ(out.chunks.size(), 2u)
            << "20 + 12 tokens fill a budget of 32 exactly: both go in; the batch was "
            << batch(out);
        for (const ScheduledChunk& c : out.chunks) scheduler.finish(*c.request);
    }
    {
        Scheduler scheduler(kv, config, 4096);
        auto first = make_request(3, 20, 1, 4), second = make_request(4, 13, 1, 4);
        scheduler.add(*first);
        scheduler.add(*second);
        const SchedulerOutput out = scheduler.schedule();
        EXPECT_EQ(batch(out), "[request 3: 20 tokens]")
            << "request 4's 13 tokens do not fit the 12 left: without chunked prefill it waits "
            << "for a step it fits whole, it is not cut";
        EXPECT_EQ(scheduler.num_waiting(), 1);
    }
}

// Admission starts a request with kv_.start, which takes its prompt's cached
// full blocks and counts their tokens as computed.
TEST(Scheduler, PrefixCacheHitsCountAsComputedAtAdmission) {
    PagedKvCache pool(one_float_config(), 16, 4);
    KvBlockManager kv(pool, true);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 64}, 4096);
    std::vector<TokenId> prompt;
    for (TokenId t = 100; t < 112; ++t) prompt.push_back(t);  // 3 full blocks
    auto first = request_with(1, prompt, 1, 4);
    scheduler.add(*first);
    pretend_step(kv, scheduler.schedule());
    scheduler.finish(*first);  // its full blocks stay in the prefix cache
    std::vector<TokenId> shared(prompt.begin(), prompt.begin() + 8);
    for (TokenId t = 500; t < 504; ++t) shared.push_back(t);
    auto second = request_with(2, shared, 1, 4);
    scheduler.add(*second);
    const SchedulerOutput out = scheduler.schedule();
    EXPECT_EQ(batch(out), "[request 2: 4 tokens]")
        << "request 2's first 8 prompt tokens are request 1's, cached in 2 full blocks: admission "
        << "starts it with kv_.start, which counts them as computed, so it computes only 4";
}

// A request that cannot be admitted this step goes back to waiting holding
// nothing: what kv_.start gave it (cached blocks) is released again.
TEST(Scheduler, ARequestThatKeepsWaitingHoldsNoBlocks) {
    PagedKvCache pool(one_float_config(), 16, 4);
    KvBlockManager kv(pool, true);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 20, .chunked_prefill = false}, 4096);
    std::vector<TokenId> prompt;
    for (TokenId t = 100; t < 108; ++t) prompt.push_back(t);  // 2 full blocks, cached below
    auto first = request_with(1, prompt, 1, 4);
    scheduler.add(*first);
    pretend_step(kv, scheduler.schedule());
    scheduler.finish(*first);
    auto other = make_request(2, 10, 1, 4);
    std::vector<TokenId> longer = prompt;
    for (TokenId t = 900; t < 912; ++t) longer.push_back(t);  // 8 cached + 12 to compute
    auto waiting = request_with(3, longer, 1, 4);
    scheduler.add(*other);
    scheduler.add(*waiting);
    const SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(batch(out), "[request 2: 10 tokens]")
        << "request 3's 12 uncached tokens do not fit the 10 left: it waits";
    EXPECT_EQ(waiting->kv.table.blocks().size(), 0u)
        << "request 3 waits, yet it holds " << waiting->kv.table.blocks().size()
        << " KV blocks: a request sent back to waiting must release what kv_.start gave it "
        << "(kv_.finish), or those blocks stay taken";
    pretend_step(kv, out);
    scheduler.finish(*other);
    pretend_step(kv, scheduler.schedule());  // request 3's turn
    scheduler.finish(*waiting);
    kv.clear_prefix_cache();
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks()) << "blocks leaked";
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
    ASSERT_EQ(out.chunks.size(), 2u) << "max_num_seqs = 2; the batch was " << batch(out);
    pretend_step(kv, out);
    out = scheduler.schedule();
    EXPECT_EQ(batch(out), "[request 0: 1 token, request 1: 1 token]")
        << "the running two decode; the cap keeps the others waiting";
    scheduler.finish(*requests[0]);  // a request leaves...
    pretend_step(kv, out);
    out = scheduler.schedule();  // ...and a waiting one joins at the next step
    EXPECT_EQ(batch(out), "[request 1: 1 token, request 2: 6 tokens]")
        << "running requests first, then the oldest waiting one takes the freed place";
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
    EXPECT_EQ(batch(out), "[request 4: 20 tokens]");
}

// Without chunked prefill every step must hold a request's whole prompt, and
// after a preemption its whole recomputation (prompt and output so far): a
// request whose longest recomputation exceeds the token budget could never be
// scheduled, so add() refuses it, naming the flags that would let it run.
TEST(Scheduler, WithoutChunkingRefusesARequestLongerThanTheTokenBudget) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 64, .chunked_prefill = false}, 4096);
    auto too_long = make_request(1, 178, 8, 4);
    const std::string error = test::error_of([&] { scheduler.add(*too_long); });
    EXPECT_NE(error.find("request 1"), std::string::npos) << error;
    EXPECT_NE(error.find("--max-num-batched-tokens"), std::string::npos) << error;
    EXPECT_EQ(scheduler.num_waiting(), 0);
    auto fits = make_request(2, 60, 5, 4);  // recomputes at most 64 tokens
    scheduler.add(*fits);
    EXPECT_EQ(scheduler.num_waiting(), 1);
    auto one_over = make_request(3, 60, 6, 4);  // could need 65
    EXPECT_THROW(scheduler.add(*one_over), Error);
    // With chunked prefill the same request is fine: its chunks fit any budget.
    Scheduler chunking(kv, {.max_num_batched_tokens = 64}, 4096);
    auto chunked = make_request(4, 178, 8, 4);
    chunking.add(*chunked);
    EXPECT_EQ(chunking.num_waiting(), 1);
}

// ---- Fair prefill: long_prefill_tokens ---------------------------------------
//
// Running requests are scheduled first, so without a cap a long prompt that
// is being prefilled takes the whole budget step after step, and a short
// request that arrives meanwhile waits for all of it. The tests use a budget
// of 64 and caps small enough to read in the messages; prompt lengths are
// random.

// "request 2: 5 tokens", as batch() writes a chunk.
std::string chunk(int64_t id, int64_t num_tokens) {
    return "request " + std::to_string(id) + ": " + std::to_string(num_tokens) +
           (num_tokens == 1 ? " token" : " tokens");
}

TEST(Scheduler, FairPrefillCapsALongPromptOnlyWhileAnotherRunsOrWaits) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    PagedKvCache pool(one_float_config(), 256, 4);
    KvBlockManager kv(pool, false);
    const int64_t budget = 64, cap = 16;
    Scheduler scheduler(kv, {.max_num_batched_tokens = budget, .long_prefill_tokens = cap}, 4096);
    const int64_t long_tokens = random.integer(4 * budget, 8 * budget);
    auto long_request = make_request(1, long_tokens, 4, 4);
    scheduler.add(*long_request);
    for (int64_t step = random.integer(1, 2); step > 0; --step) {
        const SchedulerOutput out = scheduler.schedule();
        ASSERT_EQ(batch(out), "[" + chunk(1, budget) + "]")
            << "request 1's " << long_tokens << "-token prompt is alone: it takes the whole "
            << "budget of " << budget << ". The long_prefill_tokens cap (" << cap << ") applies "
            << "only while another request runs or waits; alone it would only delay its first "
            << "token";
        pretend_step(kv, out);
    }
    const int64_t short_tokens = random.integer(1, cap);
    auto short_request = make_request(2, short_tokens, 8, 4);
    scheduler.add(*short_request);
    const int64_t long_left = long_request->num_uncomputed();
    SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(batch(out), "[" + chunk(1, cap) + ", " + chunk(2, short_tokens) + "]")
        << "request 2's " << short_tokens << "-token prompt arrived while request 1 still had "
        << long_left << " prompt tokens to compute. While another request runs or waits, a "
        << "prompt's chunk is capped at long_prefill_tokens (" << cap << "), so request 1 "
        << "takes " << cap << " and request 2's whole prompt fits in what the budget leaves";
    pretend_step(kv, out);
    EXPECT_EQ(short_request->num_generated(), 1)
        << "request 2's whole prompt was computed in the step after it arrived: its first token";
    for (int64_t step = random.integer(1, 3); step > 0; --step) {
        out = scheduler.schedule();
        ASSERT_EQ(batch(out), "[" + chunk(1, cap) + ", " + chunk(2, 1) + "]")
            << "request 2 decodes beside request 1's prompt: request 1 still takes at most the "
            << "long_prefill_tokens cap (" << cap << ") a step, and a decode token is never capped";
        pretend_step(kv, out);
    }
    scheduler.finish(*short_request);
    out = scheduler.schedule();
    EXPECT_EQ(batch(out), "[" + chunk(1, budget) + "]")
        << "request 2 has left: request 1 is alone again and takes the whole budget";
    scheduler.finish(*long_request);
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks()) << "blocks leaked";
}

// long_prefill_tokens = 0 turns the cap off (the prompt takes the budget,
// the newcomer waits); 1 is the smallest cap, and decode tokens and draft
// slots (speculative decoding) are not prompt tokens: never capped.
TEST(Scheduler, FairPrefillIsOffAtZeroAndNeverCapsDecodeTokensOrDrafts) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    PagedKvCache pool(one_float_config(), 256, 4);
    KvBlockManager kv(pool, false);
    {
        Scheduler scheduler(kv, {.max_num_batched_tokens = 64, .long_prefill_tokens = 0}, 4096);
        auto long_request = make_request(1, random.integer(129, 256), 4, 4);
        auto short_request = make_request(2, random.integer(1, 16), 4, 4);
        scheduler.add(*long_request);
        pretend_step(kv, scheduler.schedule());
        scheduler.add(*short_request);
        EXPECT_EQ(batch(scheduler.schedule()), "[" + chunk(1, 64) + "]")
            << "long_prefill_tokens = 0 is no cap: the running prompt takes the whole budget of "
            << "64 and request 2 waits";
        scheduler.finish(*long_request);
        scheduler.finish(*short_request);
    }
    {
        Scheduler scheduler(kv, {.max_num_batched_tokens = 64, .long_prefill_tokens = 1}, 4096);
        SamplingParams params;
        params.max_tokens = 8;
        params.num_speculative_tokens = 2;
        const int64_t first_tokens = random.integer(2, 32);
        std::vector<TokenId> prompt;
        for (int64_t i = 0; i < first_tokens; ++i) prompt.push_back(TokenId(3000 + i));
        Request speculating(3, prompt, params, 0, 4);
        scheduler.add(speculating);
        SchedulerOutput out = scheduler.schedule();
        ASSERT_EQ(batch(out), "[" + chunk(3, first_tokens) + "]")
            << "alone, request 3's prompt takes the budget whatever long_prefill_tokens is (1)";
        pretend_step(kv, out);
        auto other = make_request(4, random.integer(2, 32), 4, 4);
        scheduler.add(*other);
        speculating.num_drafts_ready = 2;  // the engine drafted before this step
        out = scheduler.schedule();
        EXPECT_EQ(batch(out), "[" + chunk(3, 3) + ", " + chunk(4, 1) + "]")
            << "long_prefill_tokens = 1: request 4's prompt advances 1 token a step beside "
            << "request 3, whose decode token and 2 draft slots are not a prompt chunk and are "
            << "never capped";
        scheduler.finish(speculating);
        scheduler.finish(*other);
    }
}

TEST(Scheduler, ReservesOneSlotPerDraftThatExistsAndNoneBeyondK) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 64}, 4096);
    SamplingParams params;
    params.max_tokens = 32;
    params.num_speculative_tokens = 4;
    Request speculating(5, {11, 12, 13}, params, 0, 4);
    scheduler.add(speculating);
    pretend_step(kv, scheduler.schedule());  // the prompt, and a first token
    for (const int64_t ready : {0, 1, 3}) {
        speculating.num_drafts_ready = ready;
        const SchedulerOutput out = scheduler.schedule();
        ASSERT_EQ(out.chunks.size(), 1u);
        EXPECT_EQ(out.chunks[0].num_draft_slots, ready)
            << "K = 4 but the drafter proposed " << ready << ": a slot for each draft that "
            << "exists, none for drafts that do not";
        EXPECT_EQ(out.chunks[0].num_tokens, 1 + ready);
        // The engine keeps no draft: the slots past the decode token go back.
        kv.rollback(speculating.kv, int64_t(speculating.tokens.size()));
        pretend_step(kv, out);
        speculating.num_drafts_ready = 0;
    }
    scheduler.finish(speculating);
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks()) << "blocks leaked";
}

// Without chunked prefill, and in a static batch, a prompt is computed
// whole: there is no chunk to cap.
TEST(Scheduler, FairPrefillNeverCutsAPromptThatMustBeComputedWhole) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, false);
    const int64_t cap = 8;
    {
        Scheduler scheduler(
            kv,
            {.max_num_batched_tokens = 64, .chunked_prefill = false, .long_prefill_tokens = cap},
            4096);
        const int64_t long_tokens = random.integer(cap + 1, 64 - cap);
        const int64_t short_tokens = random.integer(1, cap);
        auto first = make_request(1, long_tokens, 1, 4),
             second = make_request(2, short_tokens, 1, 4);
        scheduler.add(*first);
        scheduler.add(*second);
        const SchedulerOutput out = scheduler.schedule();
        EXPECT_EQ(batch(out), "[" + chunk(1, long_tokens) + ", " + chunk(2, short_tokens) + "]")
            << "without chunked prefill a prompt goes in whole or waits: the long_prefill_tokens "
            << "cap (" << cap << ") applies only when prompts are chunked";
        scheduler.finish(*first);
        scheduler.finish(*second);
    }
    {
        Scheduler scheduler(
            kv, {.max_num_batched_tokens = 32, .long_prefill_tokens = cap, .static_batching = true},
            4096);
        const int64_t long_tokens = random.integer(33, 100);
        const int64_t short_tokens = random.integer(1, cap);
        auto first = make_request(3, long_tokens, 1, 4),
             second = make_request(4, short_tokens, 1, 4);
        scheduler.add(*first);
        scheduler.add(*second);
        const SchedulerOutput out = scheduler.schedule();
        EXPECT_EQ(batch(out), "[" + chunk(3, long_tokens) + ", " + chunk(4, short_tokens) + "]")
            << "a static batch computes its prompts whole in its first step: the "
            << "long_prefill_tokens cap (" << cap << ") is for chunked prefill only";
        scheduler.finish(*first);
        scheduler.finish(*second);
    }
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks()) << "blocks leaked";
}

// A preempted request recomputes its prompt and its output so far: that is a
// prefill too, capped while others run. Here the cap is also what lets it
// back in beside the request that preempted it: a 4-token chunk needs one
// free block where its whole recomputation would need four.
TEST(Scheduler, FairPrefillCapsARecomputationAfterPreemption) {
    PagedKvCache pool(one_float_config(), 6, 4);  // 24 slots for two requests of up to 20
    KvBlockManager kv(pool, false);
    const int64_t cap = 4;
    Scheduler scheduler(kv, {.max_num_batched_tokens = 64, .long_prefill_tokens = cap}, 4096);
    auto first = make_request(1, 8, 12, 4), second = make_request(2, 8, 12, 4);
    scheduler.add(*first);
    scheduler.add(*second);
    int64_t capped_recomputations = 0;
    for (int step = 0; step < 60 && first->num_generated() < 12; ++step) {
        const bool recomputing = second->num_preemptions > 0 && second->kv.num_computed_tokens == 0;
        const int64_t uncomputed = second->num_uncomputed();
        const SchedulerOutput out = scheduler.schedule();
        for (const ScheduledChunk& c : out.chunks) {
            ASSERT_LE(c.num_tokens, cap)
                << "step " << step << " computes " << batch(out) << ": with two requests in the "
                << "scheduler no chunk may exceed the long_prefill_tokens cap (" << cap << ")";
            if (c.request == second.get() && recomputing && uncomputed > cap) {
                ++capped_recomputations;
            }
        }
        pretend_step(kv, out);
    }
    ASSERT_EQ(first->num_generated(), 12);
    EXPECT_GT(capped_recomputations, 0)
        << "request 2 was never readmitted while request 1 ran: its recomputation is a prefill "
        << "too, so beside request 1 it restarts with a chunk of long_prefill_tokens (" << cap
        << "), which fits the free blocks";
    scheduler.finish(*first);
    scheduler.finish(*second);
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks()) << "blocks leaked";
}

// Steps `scheduler` until `done()` (at most 60 steps), pretending the model
// ran; returns the ids of the requests preempted, in order.
template <typename Done>
std::vector<int64_t> run_until(Scheduler& scheduler, KvBlockManager& kv, Done done) {
    std::vector<int64_t> preempted;
    for (int step = 0; step < 60 && !done(); ++step) {
        const SchedulerOutput out = scheduler.schedule();
        for (int64_t id : ids(out.preempted)) preempted.push_back(id);
        pretend_step(kv, out);
    }
    return preempted;
}

TEST(Scheduler, PreemptsTheNewestAndTheOldestKeepsGoing) {
    PagedKvCache pool(one_float_config(), 6, 4);  // 24 slots
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 64}, 4096);
    // FCFS ignores priorities: the newer request is the more urgent one here.
    auto old_request = make_request(1, 8, 12, 4, /*priority=*/3);  // up to 20 tokens
    auto new_request = make_request(2, 8, 12, 4, /*priority=*/0);
    scheduler.add(*old_request);
    scheduler.add(*new_request);
    const std::vector<int64_t> preempted =
        run_until(scheduler, kv, [&] { return old_request->num_generated() >= 12; });
    ASSERT_FALSE(preempted.empty()) << "24 slots for two requests of up to 20 tokens: one of "
                                       "them must be preempted";
    for (int64_t id : preempted) {
        EXPECT_EQ(id, 2) << "request " << id
                         << " was preempted; preempted in order: " << id_list(preempted)
                         << ". Under FCFS the newest running request (2) "
                         << "goes, whatever the priorities, so the oldest always makes progress";
    }
    EXPECT_EQ(old_request->num_generated(), 12);
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
    EXPECT_EQ(batch(out), "[request 2: 8 tokens, request 1: 8 tokens]")
        << "the priority policy admits the most urgent (smallest priority) first";
    pretend_step(kv, out);
    const std::vector<int64_t> preempted =
        run_until(scheduler, kv, [&] { return urgent->num_generated() >= 12; });
    for (int64_t id : preempted) {
        EXPECT_EQ(id, 1) << "preempted in order: " << id_list(preempted)
                         << "; the least urgent (request 1, priority 5) goes first";
    }
    EXPECT_EQ(urgent->num_generated(), 12);
    EXPECT_GT(relaxed->num_preemptions, 0);
}

// The least urgent request goes even when it is the oldest: the priority
// policy compares priorities, not ages. One step apart: 1 and 0.
TEST(Scheduler, PriorityPolicyPreemptsTheLeastUrgentEvenWhenItIsTheOldest) {
    PagedKvCache pool(one_float_config(), 6, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.policy = SchedulingPolicy::kPriority}, 4096);
    auto relaxed = make_request(1, 8, 12, 4, /*priority=*/1);
    scheduler.add(*relaxed);
    pretend_step(kv, scheduler.schedule());  // request 1 runs alone first
    auto urgent = make_request(2, 8, 12, 4, /*priority=*/0);
    scheduler.add(*urgent);
    const std::vector<int64_t> preempted =
        run_until(scheduler, kv, [&] { return urgent->num_generated() >= 12; });
    ASSERT_FALSE(preempted.empty());
    EXPECT_EQ(preempted.front(), 1)
        << "request 1 (priority 1, the oldest) and request 2 (priority 0, newer) run; the pool "
        << "is full. The least urgent goes, request 1, not the newest; preempted in order: "
        << id_list(preempted);
}

// Among requests of equal priority the newest goes, as under FCFS.
TEST(Scheduler, PriorityPolicyPreemptsTheNewestAmongEquals) {
    PagedKvCache pool(one_float_config(), 8, 4);  // 32 slots for 3 x up to 16
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.policy = SchedulingPolicy::kPriority}, 4096);
    std::vector<std::unique_ptr<Request>> requests;
    for (int64_t id = 1; id <= 3; ++id) {
        requests.push_back(make_request(id, 4, 12, 4, /*priority=*/2));
        scheduler.add(*requests.back());
    }
    const std::vector<int64_t> preempted =
        run_until(scheduler, kv, [&] { return requests[0]->num_generated() >= 12; });
    ASSERT_FALSE(preempted.empty());
    EXPECT_EQ(preempted.front(), 3)
        << "three requests of priority 2; the first preempted must be the newest (3); "
        << "preempted in order: " << id_list(preempted);
}

// A preempted request goes back to the front of the waiting queue: it is
// admitted again before requests that arrived after it (it is older).
TEST(Scheduler, APreemptedRequestIsReadmittedBeforeLaterArrivals) {
    PagedKvCache pool(one_float_config(), 6, 4);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, {.max_num_batched_tokens = 64, .max_num_seqs = 2}, 4096);
    auto first = make_request(1, 8, 12, 4), second = make_request(2, 8, 12, 4);
    auto later = make_request(3, 4, 2, 4);
    scheduler.add(*first);
    scheduler.add(*second);
    scheduler.add(*later);  // waits: max_num_seqs = 2
    bool preempted = false;
    for (int step = 0; step < 80; ++step) {
        if (first->num_generated() == 12 && first->status == RequestStatus::kRunning) {
            scheduler.finish(*first);  // its blocks free up for the waiting ones
        }
        const SchedulerOutput out = scheduler.schedule();
        for (const ScheduledChunk& c : out.chunks) {
            const bool admitted = c.request->kv.num_computed_tokens == 0;
            if (preempted && admitted && c.request->id != 1) {
                ASSERT_EQ(c.request->id, 2)
                    << "after request 2 was preempted, request " << c.request->id
                    << " was admitted first: a preempted request goes back to the FRONT of the "
                    << "waiting queue, ahead of request 3, which arrived after it";
                return;
            }
        }
        preempted = preempted || !out.preempted.empty();
        pretend_step(kv, out);
    }
    FAIL() << "request 2 was never preempted and admitted again";
}

// ---- Continuous batching equals solo runs ------------------------------------

TEST(ContinuousBatching, SixtyFourRequestsEqualTheirSoloRunsDespitePreemption) {
    run_sixty_four_requests(SchedulingPolicy::kFcfs);
}

TEST(ContinuousBatching, SixtyFourPrioritizedRequestsEqualTheirSoloRunsDespitePreemption) {
    run_sixty_four_requests(SchedulingPolicy::kPriority);
}

}  // namespace
}  // namespace servelab
