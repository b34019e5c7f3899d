// fused_kernels_bench.cpp — each fused kernel against its unfused sequence.
//
// Chapter 11.7 (kernel fusion; docs/kernel_fusion.md has the figures). At
// SmolLM2-135M's shapes (dim 576, hidden 1536, 9 query / 3 KV heads of 64,
// Q4_1 weights in fast mode), for one decode token and a 512-token prefill
// chunk. Each case is one layer's use of the kernels; fused=0 runs what the
// engine runs with --no-fused-kernels, fused=1 what it runs by default.
// Interleave and repeat the pairs, and read medians:
//   servelab_bench --benchmark_filter=Fused --benchmark_repetitions=7
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// The epilogue fusions (RoPE, SwiGLU) need the repacked weights (AVX-512
// VNNI); elsewhere those cases report an error and are skipped.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/fused_add_rmsnorm.h"
#include "kernels/cpu/fused_gate_up_swiglu.h"
#include "kernels/cpu/fused_qkv_rope.h"
#include "kernels/cpu/fused_rmsnorm_quantize.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "reference/model/weight_matrix.h"

namespace servelab {
namespace {

constexpr int64_t kDim = 576;
constexpr int64_t kFfnDim = 1536;
constexpr int64_t kHeads = 9;
constexpr int64_t kKvHeads = 3;
constexpr int64_t kHeadDim = 64;
constexpr float kEps = 1e-5f;

std::vector<float> random_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) v = dist(rng);
    return values;
}

// A Q4_1 matrix of random codes with finite scales, in fast mode (repacked
// where the CPU runs the repacked kernel).
WeightMatrix random_q4_1(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t row_bytes = row_size_bytes(GgmlType::kQ4_1, cols);
    std::vector<uint8_t> bytes(size_t(rows * row_bytes));
    for (uint8_t& b : bytes) b = uint8_t(rng());
    for (size_t b = 0; b < bytes.size(); b += 20) {  // d and m about 0.0078
        bytes[b] = 0x00, bytes[b + 1] = 0x20, bytes[b + 2] = 0x00, bytes[b + 3] = 0x20;
    }
    WeightMatrix m = WeightMatrix::from_blocks(GgmlType::kQ4_1, std::move(bytes), rows, cols);
    m.set_mode(MatmulMode::kFast);
    return m;
}

void set_tokens_counter(benchmark::State& state, int64_t tokens) {
    state.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}

// The attention block's input: (x += delta), h = rmsnorm(x), int8 blocks of h.
void BM_FusedAddRmsnormQuantize(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const bool fused = state.range(1) == 1;
    std::vector<float> x = random_values(size_t(tokens * kDim), 1);
    const std::vector<float> delta = random_values(x.size(), 2);
    const std::vector<float> weight = random_values(size_t(kDim), 3);
    std::vector<float> normed(x.size());
    QuantizedActivations xq;
    for (auto _ : state) {
        if (fused) {
            add_rmsnorm_quantize_rows(x.data(), delta.data(), weight.data(), tokens, kDim, kEps,
                                      xq);
        } else {
            add_inplace(x.data(), delta.data(), tokens * kDim);
            rmsnorm_rows(x.data(), weight.data(), normed.data(), tokens, kDim, kEps);
            quantize_activations(normed.data(), tokens, kDim, xq);
        }
        benchmark::DoNotOptimize(xq.codes.data());
    }
    set_tokens_counter(state, tokens);
}
BENCHMARK(BM_FusedAddRmsnormQuantize)
    ->ArgsProduct({{1, 512}, {0, 1}})
    ->ArgNames({"tokens", "fused"})
    ->UseRealTime();

// The first layer's input, no residual yet: h = rmsnorm(x), int8 blocks of h.
void BM_FusedRmsnormQuantize(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const bool fused = state.range(1) == 1;
    const std::vector<float> x = random_values(size_t(tokens * kDim), 1);
    const std::vector<float> weight = random_values(size_t(kDim), 3);
    std::vector<float> normed(x.size());
    QuantizedActivations xq;
    for (auto _ : state) {
        if (fused) {
            rmsnorm_quantize_rows(x.data(), weight.data(), tokens, kDim, kEps, xq);
        } else {
            rmsnorm_rows(x.data(), weight.data(), normed.data(), tokens, kDim, kEps);
            quantize_activations(normed.data(), tokens, kDim, xq);
        }
        benchmark::DoNotOptimize(xq.codes.data());
    }
    set_tokens_counter(state, tokens);
}
BENCHMARK(BM_FusedRmsnormQuantize)
    ->ArgsProduct({{1, 512}, {0, 1}})
    ->ArgNames({"tokens", "fused"})
    ->UseRealTime();

