// kv_memory_sim_test.cpp — Lab 4: the memory-waste experiment and its traces.
//
// A hand-computed two-request case for each policy, the paper's result on the
// committed ShareGPT-like trace (static-max wastes most of its reservation,
// paging under 4%), the paged bound (under one block per sequence),
// preemption, and the trace loader's errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "kernels/common/error.h"
#include "reference/experiments/kv_memory_sim.h"
#include "reference/experiments/trace.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

std::vector<TraceRequest> two_requests() {
    return {{.id = 0, .prompt_tokens = 3, .output_tokens = 2},
            {.id = 1, .prompt_tokens = 3, .output_tokens = 2}};
}

TEST(KvMemorySim, StaticMaxReservesTheMaximumForEveryRequest) {
    const MemorySimOptions options{.capacity_tokens = 64, .block_size = 4, .max_seq_len = 32};
    const MemorySimResult r =
        simulate_kv_memory(two_requests(), ReservationPolicy::kStaticMax, options);
    // Step 1: both admitted (2 × 32 slots), 4 tokens each; step 2: 5 each, done.
    EXPECT_EQ(r.steps, 2);
    EXPECT_DOUBLE_EQ(r.mean_running, 2.0);
    EXPECT_DOUBLE_EQ(r.mean_used_tokens, 9.0);
    EXPECT_DOUBLE_EQ(r.mean_reserved_tokens, 64.0);
    EXPECT_DOUBLE_EQ(r.waste_fraction, 1.0 - 18.0 / 128.0);
    EXPECT_DOUBLE_EQ(r.waste_future_fraction, 2.0 / 128.0);
    EXPECT_DOUBLE_EQ(r.waste_never_fraction, 108.0 / 128.0);
}

TEST(KvMemorySim, PagedAllocatesABlockOnlyWhenTheLastIsFull) {
    const MemorySimOptions options{.capacity_tokens = 64, .block_size = 4, .max_seq_len = 32};
    const MemorySimResult r =
        simulate_kv_memory(two_requests(), ReservationPolicy::kPaged, options);
    // Step 1: 4 tokens in one block each; step 2: 5 tokens, a second block each.
    EXPECT_EQ(r.steps, 2);
    EXPECT_DOUBLE_EQ(r.mean_reserved_tokens, 12.0);
    EXPECT_DOUBLE_EQ(r.waste_fraction, 0.25);
    EXPECT_DOUBLE_EQ(r.waste_never_fraction, 0.25);
    EXPECT_EQ(r.preemptions, 0);
}

TEST(KvMemorySim, StaticReservationLimitsHowManyRunAtOnce) {
    // Room for one 32-slot reservation: the second request waits for the first.
    const MemorySimOptions options{.capacity_tokens = 40, .block_size = 4, .max_seq_len = 32};
    const MemorySimResult r =
        simulate_kv_memory(two_requests(), ReservationPolicy::kStaticMax, options);
    EXPECT_EQ(r.steps, 4);
    EXPECT_EQ(r.peak_running, 1);
    const MemorySimResult exact =
        simulate_kv_memory(two_requests(), ReservationPolicy::kStaticExact, options);
    EXPECT_EQ(exact.steps, 2);
    EXPECT_EQ(exact.peak_running, 2);
    EXPECT_DOUBLE_EQ(exact.waste_never_fraction, 0.0);
}

TEST(KvMemorySim, ReproducesThePapersWasteOnTheShareGptLikeTrace) {
    const std::vector<TraceRequest> trace =
        load_trace(test::source_path("data/traces/sharegpt_like.jsonl"));
    ASSERT_EQ(trace.size(), 1000u);
    const MemorySimOptions options{.capacity_tokens = 23301, .block_size = 16};
    const MemorySimResult max = simulate_kv_memory(trace, ReservationPolicy::kStaticMax, options);
    const MemorySimResult exact =
        simulate_kv_memory(trace, ReservationPolicy::kStaticExact, options);
    const MemorySimResult paged = simulate_kv_memory(trace, ReservationPolicy::kPaged, options);
    EXPECT_GT(max.waste_fraction, 0.6);     // the paper: 60-80% in existing systems
    EXPECT_LT(paged.waste_fraction, 0.04);  // the paper: under 4% with paging
    EXPECT_LT(paged.waste_fraction, exact.waste_fraction);
    EXPECT_LT(exact.waste_fraction, max.waste_fraction);
    EXPECT_GT(paged.mean_running, 3 * max.mean_running);
    EXPECT_LT(paged.steps, max.steps);
    // A paged sequence wastes less than one block.
    EXPECT_LT(paged.mean_reserved_tokens - paged.mean_used_tokens,
              double(options.block_size - 1) * paged.mean_running + 1e-9);
}

