// openmp_region_bench.cpp — what opening one OpenMP parallel region costs,
// from the main thread and from a second thread.
//
// Why servelab serve runs its engine loop on the main thread (issue 10,
// reference/server/engine_loop.h): a decode step opens a few hundred
// parallel regions. Once the main thread has a team, libgomp lets a team
// started from another thread spin only briefly before its threads sleep
// when threads outnumber cores, so each region there pays a wake-up. Run
// with the engine's thread count, e.g.
//   OMP_NUM_THREADS=2 build/release/servelab_bench --benchmark_filter=OpenMpRegion
// (docs/perf.md, "Serving", has the figures of the 2-core machine).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <thread>
#include <vector>

namespace {

constexpr int kRegionsPerIteration = 100;

// One region over 20,000 floats: about as much work as a small decode-step kernel.
void one_region(std::vector<float>& data) {
    const int64_t n = int64_t(data.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) data[size_t(i)] = data[size_t(i)] * 1.0001f + 0.5f;
}

double run_regions_s(std::vector<float>& data) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < kRegionsPerIteration; ++r) one_region(data);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void BM_OpenMpRegionFromMainThread(benchmark::State& state) {
    std::vector<float> data(20000, 1.0f);
    for (auto _ : state) state.SetIterationTime(run_regions_s(data));
    state.SetItemsProcessed(state.iterations() * kRegionsPerIteration);
}

void BM_OpenMpRegionFromSecondThread(benchmark::State& state) {
    std::vector<float> data(20000, 1.0f);
    one_region(data);  // the main thread has a team, as after loading a model
    std::thread second([&] {
        for (auto _ : state) state.SetIterationTime(run_regions_s(data));
    });
    second.join();
    state.SetItemsProcessed(state.iterations() * kRegionsPerIteration);
}

BENCHMARK(BM_OpenMpRegionFromMainThread)->UseManualTime();
BENCHMARK(BM_OpenMpRegionFromSecondThread)->UseManualTime();

}  // namespace