// Exact mode's block input: x += delta, h = rmsnorm(x) as fp32.
void BM_FusedAddRmsnorm(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const bool fused = state.range(1) == 1;
    std::vector<float> x = random_values(size_t(tokens * kDim), 1);
    const std::vector<float> delta = random_values(x.size(), 2);
    const std::vector<float> weight = random_values(size_t(kDim), 3);
    std::vector<float> normed(x.size());
    for (auto _ : state) {
        if (fused) {
            add_rmsnorm_rows(x.data(), delta.data(), weight.data(), normed.data(), tokens, kDim,
                             kEps);
        } else {
            add_inplace(x.data(), delta.data(), tokens * kDim);
            rmsnorm_rows(x.data(), weight.data(), normed.data(), tokens, kDim, kEps);
        }
        benchmark::DoNotOptimize(normed.data());
    }
    set_tokens_counter(state, tokens);
}
BENCHMARK(BM_FusedAddRmsnorm)
    ->ArgsProduct({{1, 512}, {0, 1}})
    ->ArgNames({"tokens", "fused"})
    ->UseRealTime();

// q, k, v = h·Wᵀ and RoPE on q and k. The fused case's angle table is
// filled outside the timing: the engine fills it once per step for all 30
// layers (a 1/30 share per layer).
void BM_FusedQkvRope(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const bool fused = state.range(1) == 1;
    const WeightMatrix wq = random_q4_1(kHeads * kHeadDim, kDim, 4);
    const WeightMatrix wk = random_q4_1(kKvHeads * kHeadDim, kDim, 5);
    const WeightMatrix wv = random_q4_1(kKvHeads * kHeadDim, kDim, 6);
    if (!wq.is_repacked()) {
        state.SkipWithError("needs the repacked kernel (AVX-512 VNNI)");
        return;
    }
    const std::vector<float> h = random_values(size_t(tokens * kDim), 7);
    QuantizedActivations xq;
    quantize_activations(h.data(), tokens, kDim, xq);
    std::vector<int64_t> positions(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) positions[size_t(t)] = 100 + t;
    const RopeParams rope{kHeadDim, kHeadDim, 10000.0f};
    RopeTable table;
    fill_rope_table(positions.data(), tokens, rope, table);
    std::vector<float> q(size_t(tokens * kHeads * kHeadDim)),
        k(size_t(tokens * kKvHeads * kHeadDim)), v(k.size());
    const WeightMatrix* qkv[] = {&wq, &wk, &wv};
    float* outputs[] = {q.data(), k.data(), v.data()};
    for (auto _ : state) {
        if (fused) {
            qkv_matmul_rope(xq, wq.repacked(), wk.repacked(), wv.repacked(), q.data(), k.data(),
                            v.data(), rope, table);
        } else {
            multiply_same_input_quantized(qkv, xq, outputs);
            rope_apply_rows(q.data(), positions.data(), tokens, kHeads, rope);
            rope_apply_rows(k.data(), positions.data(), tokens, kKvHeads, rope);
        }
        benchmark::DoNotOptimize(q.data());
    }
    set_tokens_counter(state, tokens);
}
BENCHMARK(BM_FusedQkvRope)
    ->ArgsProduct({{1, 512}, {0, 1}})
    ->ArgNames({"tokens", "fused"})
    ->UseRealTime();

// h = silu(x·W_gateᵀ) * (x·W_upᵀ).
void BM_FusedGateUpSwiglu(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const bool fused = state.range(1) == 1;
    const WeightMatrix w_gate = random_q4_1(kFfnDim, kDim, 8);
    const WeightMatrix w_up = random_q4_1(kFfnDim, kDim, 9);
    if (!w_gate.is_repacked()) {
        state.SkipWithError("needs the repacked kernel (AVX-512 VNNI)");
        return;
    }
    const std::vector<float> h = random_values(size_t(tokens * kDim), 10);
    QuantizedActivations xq;
    quantize_activations(h.data(), tokens, kDim, xq);
    std::vector<float> gate(size_t(tokens * kFfnDim)), up(gate.size());
    const WeightMatrix* gate_up[] = {&w_gate, &w_up};
    float* outputs[] = {gate.data(), up.data()};
    for (auto _ : state) {
        if (fused) {
            gate_up_matmul_swiglu(xq, w_gate.repacked(), w_up.repacked(), gate.data());
        } else {
            multiply_same_input_quantized(gate_up, xq, outputs);
            swiglu(gate.data(), up.data(), gate.data(), tokens * kFfnDim);
        }
        benchmark::DoNotOptimize(gate.data());
    }
    set_tokens_counter(state, tokens);
}
BENCHMARK(BM_FusedGateUpSwiglu)
    ->ArgsProduct({{1, 512}, {0, 1}})
    ->ArgNames({"tokens", "fused"})
    ->UseRealTime();

}  // namespace
}  // namespace servelab
