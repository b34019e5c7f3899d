// gemv_steps_bench.cpp — Google Benchmark cases for Lab 8's GEMV steps.
//
// One case per step (kernels/cpu/gemv_steps.h) and one for the production
// kernel quant_matmul, on SmolLM2-135M's matrices for one decode token:
// 576x576 (q and o projections), 1536x576 (gate, up), 576x1536 (down) and
// 49152x576 (the LM head). Weights are streamed from a buffer twice the
// last-level cache (tests/bench/streamed_q4_1.h), and bytes_per_second is
// the weight bytes read: compare it with build/release/membw_probe. Run:
//   build/release/servelab_bench --benchmark_filter=Gemv
//   OMP_NUM_THREADS=2 build/release/servelab_bench --benchmark_filter='Gemv.*rows:1536/cols:576'
#include <benchmark/benchmark.h>

#include <utility>
#include <vector>

#include "kernels/cpu/gemv_steps.h"
#include "tests/bench/streamed_q4_1.h"

namespace servelab {
namespace {

// quant_matmul for one token, in the steps' signature.
void quant_matmul_one_token(const float* x, const QuantMatrix& w, float* y) {
    quant_matmul(x, w, y, 1);
}

// One buffer for every case (filling it once takes a while).
StreamedQ4_1& stream() {
    static StreamedQ4_1 weights;
    return weights;
}

template <void (*Step)(const float*, const QuantMatrix&, float*)>
void BM_Gemv(benchmark::State& state) {
    const int64_t rows = state.range(0), cols = state.range(1);
    const int64_t matrix_bytes = rows * row_size_bytes(GgmlType::kQ4_1, cols);
    std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
    StreamedQ4_1& weights = stream();  // filled here, the first time, not in the timed loop
    for (auto _ : state) {
        Step(x.data(), weights.next(rows, cols), y.data());
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * matrix_bytes);
}

void shapes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"rows", "cols"});
    for (auto [rows, cols] : {std::pair{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}}) {
        b->Args({rows, cols});
    }
    b->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_Gemv, gemv_step0_scalar)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_Gemv, gemv_step1_unrolled)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_Gemv, gemv_step2_threads)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_Gemv, gemv_step3_simd)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_Gemv, gemv_step4_blocked)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_Gemv, quant_matmul_one_token)->Apply(shapes);

}  // namespace
}  // namespace servelab