TEST(KvMemorySim, PreemptsWhenThePoolRunsOutAndStillFinishes) {
    std::vector<TraceRequest> trace;
    for (int64_t i = 0; i < 20; ++i)
        trace.push_back({.id = i, .prompt_tokens = 5, .output_tokens = 40});
    const MemorySimOptions options{.capacity_tokens = 128, .block_size = 8, .max_seq_len = 64};
    const MemorySimResult r = simulate_kv_memory(trace, ReservationPolicy::kPaged, options);
    EXPECT_GT(r.preemptions, 0);
    EXPECT_LE(r.peak_running, 16);
    EXPECT_LE(r.mean_reserved_tokens, 128.0);
}

TEST(KvMemorySim, RejectsRequestsThatCanNeverFit) {
    const std::vector<TraceRequest> long_one = {
        {.id = 7, .prompt_tokens = 30, .output_tokens = 10}};
    const MemorySimOptions options{.capacity_tokens = 64, .block_size = 4, .max_seq_len = 32};
    EXPECT_NE(test::error_of([&] {
                  simulate_kv_memory(long_one, ReservationPolicy::kStaticMax, options);
              }).find("request 7 needs 40 tokens"),
              std::string::npos);
    const MemorySimOptions small{.capacity_tokens = 16, .block_size = 4, .max_seq_len = 64};
    EXPECT_THROW(simulate_kv_memory(long_one, ReservationPolicy::kPaged, small), Error);
}

std::string write_temp(const std::string& text) {
    char path[] = "/tmp/servelab_trace_XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    std::ofstream(path) << text;
    return path;
}

TEST(Trace, LoadsLinesAndNamesTheBadOne) {
    const std::string good = write_temp(
        "{\"id\": 3, \"prompt_tokens\": 10, \"output_tokens\": 5}\n\n"
        "{\"prompt_tokens\": 8, \"output_tokens\": 2, \"prefix_group\": 1, \"prefix_tokens\": "
        "4}\n");
    const std::vector<TraceRequest> trace = load_trace(good);
    ASSERT_EQ(trace.size(), 2u);
    EXPECT_EQ(trace[0].id, 3);
    EXPECT_EQ(trace[1].prefix_tokens, 4);
    std::remove(good.c_str());

    const std::vector<std::pair<std::string, std::string>> bad = {
        {"{\"prompt_tokens\": 10}\n", ":1: missing \"output_tokens\""},
        {"{\"prompt_tokens\": 1, \"output_tokens\": 1}\nnot json\n", ":2: not a JSON object"},
        {"{\"prompt_tokens\": 0, \"output_tokens\": 1}\n", "must be in [1, 2^24]"},
        {"{\"prompt_tokens\": 2.5, \"output_tokens\": 1}\n", "must be an integer"},
        {"{\"prompt_tokens\": 4, \"output_tokens\": 1, \"prefix_tokens\": 5}\n", "prefix_tokens"},
        {"\n", "holds no requests"},
    };
    for (const auto& [text, needle] : bad) {
        const std::string path = write_temp(text);
        const std::string error = test::error_of([&] { load_trace(path); });
        EXPECT_NE(error.find(needle), std::string::npos) << text << " → " << error;
        std::remove(path.c_str());
    }
    EXPECT_NE(test::error_of([] { load_trace("/nonexistent/trace.jsonl"); }).find("cannot open"),
              std::string::npos);
}

}  // namespace
}  // namespace servelab
