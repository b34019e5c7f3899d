// hidden_lab05_scheduler_test.cpp — Lab 5's hidden tests: the iteration-level scheduler.
//
// Lab 5 (chapter 11.5, continuous batching). The instructor's hidden tests,
// left out of the student release (never quote them in a handout): the same
// contracts as tests/unit/scheduler_test.cpp — running requests first in
// admission order, the token budget, chunked prefill and whole prompts
// without it, fair prefill's cap, max_num_seqs, admission by free blocks,
// preemption of the newest (or least urgent, then newest) to the front of the
// waiting queue, prefix-cache hits — re-checked on random budgets, caps,
// block sizes, pools and staggered arrivals, at every step, against the
// test's own account of the rules (a plain walk over its own copy of the
// queues).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../unit/test_util.h"
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

int64_t blocks_for(int64_t tokens, int64_t block_size) {
    return (tokens + block_size - 1) / block_size;
}

std::string describe(const SchedulerConfig& c, int64_t block_size, int64_t num_blocks) {
    return "budget " + std::to_string(c.max_num_batched_tokens) + ", max_num_seqs " +
           std::to_string(c.max_num_seqs) + ", long_prefill_tokens " +
           std::to_string(c.long_prefill_tokens) +
           (c.chunked_prefill ? ", chunked prefill" : ", no chunked prefill") +
           (c.policy == SchedulingPolicy::kFcfs ? ", FCFS" : ", priority") + ", " +
           std::to_string(num_blocks) + " blocks of " + std::to_string(block_size);
}

std::string id_list(const std::vector<Request*>& requests) {
    std::string text = "[";
    for (const Request* r : requests) {
        text += (text.size() > 1 ? ", " : "") + std::to_string(r->id);
    }
    return text + "]";
}

// The test's own copy of the scheduler's queues and of the pool's free
// blocks (no prefix cache, so every block a request holds is its own).
struct Queues {
    std::vector<Request*> running;  // admission order
    std::deque<Request*> waiting;   // queue order: preempted ones at the front
};

// The step the handout's rules give: running requests first, oldest first,
// each its chunk (preempting the victim policy's choice while its blocks do
// not fit), then — if nobody was preempted — waiting requests in policy
// order while the budget, max_num_seqs and the free blocks allow.
struct Expected {
    std::vector<ScheduledChunk> chunks;
    std::vector<Request*> preempted;
};

class Rules {
  public:
    Rules(const SchedulerConfig& config, int64_t block_size)
        : config_(config), block_size_(block_size) {}

    Expected step(Queues& q, int64_t free_blocks) const {
        Expected e;
        std::map<Request*, int64_t> held;  // blocks after this step's reservations
        for (Request* r : q.running) held[r] = int64_t(r->kv.table.blocks().size());
        int64_t left = config_.max_num_batched_tokens;
        const bool others = q.running.size() + q.waiting.size() > 1;
        const std::vector<Request*> running = q.running;
        for (Request* r : running) {
            if (left == 0) break;
            if (std::find(q.running.begin(), q.running.end(), r) == q.running.end()) continue;
            const int64_t n = chunk(r->num_uncomputed(), left, others);
            const int64_t need = blocks_for(r->kv.table.num_tokens() + n, block_size_) - held[r];
            bool evicted_itself = false;
            while (need > free_blocks && !evicted_itself) {
                Request* victim = pick_victim(q.running);
                evicted_itself = victim == r;
                free_blocks += std::exchange(held[victim], 0);
                std::erase(q.running, victim);
                for (auto it = e.chunks.begin(); it != e.chunks.end(); ++it) {
                    if (it->request == victim) {
                        left += it->num_tokens;
                        e.chunks.erase(it);
                        break;
                    }
                }
                q.waiting.push_front(victim);
                e.preempted.push_back(victim);
            }
            if (evicted_itself) continue;
            free_blocks -= need;
            held[r] += need;
            e.chunks.push_back({r, n});
            left -= n;
        }
        if (e.preempted.empty()) admit(q, left, free_blocks, others, e);
        return e;
    }

  private:
    int64_t chunk(int64_t uncomputed, int64_t left, bool others) const {
        int64_t n = std::min(uncomputed, left);
        if (config_.long_prefill_tokens > 0 && config_.chunked_prefill && others) {
            n = std::min(n, config_.long_prefill_tokens);
        }
        return n;
    }

