// paged_attention_bench.cpp — the plain paged attention against the engine's tiled and split one.
//
// One layer of SmolLM2-135M (9 query heads, 3 KV heads of 64), fp32 pool,
// 16-token blocks scattered through the pool.
//
// Chapter 11.4 / 11.7. Decode: 1 query over `keys` cached tokens. Prefill: `keys` queries over
// themselves (a whole prompt in one step). Three kernels: paged_attention (plain: every score
// held), paged_flash_attention (the engine's: query tiles for prefill, the key split for decode),
// and the same with decode unsplit (one range per KV head: 3 work items for the 2 threads).
// Compare their times in the same run:
//   OMP_NUM_THREADS=2 build/release/servelab_bench --benchmark_filter=PagedAttention
// Each case also reports scratch_peak_bytes, the heap its kernel's first call took
// (heap_counter.h); it is the kernel's own only in a process that runs that case alone:
//   build/release/servelab_bench --benchmark_filter='PagedAttention<flash>/8192/1$'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_flash_attention.h"
#include "tests/bench/heap_counter.h"

namespace servelab {
namespace {

constexpr int64_t kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlockSize = 16;

struct Pool {
    std::vector<float> keys, values, q, out;
    std::vector<int32_t> table;
};

Pool make_pool(int64_t keys, int64_t queries) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Pool pool;
    const int64_t blocks = (keys + kBlockSize - 1) / kBlockSize;
    const size_t floats = size_t(blocks * kBlockSize * kKvHeads * kHeadDim);
    for (auto* v : {&pool.keys, &pool.values}) {
        v->resize(floats);
        for (float& x : *v) x = normal(rng);
    }
    pool.q.resize(size_t(queries * kHeads * kHeadDim));
    for (float& x : pool.q) x = normal(rng);
    pool.out.resize(pool.q.size());
    pool.table.resize(size_t(blocks));
    std::iota(pool.table.begin(), pool.table.end(), 0);
    std::shuffle(pool.table.begin(), pool.table.end(), rng);
    return pool;
}

using Kernel = void (*)(const float*, const float*, const float*, const int32_t*, int64_t, float*,
                        const AttentionShape&);

void flash(const float* q, const float* keys, const float* values, const int32_t* table,
           int64_t block_size, float* out, const AttentionShape& shape) {
    paged_flash_attention(q, keys, values, table, block_size, out, shape);
}

// Decode over one range as long as the context (rounded up to the key tile).
void flash_unsplit(const float* q, const float* keys, const float* values, const int32_t* table,
                   int64_t block_size, float* out, const AttentionShape& shape) {
    const int64_t whole = (shape.num_keys + kKeyTile - 1) / kKeyTile * kKeyTile;
    paged_flash_attention(q, keys, values, table, block_size, out, shape, whole);
}

template <Kernel Kernel>
void BM_PagedAttention(benchmark::State& state) {
    const int64_t keys = state.range(0);
    const int64_t queries = state.range(1) != 0 ? keys : 1;  // 1: prefill of the whole context
    Pool pool = make_pool(keys, queries);
    const AttentionShape shape{queries, keys, kHeads, kKvHeads, kHeadDim};
    // The first call's heap high-water mark above what was live before it:
    // the kernel's scratch (heap_counter.h: the first case of a process only).
    // Google Benchmark may run a case more than once: measured at the first.
    static std::map<std::pair<int64_t, int64_t>, double> first_call_scratch_bytes;
    if (!first_call_scratch_bytes.contains({keys, queries})) {
        bench::heap_reset_peak();
        const int64_t live_before = bench::heap_live_bytes();
        Kernel(pool.q.data(), pool.keys.data(), pool.values.data(), pool.table.data(), kBlockSize,
               pool.out.data(), shape);
        first_call_scratch_bytes[{keys, queries}] = double(bench::heap_peak_bytes() - live_before);
    }
    state.counters["scratch_peak_bytes"] = first_call_scratch_bytes[{keys, queries}];
    for (auto _ : state) {
        Kernel(pool.q.data(), pool.keys.data(), pool.values.data(), pool.table.data(), kBlockSize,
               pool.out.data(), shape);
        benchmark::DoNotOptimize(pool.out.data());
    }
    // K and V bytes one pass reads at least once.
    state.SetBytesProcessed(state.iterations() * keys * kKvHeads * kHeadDim * 2 * 4);
}

// {keys, prefill?}
#define SERVELAB_DECODE_CASES \
    ->Args({512, 0})->Args({1024, 0})->Args({2048, 0})->Args({4096, 0})->Args({8192, 0})
#define SERVELAB_ATTENTION_CASES          \
    SERVELAB_DECODE_CASES->Args({512, 1}) \
        ->Args({1024, 1})                 \
        ->Args({2048, 1})                 \
        ->Args({4096, 1})                 \
        ->Args({8192, 1})                 \
        ->UseRealTime()                   \
        ->Unit(benchmark::kMicrosecond)
BENCHMARK_TEMPLATE(BM_PagedAttention, paged_attention) SERVELAB_ATTENTION_CASES;
BENCHMARK_TEMPLATE(BM_PagedAttention, flash) SERVELAB_ATTENTION_CASES;
BENCHMARK_TEMPLATE(BM_PagedAttention, flash_unsplit)
SERVELAB_DECODE_CASES->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace servelab
