// kernel_bench.cpp — how fast each CUDA kernel runs, against the ceilings it measures first.
//
// CUDA backend (issue 7), run by tools/gpu_check.sh on the GPU machine. It
// first measures the two ceilings of the card as found (METHOD.md): device
// memory bandwidth, by a large device-to-device copy (bytes read + written),
// and the bf16 matrix rate, by an 8192³ cuBLAS GEMM. Then it times each
// kernel on a size that fills the chip and prints its rate as a fraction of
// the matching ceiling: bytes moved (each input read once, each output
// written once) over time for the memory-bound kernels, FLOPs over time for
// prefill attention (scalar and tensor-core, causal FLOPs only). Plain and fast versions of a
// kernel run on the same inputs, one after the other. Times are CUDA-event medians of 20 launches
// after 3 warm-ups, on random inputs (never zeros).
//
// `cuda_kernel_bench --splitk-sweep` instead times the split-K decode
// attention over a grid of (batch, context, splits, minimum piece) on
// SmolLM2's heads (9 query on 3 KV, 64 wide), and prints, per (batch,
// context), the time paged_decode_num_splits' choice takes against the best
// split count found: the evidence for its rule.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/argmax_kernels.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/fused_norm_kernels.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/norm_kernels.h"
#include "kernels/cuda/paged_decode_attention.h"
#include "kernels/cuda/paged_prefill_attention.h"
#include "kernels/cuda/paged_prefill_attention_mma.h"
#include "kernels/cuda/quant_dequantize.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_layout.h"
#include "kernels/cuda/rope_kernels.h"
#include "kernels/cuda/sampling_kernels.h"
#include "kernels/cuda/softmax_kernels.h"