    Request* pick_victim(const std::vector<Request*>& running) const {
        Request* victim = running.back();
        if (config_.policy == SchedulingPolicy::kFcfs) return victim;
        // The least urgent (largest value); `>=` in arrival order keeps the newest of equals.
        for (Request* candidate : running) {
            if (candidate->priority >= victim->priority) victim = candidate;
        }
        return victim;
    }

    void admit(Queues& q, int64_t left, int64_t free_blocks, bool others, Expected& e) const {
        while (left > 0 && !q.waiting.empty() && int64_t(q.running.size()) < config_.max_num_seqs) {
            auto next = q.waiting.begin();
            if (config_.policy == SchedulingPolicy::kPriority) {
                next = std::min_element(
                    q.waiting.begin(), q.waiting.end(),
                    [](Request* a, Request* b) { return a->priority < b->priority; });
            }
            Request* r = *next;
            const int64_t uncomputed = int64_t(r->tokens.size());  // no prefix cache
            if (!config_.chunked_prefill && uncomputed > left) return;
            const int64_t n = chunk(uncomputed, left, others);
            if (blocks_for(n, block_size_) > free_blocks) return;
            free_blocks -= blocks_for(n, block_size_);
            q.waiting.erase(next);
            q.running.push_back(r);
            e.chunks.push_back({r, n});
            left -= n;
        }
    }

    SchedulerConfig config_;
    int64_t block_size_;
};

std::string expected_batch(const Expected& e) {
    SchedulerOutput out;
    out.chunks = e.chunks;
    return batch(out);
}

// The rules a step breaks, named, before the exact comparison.
void check_step_rules(const SchedulerOutput& out, const Queues& before, const SchedulerConfig& c,
                      int64_t step) {
    int64_t total = 0;
    for (const ScheduledChunk& chunk : out.chunks) total += chunk.num_tokens;
    ASSERT_LE(total, c.max_num_batched_tokens)
        << "step " << step << " computes " << batch(out) << ": more than the token budget";
    ASSERT_EQ(out.num_batched_tokens, total) << "step " << step;
    for (const Request* victim : out.preempted) {
        ASSERT_EQ(victim->kv.table.blocks().size(), 0u)
            << "step " << step << ": request " << victim->id << " was preempted but still "
            << "holds blocks: preempting frees the victim's blocks";
        ASSERT_EQ(victim->status, RequestStatus::kWaiting)
            << "step " << step << ": a preempted request waits again (status kWaiting)";
        for (const ScheduledChunk& chunk : out.chunks) {
            ASSERT_NE(chunk.request, victim)
                << "step " << step << ": request " << victim->id << " was preempted yet is "
                << "still in the batch " << batch(out) << ": a victim leaves the batch";
        }
    }
    for (const ScheduledChunk& chunk : out.chunks) {
        ASSERT_EQ(chunk.request->status, RequestStatus::kRunning)
            << "step " << step << ": request " << chunk.request->id << " is in the batch but "
            << "is not running: an admitted request's status is kRunning";
        const bool was_running = std::find(before.running.begin(), before.running.end(),
                                           chunk.request) != before.running.end();
        ASSERT_TRUE(was_running || out.preempted.empty())
            << "step " << step << " preempted " << id_list(out.preempted) << " and admitted "
            << "request " << chunk.request->id << ": a step that had to preempt admits nobody";
    }
}

// Pretends the step ran, finishes the requests that have all their tokens,
// and checks that every block is held by a running request or free.
void finish_step(Scheduler& scheduler, KvBlockManager& kv, const SchedulerOutput& out, Queues& q,
                 int64_t& finished, int64_t step) {
    pretend_step(kv, out);
    for (Request* r : std::vector<Request*>(q.running)) {
        if (r->num_generated() < r->params.max_tokens) continue;
        scheduler.finish(*r);
        std::erase(q.running, r);
        ++finished;
    }
    int64_t held = 0;
    for (const Request* r : q.running) held += int64_t(r->kv.table.blocks().size());
    for (const Request* r : q.waiting) {
        ASSERT_EQ(r->kv.table.blocks().size(), 0u)
            << "after step " << step << " waiting request " << r->id << " holds blocks: a "
            << "request that is not admitted (or is preempted) must hold none";
    }
    ASSERT_EQ(held + kv.cache().allocator().num_free(), kv.cache().num_blocks())
        << "after step " << step << " the running requests hold " << held << " blocks and "
        << kv.cache().allocator().num_free() << " are free, of " << kv.cache().num_blocks()
        << ": blocks leaked";
}

