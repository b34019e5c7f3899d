// kernels_bench.cpp — Google Benchmark cases for the CPU kernels.
//
// Not part of the test suite (ctest runs one short smoke pass). Run:
//   build/release/servelab_bench                     all cases
//   build/release/servelab_bench --benchmark_filter=Matmul
// Shapes are SmolLM2-135M's: dim 576, ffn 1536, 9 query / 3 KV heads of 64.
// The argument is the number of tokens in the step (1 = one decode token).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/kv_view.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_fast.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "reference/model/gguf_writer.h"

namespace servelab {
namespace {

constexpr int64_t kDim = 576;
constexpr int64_t kFfnDim = 1536;

std::vector<float> random_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) v = dist(rng);
    return values;
}

// The gate projection: (tokens, 576) · (1536, 576)ᵀ.
template <void (*Kernel)(const float*, const float*, float*, int64_t, int64_t, int64_t)>
void BM_Matmul(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const auto x = random_values(size_t(tokens * kDim), 1);
    const auto w = random_values(size_t(kFfnDim * kDim), 2);
    std::vector<float> y(size_t(tokens * kFfnDim));
    for (auto _ : state) {
        Kernel(x.data(), w.data(), y.data(), tokens, kDim, kFfnDim);
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(double(2 * tokens * kDim * kFfnDim),
                                                   benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
}
BENCHMARK_TEMPLATE(BM_Matmul, matmul)->Arg(1)->Arg(64)->Arg(256)->UseRealTime();
BENCHMARK_TEMPLATE(BM_Matmul, matmul_plain)->Arg(1)->Arg(64)->UseRealTime();

// Decode reads weights from memory, not from cache: these cases cycle through
// kStreamed different matrices (fp32: 226 MB; Q4_1: 35 MB, both beyond the
// caches) and report the weight bytes read per second next to GFLOP/s.
constexpr int kStreamed = 64;

void report_rates(benchmark::State& state, int64_t tokens, int64_t weight_bytes) {
    state.counters["GFLOP/s"] = benchmark::Counter(double(2 * tokens * kDim * kFfnDim),
                                                   benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
    state.counters["weight GB/s"] =
        benchmark::Counter(double(weight_bytes), benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::kIs1000);
}

void BM_MatmulStreamed(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const auto x = random_values(size_t(tokens * kDim), 1);
    std::vector<std::vector<float>> weights;
    for (int i = 0; i < kStreamed; ++i) {
        weights.push_back(random_values(size_t(kFfnDim * kDim), uint32_t(10 + i)));
    }
    std::vector<float> y(size_t(tokens * kFfnDim));
    int next = 0;
    for (auto _ : state) {
        matmul(x.data(), weights[size_t(next)].data(), y.data(), tokens, kDim, kFfnDim);
        next = (next + 1) % kStreamed;
        benchmark::DoNotOptimize(y.data());
    }
    report_rates(state, tokens, kFfnDim * kDim * int64_t(sizeof(float)));
}
BENCHMARK(BM_MatmulStreamed)->Arg(1)->Arg(64)->UseRealTime();

// Q4_1 blocks with random codes and scales: the speed does not depend on the values.
void BM_QuantMatmulStreamed(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const GgmlType type = GgmlType(state.range(1));
    const auto x = random_values(size_t(tokens * kDim), 1);
    const int64_t row_bytes = row_size_bytes(type, kDim);
    const int64_t block_bytes = ggml_type_traits(type).block_bytes;
    std::vector<std::vector<uint8_t>> weights;
    std::mt19937 rng(3);
    for (int i = 0; i < kStreamed; ++i) {
        std::vector<uint8_t> bytes(size_t(kFfnDim * row_bytes));
        for (uint8_t& b : bytes) b = uint8_t(rng());
        // Finite fp16 scales (0x2000 is about 0.0078) at the start of every block.
        for (size_t b = 0; b < bytes.size(); b += size_t(block_bytes)) {
            bytes[b] = 0x00, bytes[b + 1] = 0x20;
            if (type == GgmlType::kQ4_1) bytes[b + 2] = 0x00, bytes[b + 3] = 0x20;
        }
        weights.push_back(std::move(bytes));
    }
    std::vector<float> y(size_t(tokens * kFfnDim));
    const bool fast = state.range(2) == 1;
    QuantizedActivations xq;
    int next = 0;
    for (auto _ : state) {
        const QuantMatrix w{type, weights[size_t(next)].data(), kFfnDim, kDim, row_bytes};
        if (fast) {
            quantize_activations(x.data(), tokens, kDim, xq);  // counted: fast mode pays it
            quant_matmul_fast(xq, w, y.data());
        } else {
            quant_matmul(x.data(), w, y.data(), tokens);
        }
        next = (next + 1) % kStreamed;
        benchmark::DoNotOptimize(y.data());
    }
    report_rates(state, tokens, kFfnDim * row_bytes);
}
BENCHMARK(BM_QuantMatmulStreamed)
    ->ArgsProduct({{1, 64}, {int64_t(GgmlType::kQ4_1), int64_t(GgmlType::kQ8_0)}, {0, 1}})
    ->ArgNames({"tokens", "type", "fast"})
    ->UseRealTime();

void BM_RmsNorm(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const auto x = random_values(size_t(tokens * kDim), 3);
    const auto w = random_values(size_t(kDim), 4);
    std::vector<float> out(x.size());
    for (auto _ : state) {
        rmsnorm_rows(x.data(), w.data(), out.data(), tokens, kDim, 1e-5f);
        benchmark::DoNotOptimize(out.data());
    }
}
BENCHMARK(BM_RmsNorm)->Arg(1)->Arg(64);

void BM_Rope(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    auto q = random_values(size_t(tokens * 9 * 64), 5);
    std::vector<int64_t> positions(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) positions[size_t(t)] = t;
    for (auto _ : state) {
        rope_apply_rows(q.data(), positions.data(), tokens, 9, {64, 64, 100000.0f});
        benchmark::DoNotOptimize(q.data());
    }
}
BENCHMARK(BM_Rope)->Arg(1)->Arg(64);

// Causal attention of a whole sequence of `tokens` (prefill shape).
void BM_AttentionCausal(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    const auto q = random_values(size_t(tokens * 9 * 64), 6);
    const auto k = random_values(size_t(tokens * 3 * 64), 7);
    const auto v = random_values(size_t(tokens * 3 * 64), 8);
    std::vector<float> out(q.size());
    for (auto _ : state) {
        attention_causal(q.data(), k.data(), v.data(), out.data(), {tokens, tokens, 9, 3, 64});
        benchmark::DoNotOptimize(out.data());
    }
}
BENCHMARK(BM_AttentionCausal)->Arg(64)->Arg(256)->UseRealTime();

// One decode token attending over `cached` tokens of one layer's cache,
// stored as `Dtype` (Lab 3): what dequantizing inside attention costs.
template <KvDtype Dtype>
void BM_DecodeAttentionOverKv(benchmark::State& state) {
    const int64_t cached = state.range(0), kv_heads = 3, head_dim = 64;
    const auto q = random_values(size_t(9 * head_dim), 9);
    const auto rows = random_values(size_t(cached * kv_heads * head_dim), 10);
    const int64_t row_bytes = head_dim * kv_dtype_bytes(Dtype);
    std::vector<uint8_t> data(size_t(cached * kv_heads * row_bytes));
    std::vector<float> scales(size_t(cached * kv_heads));
    for (int64_t r = 0; r < cached * kv_heads; ++r) {
        scales[size_t(r)] =
            kv_encode_row(Dtype, rows.data() + r * head_dim, head_dim, data.data() + r * row_bytes);
    }
    const KvView view{Dtype, data.data(), kv_dtype_has_scales(Dtype) ? scales.data() : nullptr,
                      kv_heads, head_dim};
    std::vector<float> out(q.size());
    for (auto _ : state) {
        attention_over_kv(q.data(), view, view, out.data(), {1, cached, 9, kv_heads, head_dim});
        benchmark::DoNotOptimize(out.data());
    }
}
BENCHMARK_TEMPLATE(BM_DecodeAttentionOverKv, KvDtype::kF32)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK_TEMPLATE(BM_DecodeAttentionOverKv, KvDtype::kInt8)->Arg(1024)->Arg(4096)->UseRealTime();

// Dequantizing the rows of a (1536, 576) Q4_1 matrix, as the loader does.
void BM_DequantizeQ4_1(benchmark::State& state) {
    const int64_t rows = state.range(0);
    const auto values = random_values(size_t(rows * kDim), 9);
    std::vector<uint8_t> raw;
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = quantize_row(GgmlType::kQ4_1, {values.data() + r * kDim, size_t(kDim)});
        raw.insert(raw.end(), row.begin(), row.end());
    }
    const int64_t row_bytes = row_size_bytes(GgmlType::kQ4_1, kDim);
    std::vector<float> out(values.size());
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(GgmlType::kQ4_1, raw.data() + r * row_bytes, out.data() + r * kDim,
                           kDim);
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(raw.size()));
}
BENCHMARK(BM_DequantizeQ4_1)->Arg(64)->Arg(1536);

}  // namespace
}  // namespace servelab