namespace {

using namespace servelab;
using bf16 = __nv_bfloat16;

// Median time of `launch` in ms, by CUDA events.
double median_ms(const std::function<void()>& launch) {
    for (int i = 0; i < 3; ++i) launch();
    cudaEvent_t start, stop;
    SERVELAB_CUDA_CHECK(cudaEventCreate(&start));
    SERVELAB_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> times;
    for (int i = 0; i < 20; ++i) {
        SERVELAB_CUDA_CHECK(cudaEventRecord(start));
        launch();
        SERVELAB_CUDA_CHECK(cudaEventRecord(stop));
        SERVELAB_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        SERVELAB_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

template <typename T>
cuda::DeviceBuffer<T> random_buffer(size_t count, std::mt19937& rng, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<T> host(count);
    for (T& v : host) v = T(normal(rng));
    cuda::DeviceBuffer<T> buffer(count);
    buffer.upload(host);
    return buffer;
}

void row(const char* name, const std::string& size, double ms, double rate, const char* unit,
         double ceiling) {
    std::printf("%-24s %-28s %9.3f %9.1f %-7s %5.0f%%\n", name, size.c_str(), ms, rate, unit,
                100.0 * rate / ceiling);
}

// A random (rows, cols) matrix of `type` in the device layout
// (kernels/cuda/quant_layout.h): random codes, scales ~ ±[0.001, 0.1].
struct BenchQuantMatrix {
    cuda::DeviceBuffer<uint8_t> codes;
    cuda::DeviceBuffer<uint16_t> scales;
    cuda::QuantMatrixView view;
};

BenchQuantMatrix random_quant_matrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    const size_t blocks = static_cast<size_t>(rows * cols / 32);
    std::vector<uint8_t> codes(blocks * static_cast<size_t>(cuda::quant_code_bytes(type)));
    std::vector<uint16_t> scales(blocks * static_cast<size_t>(cuda::quant_scale_halves(type)));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.001f, 0.1f);
    for (uint8_t& c : codes) c = static_cast<uint8_t>(byte(rng));
    for (uint16_t& s : scales) {
        const __half_raw raw = __half(byte(rng) % 2 ? scale(rng) : -scale(rng));
        s = raw.x;
    }
    BenchQuantMatrix m{
        cuda::DeviceBuffer<uint8_t>(codes.size()), cuda::DeviceBuffer<uint16_t>(scales.size()), {}};
    m.codes.upload(codes);
    m.scales.upload(scales);
    m.view = {type, m.codes.data(), m.scales.data(), rows, cols};
    return m;
}

// The quantized GEMVs and the dequantize kernel (issue 48) on Llama-3.1-8B's
// gate/up shape (14336 x 4096): GB/s of the bytes each actually reads (the
// matrix's codes and scales, the activations) and writes, as a share of the
// copy's HBM bandwidth. The fast GEMV is timed alone: its activations are
// quantized once per input and shared by the projections that read it.
void quant_rows(std::mt19937& rng, double copy_gbs) {
    const double GB = 1e9;
    const int64_t rows = 14336, cols = 4096;
    for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ8_0}) {
        const BenchQuantMatrix w = random_quant_matrix(type, rows, cols, rng);
        const std::string type_name = type == GgmlType::kQ4_1 ? "Q4_1" : "Q8_0";
        for (int64_t tokens : {int64_t(1), int64_t(8)}) {
            auto x = random_buffer<bf16>(static_cast<size_t>(tokens * cols), rng);
            cuda::DeviceBuffer<bf16> y(static_cast<size_t>(tokens * rows));
            cuda::DeviceBuffer<int8_t> x_codes(static_cast<size_t>(tokens * cols));
            cuda::DeviceBuffer<float2> x_scales(static_cast<size_t>(tokens * cols / 32));
            const cuda::QuantizedActivationsView xq{x_codes.data(), x_scales.data(), tokens, cols};
            cuda::quantize_activations_int8(x.data(), xq, 0);
            const std::string size = type_name + " 14336x4096, " + std::to_string(tokens) + " tok";
            const double out_bytes = 2.0 * double(tokens * rows);
            const double plain_ms =
                median_ms([&] { cuda::quant_gemv_plain(w.view, x.data(), y.data(), tokens, 0); });
            const double plain_bytes =
                double(w.view.bytes()) + 2.0 * double(tokens * cols) + out_bytes;
            row("quant gemv plain (HBM)", size, plain_ms, plain_bytes / (plain_ms / 1e3) / GB,
                "GB/s", copy_gbs);
            const double fast_ms =
                median_ms([&] { cuda::quant_gemv_fast(w.view, xq, y.data(), 0); });
            const double fast_bytes =
                double(w.view.bytes()) + 1.25 * double(tokens * cols) + out_bytes;
            row("quant gemv fast (HBM)", size, fast_ms, fast_bytes / (fast_ms / 1e3) / GB, "GB/s",
                copy_gbs);
        }
        cuda::DeviceBuffer<bf16> dense(static_cast<size_t>(rows * cols));
        const double ms = median_ms([&] { cuda::dequantize_to_bf16(w.view, dense.data(), 0); });
        const double bytes = double(w.view.bytes()) + 2.0 * double(rows * cols);
        row("dequantize to bf16", type_name + " 14336x4096", ms, bytes / (ms / 1e3) / GB, "GB/s",
            copy_gbs);
    }
}