struct Shape {
    SchedulerConfig config;
    int64_t block_size = 4;
    int64_t num_blocks = 4096;
    int64_t num_requests = 12;
};

// Random requests whose longest lengths fit the pool (and, without chunked
// prefill, whose longest recomputation fits the budget, as add() demands).
std::vector<std::unique_ptr<Request>> draw_requests(RandomSource& random, const Shape& s) {
    std::vector<std::unique_ptr<Request>> requests;
    const int64_t budget = s.config.max_num_batched_tokens;
    const int64_t pool_tokens = s.num_blocks * s.block_size;
    for (int64_t id = 1; id <= s.num_requests; ++id) {
        const int64_t max_tokens = std::min({random.integer(1, 5), pool_tokens - 1,
                                             s.config.chunked_prefill ? pool_tokens : budget});
        // Chunked: up to three steps' worth of prompt; whole: prompt + output - 1 <= budget.
        const int64_t longest_prompt =
            s.config.chunked_prefill ? std::min(3 * budget, pool_tokens - max_tokens)
                                     : std::min(budget - max_tokens + 1, pool_tokens - max_tokens);
        const int64_t prompt = random.integer(1, std::max<int64_t>(1, longest_prompt));
        const int32_t priority =
            s.config.policy == SchedulingPolicy::kPriority ? int32_t(random.integer(0, 3)) : 0;
        requests.push_back(make_request(id, prompt, int32_t(max_tokens), s.block_size, priority));
    }
    return requests;
}

// Runs a whole scenario, comparing every step with the rules. Returns the
// number of preemptions it saw.
int64_t run_scenario(RandomSource& random, const Shape& s) {
    SCOPED_TRACE(describe(s.config, s.block_size, s.num_blocks));
    PagedKvCache pool(one_float_config(), s.num_blocks, s.block_size);
    KvBlockManager kv(pool, false);
    Scheduler scheduler(kv, s.config, 1 << 20);
    const Rules rules(s.config, s.block_size);
    auto requests = draw_requests(random, s);
    Queues q;
    size_t arrived = 0;
    int64_t finished = 0, preemptions = 0;
    std::map<int64_t, int64_t> times_preempted;  // by request id
    for (int64_t step = 1; finished < int64_t(requests.size()); ++step) {
        if (step > 5000) {
            ADD_FAILURE() << "no progress after 5000 steps";
            return preemptions;
        }
        for (int64_t n = random.integer(0, 2);
             (n > 0 || q.running.size() + q.waiting.size() == 0) && arrived < requests.size();
             --n) {
            scheduler.add(*requests[arrived]);
            q.waiting.push_back(requests[arrived++].get());
        }
        const Queues before = q;
        const Expected want = rules.step(q, kv.cache().allocator().num_free());
        const SchedulerOutput out = scheduler.schedule();
        check_step_rules(out, before, s.config, step);
        if (testing::Test::HasFatalFailure()) return preemptions;
        EXPECT_EQ(id_list(out.preempted), id_list(want.preempted))
            << "step " << step << " (running " << id_list(before.running) << " in admission "
            << "order): the victim is the newest running request under FCFS, the least urgent "
            << "(largest priority value), newest among equals, under the priority policy; "
            << "preempt only while a running request's blocks do not fit";
        EXPECT_EQ(batch(out), expected_batch(want))
            << "step " << step << " (running " << id_list(before.running) << ", waiting "
            << id_list(std::vector<Request*>(before.waiting.begin(), before.waiting.end()))
            << "): running requests "
            << "go first in admission order, each chunk is min(uncomputed, budget left) and at "
            << "most long_prefill_tokens while another request runs or waits; then waiting ones "
            << "(preempted ones at the front) while the budget, max_num_seqs and free blocks "
            << "allow, a whole prompt without chunked prefill";
        if (testing::Test::HasFailure()) return preemptions;
        for (const Request* victim : out.preempted) {
            EXPECT_EQ(victim->num_preemptions, ++times_preempted[victim->id])
                << "step " << step << ": request " << victim->id << " has been preempted "
                << times_preempted[victim->id] << " times: preempt counts each one "
                << "(Request::num_preemptions, the serving metrics' preemption count)";
        }
        preemptions += int64_t(out.preempted.size());
        finish_step(scheduler, kv, out, q, finished, step);
        if (testing::Test::HasFailure()) return preemptions;
    }
    EXPECT_EQ(pool.allocator().num_free(), pool.num_blocks()) << "blocks leaked at the end";
    return preemptions;
}

