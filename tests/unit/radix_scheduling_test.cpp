// radix_scheduling_test.cpp — Lab 11: the scheduler on the radix cache. The equivalence test of
// Lab 5 (64 requests under preemption, each equal to its solo run) on your cache, FCFS and
// longest-prefix-match; and longest-prefix-match admission itself: the most cached prompt first,
// queue order among equals, and the starvation bound.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reference/scheduler/scheduler.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/scheduler_test_util.h"

namespace servelab {
namespace {

using test::batch;
using test::make_request;
using test::one_float_config;
using test::pretend_step;
using test::request_with;
using test::run_sixty_four_requests;

// Lab 11: the same with the radix cache, and with cache-aware admission.
TEST(ContinuousBatching, SixtyFourRequestsOnTheRadixCacheEqualTheirSoloRuns) {
    run_sixty_four_requests(SchedulingPolicy::kFcfs, PrefixCacheKind::kRadix);
}

TEST(ContinuousBatching, SixtyFourRequestsUnderLongestPrefixMatchEqualTheirSoloRuns) {
    run_sixty_four_requests(SchedulingPolicy::kLpm, PrefixCacheKind::kRadix);
}

// Computes `request`'s prompt and finishes it, leaving its full blocks cached.
void cache_prompt(Scheduler& scheduler, KvBlockManager& kv, Request& request) {
    scheduler.add(request);
    pretend_step(kv, scheduler.schedule());
    scheduler.finish(request);
}

std::vector<TokenId> prompt_from(std::vector<TokenId> prefix, TokenId first, int64_t extra) {
    for (int64_t i = 0; i < extra; ++i) prefix.push_back(first + TokenId(i));
    return prefix;
}

TEST(LongestPrefixMatch, AdmitsTheRequestWhosePromptIsMostCachedFirst) {
    for (const PrefixCacheKind kind : {PrefixCacheKind::kHash, PrefixCacheKind::kRadix}) {
        SCOPED_TRACE(prefix_cache_kind_name(kind));
        PagedKvCache pool(one_float_config(), 64, 4);
        KvBlockManager kv(pool, kind);
        Scheduler scheduler(
            kv, {.max_num_batched_tokens = 64, .max_num_seqs = 1, .policy = SchedulingPolicy::kLpm},
            4096);
        const std::vector<TokenId> shared = prompt_from({}, 100, 12);  // 3 blocks
        auto warm = request_with(1, shared, 1, 4);
        cache_prompt(scheduler, kv, *warm);
        auto cold = make_request(2, 14, 1, 4);
        auto some = request_with(3, prompt_from({100, 101, 102, 103}, 900, 10), 1, 4);
        auto most = request_with(4, prompt_from(shared, 700, 2), 1, 4);
        scheduler.add(*cold);
        scheduler.add(*some);
        scheduler.add(*most);
        const SchedulerOutput out = scheduler.schedule();
        EXPECT_EQ(batch(out), "[request 4: 2 tokens]")
            << "request 4 has 12 prompt tokens cached, request 3 has 4, request 2 none: the "
               "longest prefix match goes first (one slot: max_num_seqs = 1)";
        EXPECT_EQ(cold->num_overtaken, 1);
        EXPECT_EQ(some->num_overtaken, 1);
    }
}

TEST(LongestPrefixMatch, AmongEqualMatchesTheQueueOrderDecides) {
    PagedKvCache pool(one_float_config(), 64, 4);
    KvBlockManager kv(pool, PrefixCacheKind::kRadix);
    Scheduler scheduler(
        kv, {.max_num_batched_tokens = 64, .max_num_seqs = 1, .policy = SchedulingPolicy::kLpm},
        4096);
    auto a = make_request(1, 9, 1, 4);
    auto b = make_request(2, 9, 1, 4);
    scheduler.add(*a);
    scheduler.add(*b);
    EXPECT_EQ(batch(scheduler.schedule()), "[request 1: 9 tokens]")
        << "nothing cached for either: first come, first served";
}

// The starvation bound: a stream of requests sharing a hot cached prefix
// keeps arriving; an unrelated request queued first must still run after at
// most lpm_max_overtakes of them.
TEST(LongestPrefixMatch, NoRequestIsOvertakenMoreThanTheBound) {
    for (const int64_t bound : {0, 1, 3, 8}) {
        SCOPED_TRACE("lpm_max_overtakes = " + std::to_string(bound));
        PagedKvCache pool(one_float_config(), 256, 4);
        KvBlockManager kv(pool, PrefixCacheKind::kRadix);
        Scheduler scheduler(kv,
                            {.max_num_batched_tokens = 64,
                             .max_num_seqs = 1,
                             .policy = SchedulingPolicy::kLpm,
                             .lpm_max_overtakes = bound},
                            4096);
        const std::vector<TokenId> hot = prompt_from({}, 100, 16);
        auto warm = request_with(0, hot, 1, 4);
        cache_prompt(scheduler, kv, *warm);
        auto lonely = make_request(1, 10, 1, 4);
        scheduler.add(*lonely);
        std::vector<std::unique_ptr<Request>> stream;
        int64_t admitted_before_lonely = 0;
        for (int64_t step = 0; step < 40 && lonely->status == RequestStatus::kWaiting; ++step) {
            // Two newcomers per step, each sharing the hot prefix.
            for (int k = 0; k < 2; ++k) {
                stream.push_back(
                    request_with(100 + int64_t(stream.size()),
                                 prompt_from(hot, TokenId(5000 + 10 * stream.size()), 3), 1, 4));
                scheduler.add(*stream.back());
            }
            const SchedulerOutput out = scheduler.schedule();
            ASSERT_EQ(out.chunks.size(), 1u);
            Request& ran = *out.chunks[0].request;
            pretend_step(kv, out);
            scheduler.finish(ran);
            if (&ran != lonely.get()) ++admitted_before_lonely;
        }
        EXPECT_EQ(lonely->status, RequestStatus::kFinished)
            << "the request with nothing cached never ran: longest-prefix-match without a "
               "starvation bound lets a hot prefix overtake it forever";
        EXPECT_LE(admitted_before_lonely, bound);
        EXPECT_LE(lonely->num_overtaken, bound);
        for (const auto& r : stream) EXPECT_LE(r->num_overtaken, bound) << "request " << r->id;
    }
}

}  // namespace
}  // namespace servelab