// One (batch, context) of the sweep: every sequence has `context` keys.
void splitk_sweep_case(int64_t batch, int64_t context, int64_t num_sms, std::mt19937& rng) {
    const int64_t heads = 9, kv_heads = 3, head_dim = 64, block = 16;
    const int64_t blocks_per_seq = (context + block - 1) / block;
    const int64_t num_blocks = batch * blocks_per_seq;
    auto q = random_buffer<bf16>(static_cast<size_t>(batch * heads * head_dim), rng);
    const size_t pool = static_cast<size_t>(num_blocks * block * kv_heads * head_dim);
    auto keys = random_buffer<bf16>(pool, rng);
    auto values = random_buffer<bf16>(pool, rng);
    std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
    for (int64_t i = 0; i < num_blocks; ++i) tables[static_cast<size_t>(i)] = int32_t(i);
    std::shuffle(tables.begin(), tables.end(), rng);
    cuda::DeviceBuffer<int32_t> tables_gpu(tables.size());
    tables_gpu.upload(tables);
    cuda::DeviceBuffer<int32_t> lens_gpu(static_cast<size_t>(batch));
    lens_gpu.upload(std::vector<int32_t>(static_cast<size_t>(batch), int32_t(context)));
    cuda::DeviceBuffer<bf16> out(static_cast<size_t>(batch * heads * head_dim));
    const cuda::PagedDecodeShape shape{batch, heads,          kv_heads, head_dim,
                                       block, blocks_per_seq, context};
    // What a graph of this batch would use: splits sized for 8192 tokens.
    cuda::PagedDecodeShape graph_shape = shape;
    graph_shape.max_context_len = 8192;
    const int64_t chosen = cuda::paged_decode_num_splits(shape, num_sms);
    const int64_t chosen_graph = cuda::paged_decode_num_splits(graph_shape, num_sms);
    cuda::DeviceBuffer<float> workspace(
        static_cast<size_t>(cuda::paged_decode_workspace_floats(shape, cuda::kDecodeMaxSplits)));
    auto time_us = [&](int64_t splits, int64_t min_piece) {
        return 1e3 * median_ms([&] {
                   cuda::paged_decode_attention_splitk_bf16(
                       q.data(), keys.data(), values.data(), tables_gpu.data(), lens_gpu.data(),
                       out.data(), shape, splits, min_piece, workspace.data(), 0);
               });
    };
    std::printf("batch %3lld context %5lld:", (long long)batch, (long long)context);
    double best = 1e30;
    int64_t best_splits = 0, best_piece = 0;
    for (int64_t min_piece : {int64_t(1), int64_t(32), int64_t(64)}) {
        std::printf("  piece>=%lld", (long long)min_piece);
        for (int64_t splits = 1; splits <= cuda::kDecodeMaxSplits; splits *= 2) {
            const double us = time_us(splits, min_piece);
            std::printf(" %lld:%.1f", (long long)splits, us);
            if (us < best) best = us, best_splits = splits, best_piece = min_piece;
        }
    }
    const double chosen_us = time_us(chosen, cuda::kDecodeMinPieceTokens);
    const double graph_us = time_us(chosen_graph, cuda::kDecodeMinPieceTokens);
    std::printf(
        "\n  -> best %.1f us (%lld splits, piece>=%lld); chosen %lld splits %.1f us; "
        "graph's %lld splits %.1f us\n",
        best, (long long)best_splits, (long long)best_piece, (long long)chosen, chosen_us,
        (long long)chosen_graph, graph_us);
}