SchedulerConfig draw_config(RandomSource& random, SchedulingPolicy policy) {
    SchedulerConfig c;
    c.max_num_batched_tokens = random.integer(3, 37);
    c.max_num_seqs = random.integer(1, 6);
    c.policy = policy;
    c.chunked_prefill = random.integer(0, 3) != 0;
    const int64_t cap_kind = random.integer(0, 3);
    c.long_prefill_tokens = cap_kind == 0   ? 0
                            : cap_kind == 1 ? 1
                                            : random.integer(2, c.max_num_batched_tokens + 2);
    return c;
}

// A pool big enough for everyone: nobody is preempted, and every step's
// batch is exactly what the rules give (budget, cap, max_num_seqs, whole
// prompts without chunked prefill), on 60 random shapes with staggered
// arrivals, so some long prompts run alone and some beside one or two others.
TEST(HiddenLab05Scheduler, EveryStepIsTheRulesBatchWhenThePoolIsLarge) {
    RandomSource random(501);
    SCOPED_TRACE(random.trace());
    for (int scenario = 0; scenario < 60 && !HasFailure(); ++scenario) {
        const SchedulingPolicy policy =
            scenario % 2 ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
        Shape s{.config = draw_config(random, policy),
                .block_size = random.integer(1, 7),
                .num_blocks = 4096,
                .num_requests = random.integer(2, 9)};
        EXPECT_EQ(run_scenario(random, s), 0) << "a pool that holds everyone preempted someone";
    }
}

// A pool too small for everyone: preemption at every turn, several victims
// in one step, victims readmitted from the front of the queue, admission
// stopped by free blocks. Every step is still exactly the rules' step.
TEST(HiddenLab05Scheduler, EveryStepIsTheRulesBatchUnderPreemption) {
    RandomSource random(502);
    SCOPED_TRACE(random.trace());
    int64_t preemptions = 0;
    for (int scenario = 0; scenario < 60 && !HasFailure(); ++scenario) {
        const SchedulingPolicy policy =
            scenario % 2 ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
        Shape s{.config = draw_config(random, policy),
                .block_size = random.integer(1, 5),
                .num_requests = random.integer(4, 10)};
        s.config.chunked_prefill = true;  // longer prompts than one step: more pressure
        s.config.max_num_seqs = random.integer(3, 8);
        s.num_blocks = blocks_for(s.config.max_num_batched_tokens * 3 / 2, s.block_size) + 1;
        preemptions += run_scenario(random, s);
    }
    EXPECT_GT(preemptions, 0) << "the scenarios never preempted: the test proves nothing";
}

// Without chunked prefill a prompt goes in whole or waits: with r requests
// decoding, a prompt of exactly budget - r tokens goes in; one a token longer
// waits (and so does everyone queued behind it under FCFS).
TEST(HiddenLab05Scheduler, WithoutChunkingAnExactFitGoesInAndOneMoreWaits) {
    RandomSource random(503);
    SCOPED_TRACE(random.trace());
    for (int64_t extra = 0; extra <= 1; ++extra) {
        const int64_t budget = random.integer(9, 41), num_decoding = random.integer(1, 4);
        PagedKvCache pool(one_float_config(), 512, random.integer(1, 6));
        KvBlockManager kv(pool, false);
        Scheduler scheduler(kv, {.max_num_batched_tokens = budget, .chunked_prefill = false},
                            1 << 20);
        std::vector<std::unique_ptr<Request>> decoding;
        for (int64_t id = 1; id <= num_decoding; ++id) {
            decoding.push_back(make_request(id, random.integer(1, 2), 8, pool.block_size()));
            scheduler.add(*decoding.back());
        }
        pretend_step(kv, scheduler.schedule());  // their prompts: now they decode
        const int64_t prompt = budget - num_decoding + extra;
        auto next = make_request(10, prompt, 1, pool.block_size());
        auto behind = make_request(11, 1, 1, pool.block_size());
        scheduler.add(*next);
        scheduler.add(*behind);
        const SchedulerOutput out = scheduler.schedule();
        std::string want = "[";
        for (int64_t id = 1; id <= num_decoding; ++id) {
            want +=
                (id > 1 ? ", " : "") + std::string("request ") + std::to_string(id) + ": 1 token";
        }
        want += extra == 0 ? ", request 10: " + std::to_string(prompt) + " tokens]" : "]";
        EXPECT_EQ(batch(out), want)
            << num_decoding << " requests decode under a budget of " << budget << "; request "
            << "10's prompt has " << prompt << " tokens: without chunked prefill a prompt that "
            << "fits what is left exactly goes in whole, one a token longer waits (and request "
            << "11 waits behind it), and a prompt is never cut";
    }
}

// Without chunked prefill a prompt whose uncached part does not fit what is
// left of the budget waits, and releases the cached blocks kv_.start gave it.
TEST(HiddenLab05Scheduler, WithoutChunkingAPromptWaitingForTheBudgetHoldsNoBlocks) {
    RandomSource random(506);
    SCOPED_TRACE(random.trace());
    const int64_t block_size = random.integer(2, 6);
    const int64_t budget = random.integer(4 * block_size, 8 * block_size);
    PagedKvCache pool(one_float_config(), 64, block_size);
    KvBlockManager kv(pool, true);
    Scheduler scheduler(kv, {.max_num_batched_tokens = budget, .chunked_prefill = false}, 1 << 20);
    std::vector<TokenId> prompt;
    for (int64_t i = 0; i < 2 * block_size; ++i) prompt.push_back(TokenId(100 + i));
    auto cached = request_with(1, prompt, 1, block_size);
    scheduler.add(*cached);
    pretend_step(kv, scheduler.schedule());
    scheduler.finish(*cached);  // its 2 full blocks stay cached
    const int64_t left = random.integer(1, block_size);
    auto first = make_request(2, budget - left, 1, block_size);  // leaves `left` tokens
    std::vector<TokenId> longer = prompt;
    const int64_t fresh = random.integer(left + 1, budget - 2 * block_size);
    for (int64_t i = 0; i < fresh; ++i) longer.push_back(TokenId(900 + i));
    auto waiting = request_with(3, longer, 1, block_size);
    scheduler.add(*first);
    scheduler.add(*waiting);
    const SchedulerOutput out = scheduler.schedule();
    EXPECT_EQ(batch(out), "[request 2: " + std::to_string(budget - left) + " tokens]")
        << "request 3's " << fresh << " uncached tokens do not fit the " << left << " left of "
        << "the budget: without chunked prefill it waits";
    EXPECT_EQ(waiting->kv.table.blocks().size(), 0u)
        << "request 3 waits for the budget, yet it holds " << waiting->kv.table.blocks().size()
        << " blocks: a request that is not admitted releases what kv_.start gave it";
    pretend_step(kv, out);
    scheduler.finish(*first);
    EXPECT_EQ(batch(scheduler.schedule()), "[request 3: " + std::to_string(fresh) + " tokens]")
        << "the next step admits request 3 whole, its 2 cached blocks counted as computed";
}