int splitk_sweep() {
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        std::printf("kernel_bench: no usable GPU (%s)\n", query.error.c_str());
        return 0;
    }
    const int64_t num_sms = query.devices[0].multiprocessors;
    std::printf(
        "split-K decode sweep on %s (%lld SMs): microseconds per launch, "
        "splits:us, SmolLM2's heads; min piece in use %lld\n",
        query.devices[0].name.c_str(), (long long)num_sms, (long long)cuda::kDecodeMinPieceTokens);
    std::mt19937 rng(7);
    for (int64_t batch : {1, 8, 64, 256}) {
        for (int64_t context : {160, 1024, 4096}) splitk_sweep_case(batch, context, num_sms, rng);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "--splitk-sweep") return splitk_sweep();
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        std::printf("kernel_bench: no usable GPU (%s)\n", query.error.c_str());
        return 0;
    }
    std::printf("%s, %d SMs\n", query.devices[0].name.c_str(), query.devices[0].multiprocessors);
    std::mt19937 rng(2026);
    const double GB = 1e9;

    // Ceilings.
    const size_t copy_bytes = static_cast<size_t>(1) << 30;
    cuda::DeviceBuffer<char> from(copy_bytes), to(copy_bytes);
    from.fill_bytes(0x5A);
    const double copy_ms = median_ms([&] {
        SERVELAB_CUDA_CHECK(
            cudaMemcpyAsync(to.data(), from.data(), copy_bytes, cudaMemcpyDeviceToDevice));
    });
    const double copy_gbs = 2.0 * double(copy_bytes) / (copy_ms / 1e3) / GB;
    cuda::CublasHandle cublas;
    const int64_t n = 8192;
    auto a = random_buffer<bf16>(static_cast<size_t>(n * n), rng);
    auto b = random_buffer<bf16>(static_cast<size_t>(n * n), rng, 0.02f);
    cuda::DeviceBuffer<bf16> c(static_cast<size_t>(n * n));
    const double gemm_ms =
        median_ms([&] { cuda::gemm_bf16(cublas, a.data(), b.data(), c.data(), n, n, n, 0); });
    const double gemm_tflops = 2.0 * double(n) * n * n / (gemm_ms / 1e3) / 1e12;

    std::printf("\n%-24s %-28s %9s %9s %-7s %6s\n", "kernel", "size", "ms", "rate", "unit",
                "of ceil");
    row("copy (ceiling)", "1 GiB device to device", copy_ms, copy_gbs, "GB/s", copy_gbs);
    row("cuBLAS bf16 (ceiling)", "8192 x 8192 x 8192", gemm_ms, gemm_tflops, "TFLOP/s",
        gemm_tflops);

    {  // RMSNorm: read x and write out once (the weight is small).
        const int64_t rows = 16384, dim = 4096;
        auto x = random_buffer<bf16>(static_cast<size_t>(rows * dim), rng);
        auto w = random_buffer<bf16>(static_cast<size_t>(dim), rng);
        cuda::DeviceBuffer<bf16> out(static_cast<size_t>(rows * dim));
        const double ms = median_ms(
            [&] { cuda::rmsnorm_bf16(x.data(), w.data(), out.data(), rows, dim, 1e-5f, 0); });
        row("rmsnorm", "16384 x 4096", ms, 2.0 * 2 * rows * dim / (ms / 1e3) / GB, "GB/s",
            copy_gbs);
    }
    {  // SiLU-and-multiply: read gate and up, write out.
        const int64_t count = int64_t(1) << 26;
        auto gate = random_buffer<bf16>(static_cast<size_t>(count), rng);
        auto up = random_buffer<bf16>(static_cast<size_t>(count), rng);
        cuda::DeviceBuffer<bf16> out(static_cast<size_t>(count));
        const double ms =
            median_ms([&] { cuda::silu_mul_bf16(gate.data(), up.data(), out.data(), count, 0); });
        row("silu_mul", "2^26 elements", ms, 3.0 * 2 * count / (ms / 1e3) / GB, "GB/s", copy_gbs);
    }
    {  // RoPE in place: read and write every rotated element.
        const int64_t tokens = 16384, heads = 32;
        const RopeParams params{128, 128, 10000.0f};
        auto x = random_buffer<bf16>(static_cast<size_t>(tokens * heads * 128), rng);
        std::vector<int32_t> positions(static_cast<size_t>(tokens));
        for (int64_t t = 0; t < tokens; ++t) positions[static_cast<size_t>(t)] = int32_t(t % 8192);
        cuda::DeviceBuffer<int32_t> positions_gpu(positions.size());
        positions_gpu.upload(positions);
        const std::vector<float> table = cuda::rope_cos_sin_table(params, 8192);
        cuda::DeviceBuffer<float> table_gpu(table.size());
        table_gpu.upload(table);
        const double ms = median_ms([&] {
            cuda::rope_bf16(x.data(), positions_gpu.data(), table_gpu.data(), tokens, heads, params,
                            0);
        });
        row("rope", "16384 tokens x 32 x 128", ms, 2.0 * 2 * tokens * heads * 128 / (ms / 1e3) / GB,
            "GB/s", copy_gbs);
    }
    {  // Softmax (plain): read every value, write every probability.
        const int64_t rows = 256, n = 128000;
        auto x = random_buffer<float>(static_cast<size_t>(rows * n), rng, 3.0f);
        cuda::DeviceBuffer<float> out(static_cast<size_t>(rows * n));
        const double ms =
            median_ms([&] { cuda::softmax_rows_f32(x.data(), out.data(), rows, n, 0); });
        row("softmax", "256 x 128000 fp32", ms, 2.0 * 4 * rows * n / (ms / 1e3) / GB, "GB/s",
            copy_gbs);
    }
    {  // Argmax: read every logit once.
        const int64_t rows = 256, vocab = 128000;
        auto logits = random_buffer<float>(static_cast<size_t>(rows * vocab), rng);
        cuda::DeviceBuffer<int32_t> out(static_cast<size_t>(rows));
        const double ms =
            median_ms([&] { cuda::argmax_rows_f32(logits.data(), out.data(), rows, vocab, 0); });
        row("argmax", "256 x 128000 fp32", ms, 4.0 * rows * vocab / (ms / 1e3) / GB, "GB/s",
            copy_gbs);
    }
    {  // Fused residual add + RMSNorm: read residual and delta, write both outputs.
        const int64_t rows = 16384, dim = 4096;
        auto x = random_buffer<bf16>(static_cast<size_t>(rows * dim), rng);
        auto delta = random_buffer<bf16>(static_cast<size_t>(rows * dim), rng, 0.1f);
        auto w = random_buffer<bf16>(static_cast<size_t>(dim), rng);
        cuda::DeviceBuffer<bf16> out(static_cast<size_t>(rows * dim));
        const double ms = median_ms([&] {
            cuda::add_rmsnorm_bf16(x.data(), delta.data(), w.data(), out.data(), rows, dim, 1e-5f,
                                   0);
        });
        row("add_rmsnorm (fast)", "16384 x 4096", ms, 4.0 * 2 * rows * dim / (ms / 1e3) / GB,
            "GB/s", copy_gbs);
    }
    {  // SiLU-and-multiply, vectorized.
        const int64_t count = int64_t(1) << 26;
        auto gate = random_buffer<bf16>(static_cast<size_t>(count), rng);
        auto up = random_buffer<bf16>(static_cast<size_t>(count), rng);
        cuda::DeviceBuffer<bf16> out(static_cast<size_t>(count));
        const double ms = median_ms(
            [&] { cuda::silu_mul_fast_bf16(gate.data(), up.data(), out.data(), count, 0); });
        row("silu_mul (fast)", "2^26 elements", ms, 3.0 * 2 * count / (ms / 1e3) / GB, "GB/s",
            copy_gbs);
    }
    {  // KV append: read k and v of every token, write them into the pool.
        const int64_t tokens = 65536, kv_dim = 1024;
        auto k = random_buffer<bf16>(static_cast<size_t>(tokens * kv_dim), rng);
        auto v = random_buffer<bf16>(static_cast<size_t>(tokens * kv_dim), rng);
        cuda::DeviceBuffer<bf16> keys(static_cast<size_t>(tokens * kv_dim));
        cuda::DeviceBuffer<bf16> values(static_cast<size_t>(tokens * kv_dim));
        std::vector<int32_t> slots(static_cast<size_t>(tokens));
        for (int64_t t = 0; t < tokens; ++t) slots[static_cast<size_t>(t)] = int32_t(t);
        std::shuffle(slots.begin(), slots.end(), rng);
        cuda::DeviceBuffer<int32_t> slots_gpu(slots.size());
        slots_gpu.upload(slots);
        const double ms = median_ms([&] {
            cuda::kv_append_bf16(k.data(), v.data(), slots_gpu.data(), keys.data(), values.data(),
                                 tokens, kv_dim, 0);
        });
        row("kv_append", "65536 tokens x 1024", ms, 2.0 * 2 * 2 * tokens * kv_dim / (ms / 1e3) / GB,
            "GB/s", copy_gbs);
    }
    {  // Sampling (top-k 50, top-p 0.9): read every logit at least once.
        const int64_t rows = 64, vocab = 128000;
        auto logits = random_buffer<float>(static_cast<size_t>(rows * vocab), rng, 3.0f);
        std::vector<cuda::DeviceSample> samples(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            cuda::DeviceSample& s = samples[static_cast<size_t>(r)];
            s.logits_row = int32_t(r);
            s.temperature = 0.8f;
            s.top_k = 50;
            s.top_p = 0.9f;
            s.uniform = double(r) / double(rows);
        }
        cuda::DeviceBuffer<cuda::DeviceSample> samples_gpu(samples.size());
        samples_gpu.upload(samples);
        cuda::DeviceBuffer<int32_t> penalty(1), out(static_cast<size_t>(rows));
        cuda::DeviceBuffer<uint64_t> masks(1);  // no sample is constrained
        cuda::DeviceBuffer<float> workspace(
            static_cast<size_t>(cuda::sampling_workspace_floats(rows, vocab)));
        const double ms = median_ms([&] {
            cuda::sample_tokens(logits.data(), samples_gpu.data(), penalty.data(), masks.data(),
                                out.data(), rows, vocab, workspace.data(), 0);
        });
        row("sample top-k/top-p", "64 x 128000 fp32", ms, 4.0 * rows * vocab / (ms / 1e3) / GB,
            "GB/s", copy_gbs);
    }
    {  // Paged decode attention: the least it must read is every K and V row once.
        const int64_t seqs = 64, heads = 32, kv_heads = 8, head_dim = 128, block = 16,
                      context = 4096;
        const int64_t blocks_per_seq = context / block, num_blocks = seqs * blocks_per_seq;
        auto q = random_buffer<bf16>(static_cast<size_t>(seqs * heads * head_dim), rng);
        auto keys =
            random_buffer<bf16>(static_cast<size_t>(num_blocks * block * kv_heads * head_dim), rng);
        auto values =
            random_buffer<bf16>(static_cast<size_t>(num_blocks * block * kv_heads * head_dim), rng);
        std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
        for (int64_t i = 0; i < num_blocks; ++i) tables[static_cast<size_t>(i)] = int32_t(i);
        std::shuffle(tables.begin(), tables.end(), rng);
        cuda::DeviceBuffer<int32_t> tables_gpu(tables.size());
        tables_gpu.upload(tables);
        cuda::DeviceBuffer<bf16> out(static_cast<size_t>(seqs * heads * head_dim));
        const double kv_bytes = 2.0 * 2 * kv_heads * head_dim;  // K and V, bf16, per token
        for (const int64_t batch : {int64_t(1), seqs}) {
            std::vector<int32_t> lens(static_cast<size_t>(seqs), 0);
            std::fill_n(lens.begin(), batch, int32_t(context));
            cuda::DeviceBuffer<int32_t> lens_gpu(lens.size());
            lens_gpu.upload(lens);
            const cuda::PagedDecodeShape shape{batch, heads,          kv_heads, head_dim,
                                               block, blocks_per_seq, context};
            const std::string size = std::to_string(batch) + " seqs x 4096, 32:8 x 128";
            const double bytes = kv_bytes * double(batch * context);
            const double plain_ms = median_ms([&] {
                cuda::paged_decode_attention_bf16(q.data(), keys.data(), values.data(),
                                                  tables_gpu.data(), lens_gpu.data(), out.data(),
                                                  shape, 0);
            });
            row("paged decode (plain)", size, plain_ms, bytes / (plain_ms / 1e3) / GB, "GB/s",
                copy_gbs);
            const int64_t splits =
                cuda::paged_decode_num_splits(shape, query.devices[0].multiprocessors);
            cuda::DeviceBuffer<float> workspace(
                static_cast<size_t>(cuda::paged_decode_workspace_floats(shape, splits)));
            const double fast_ms = median_ms([&] {
                cuda::paged_decode_attention_splitk_bf16(
                    q.data(), keys.data(), values.data(), tables_gpu.data(), lens_gpu.data(),
                    out.data(), shape, splits, cuda::kDecodeMinPieceTokens, workspace.data(), 0);
            });
            row("paged decode (split-K)", size, fast_ms, bytes / (fast_ms / 1e3) / GB, "GB/s",
                copy_gbs);
        }
    }
    {  // Causal prefill attention: 2·2·d FLOPs per (query, key) pair under the mask.
        const int64_t seqs = 8, len = 2048, heads = 32, kv_heads = 8, head_dim = 128, block = 16;
        const int64_t blocks_per_seq = len / block, num_blocks = seqs * blocks_per_seq;
        const int64_t tokens = seqs * len;
        auto q = random_buffer<bf16>(static_cast<size_t>(tokens * heads * head_dim), rng);
        auto keys =
            random_buffer<bf16>(static_cast<size_t>(num_blocks * block * kv_heads * head_dim), rng);
        auto values =
            random_buffer<bf16>(static_cast<size_t>(num_blocks * block * kv_heads * head_dim), rng);
        std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
        for (int64_t i = 0; i < num_blocks; ++i) tables[static_cast<size_t>(i)] = int32_t(i);
        cuda::DeviceBuffer<int32_t> tables_gpu(tables.size());
        tables_gpu.upload(tables);
        std::vector<int32_t> starts, lens(static_cast<size_t>(seqs), int32_t(len));
        for (int64_t s = 0; s <= seqs; ++s) starts.push_back(int32_t(s * len));
        cuda::DeviceBuffer<int32_t> starts_gpu(starts.size()), lens_gpu(lens.size());
        starts_gpu.upload(starts);
        lens_gpu.upload(lens);
        cuda::DeviceBuffer<bf16> out(static_cast<size_t>(tokens * heads * head_dim));
        const cuda::PagedPrefillShape shape{seqs,     tokens,   len,   heads,
                                            kv_heads, head_dim, block, blocks_per_seq};
        const double ms = median_ms([&] {
            cuda::paged_prefill_attention_bf16(q.data(), keys.data(), values.data(),
                                               tables_gpu.data(), starts_gpu.data(),
                                               lens_gpu.data(), out.data(), shape, 0);
        });
        // Only the pairs under the diagonal count: len (len + 1) / 2 per
        // head, each a d-long q·k and a d-long p·v (2 FLOPs per element).
        const double flops = 4.0 * head_dim * heads * seqs * (double(len) * (len + 1) / 2);
        row("prefill attention", "8 x 2048, 32:8 x 128", ms, flops / (ms / 1e3) / 1e12, "TFLOP/s",
            gemm_tflops);
        // The tensor-core kernel on the same inputs, against the same cuBLAS
        // rate (the target: 40 % of it).
        const double mma_ms = median_ms([&] {
            cuda::paged_prefill_attention_mma_bf16(q.data(), keys.data(), values.data(),
                                                   tables_gpu.data(), starts_gpu.data(),
                                                   lens_gpu.data(), out.data(), shape, 0);
        });
        row("prefill attn (mma.sync)", "8 x 2048, 32:8 x 128", mma_ms,
            flops / (mma_ms / 1e3) / 1e12, "TFLOP/s", gemm_tflops);
    }
    quant_rows(rng, copy_gbs);
    return 0;
}