// Admission starts a request with kv_.start: the prompt's cached full blocks
// count as computed, for any block size and any shared length, and a
// preempted request readmitted later computes only what the cache lost.
TEST(HiddenLab05Scheduler, PrefixCacheHitsAreNotComputedAgain) {
    RandomSource random(504);
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 6; ++trial) {
        const int64_t block_size = random.integer(2, 7);
        PagedKvCache pool(one_float_config(), 256, block_size);
        KvBlockManager kv(pool, true);
        Scheduler scheduler(kv, {.max_num_batched_tokens = 512}, 1 << 20);
        const int64_t full_blocks = random.integer(1, 5);
        std::vector<TokenId> prompt;
        for (int64_t i = 0; i < full_blocks * block_size + random.integer(0, block_size - 1); ++i) {
            prompt.push_back(TokenId(random.integer(1, 30000)));
        }
        auto first = request_with(1, prompt, 1, block_size);
        scheduler.add(*first);
        pretend_step(kv, scheduler.schedule());
        scheduler.finish(*first);
        const int64_t shared_blocks = random.integer(1, full_blocks);
        std::vector<TokenId> second_prompt(prompt.begin(),
                                           prompt.begin() + shared_blocks * block_size);
        const int64_t fresh = random.integer(1, 2 * block_size);
        for (int64_t i = 0; i < fresh; ++i) second_prompt.push_back(TokenId(40000 + i));
        auto second = request_with(2, second_prompt, 1, block_size);
        scheduler.add(*second);
        const SchedulerOutput out = scheduler.schedule();
        EXPECT_EQ(batch(out),
                  "[request 2: " + std::to_string(fresh) + (fresh == 1 ? " token]" : " tokens]"))
            << "request 2's first " << shared_blocks * block_size << " prompt tokens are "
            << "request 1's, cached in " << shared_blocks << " full blocks of " << block_size
            << ": admission starts it with kv_.start, which counts them as computed, so it "
            << "computes only the " << fresh << " after them";
        scheduler.finish(*second);
    }
}

// A request that cannot be admitted for want of blocks goes back to waiting
// holding nothing (what kv_.start gave it from the prefix cache is released),
// keeps waiting while the pool is short, and is admitted with its cache hits
// once blocks are freed — with and without chunked prefill.
TEST(HiddenLab05Scheduler, ARequestWithoutRoomWaitsHoldingNoBlocks) {
    RandomSource random(505);
    SCOPED_TRACE(random.trace());
    for (int chunked = 0; chunked <= 1; ++chunked) {
        const int64_t block_size = random.integer(2, 6);
        const int64_t num_blocks = random.integer(8, 14);
        PagedKvCache pool(one_float_config(), num_blocks, block_size);
        KvBlockManager kv(pool, true);
        Scheduler scheduler(kv, {.max_num_batched_tokens = 4096, .chunked_prefill = bool(chunked)},
                            1 << 20);
        std::vector<TokenId> prompt;
        for (int64_t i = 0; i < 2 * block_size; ++i) prompt.push_back(TokenId(100 + i));
        auto cached = request_with(1, prompt, 1, block_size);
        scheduler.add(*cached);
        pretend_step(kv, scheduler.schedule());
        scheduler.finish(*cached);  // 2 full blocks stay cached
        // A running request that takes all but 3 blocks: 2 cached ones stay
        // evictable for it, so it holds num_blocks - 3 of its own.
        auto big = make_request(2, (num_blocks - 3) * block_size, 1, block_size);
        scheduler.add(*big);
        pretend_step(kv, scheduler.schedule());
        std::vector<TokenId> longer = prompt;
        for (int64_t i = 0; i < 3 * block_size; ++i) longer.push_back(TokenId(900 + i));
        auto waiting = request_with(3, longer, 1, block_size);  // 2 cached + 3 blocks to fill
        scheduler.add(*waiting);
        const SchedulerOutput out = scheduler.schedule();
        EXPECT_EQ(batch(out), "[request 2: 1 token]")
            << "request 3 needs 3 new blocks beside its 2 cached ones and only 1 is free: it "
            << "waits" << (chunked ? "" : " (a whole prompt or nothing)");
        EXPECT_EQ(waiting->kv.table.blocks().size(), 0u)
            << "request 3 waits, yet it holds " << waiting->kv.table.blocks().size()
            << " blocks: a request that cannot be admitted releases what kv_.start gave it";
        EXPECT_EQ(scheduler.num_waiting(), 1);
        pretend_step(kv, out);
        scheduler.finish(*big);
        const SchedulerOutput later = scheduler.schedule();
        EXPECT_EQ(batch(later), "[request 3: " + std::to_string(3 * block_size) + " tokens]")
            << "once blocks are freed request 3 is admitted, its 2 cached blocks counted";
        pretend_step(kv, later);
        scheduler.finish(*waiting);
        kv.clear_prefix_cache();
        EXPECT_EQ(pool.allocator().num_free(), num_blocks) << "blocks leaked";
    }
}

}  // namespace
}  // namespace servelab
