// cuda_kernels_test.cpp — the CUDA elementwise kernels against the CPU reference kernels.
//
// CUDA backend (issue 7). Built only when nvcc was found; on a machine
// without a usable GPU every test reports skipped with the runtime's reason.
// Inputs are fresh random bf16 values, outputs are poisoned (0xFF bytes: NaN
// in bf16) before each launch, and the shapes include SmolLM2's (576, 1536),
// tails that do not divide the block size, and a single element. Tolerances
// (docs/correctness.md): a bf16 result may differ from the fp32 CPU result
// by its own rounding (relative 2^-8) plus the fp32 arithmetic's, so
// |gpu - cpu| <= 2^-7 |cpu| + 1e-3; exact where no arithmetic happens.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/argmax_kernels.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm_kernels.h"
#include "kernels/cuda/paged_decode_attention.h"
#include "kernels/cuda/rope_kernels.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

using test::bf16;
using test::expect_bf16_close;
using test::on_device;
using test::rounded;
using test::to_bf16;
using test::to_float;

class CudaKernels : public test::CudaTest {};

TEST_F(CudaKernels, RmsNormEqualsTheCpuKernel) {
    SCOPED_TRACE(random_.trace());
    // The last case has values so small that eps dominates the mean square:
    // a kernel that forgets eps fails it.
    for (const auto& [rows, dim, scale, eps] :
         {std::tuple<int64_t, int64_t, float, float>{1, 1, 2.0f, 1e-5f},
          {3, 576, 2.0f, 1e-5f},
          {5, 1000, 2.0f, 1e-5f},
          {2, 4097, 2.0f, 1e-5f},
          {4, 576, 1e-3f, 1e-2f}}) {
        const std::vector<float> x = rounded(random_.normal(size_t(rows * dim), scale));
        const std::vector<float> weight = rounded(random_.uniform(size_t(dim), 0.5f, 1.5f));
        std::vector<float> expected(x.size());
        rmsnorm_rows(x.data(), weight.data(), expected.data(), rows, dim, eps);

        auto x_gpu = on_device(to_bf16(x));
        auto weight_gpu = on_device(to_bf16(weight));
        cuda::DeviceBuffer<bf16> out(x.size());
        out.fill_bytes(0xFF);
        cuda::rmsnorm_bf16(x_gpu.data(), weight_gpu.data(), out.data(), rows, dim, eps, 0);
        expect_bf16_close(to_float(out.download()), expected, "rmsnorm");
    }
}

TEST_F(CudaKernels, SiluMulEqualsTheCpuSwiglu) {
    SCOPED_TRACE(random_.trace());
    for (int64_t n : {int64_t(1), int64_t(255), int64_t(1536 * 3 + 7)}) {
        const std::vector<float> gate = rounded(random_.normal(size_t(n), 3.0f));
        const std::vector<float> up = rounded(random_.normal(size_t(n)));
        std::vector<float> expected(static_cast<size_t>(n));
        swiglu(gate.data(), up.data(), expected.data(), n);

        auto gate_gpu = on_device(to_bf16(gate));
        auto up_gpu = on_device(to_bf16(up));
        cuda::DeviceBuffer<bf16> out(static_cast<size_t>(n));
        out.fill_bytes(0xFF);
        cuda::silu_mul_bf16(gate_gpu.data(), up_gpu.data(), out.data(), n, 0);
        expect_bf16_close(to_float(out.download()), expected, "silu_mul");
    }
}

TEST_F(CudaKernels, ResidualAddRoundsTheExactSumOnce) {
    SCOPED_TRACE(random_.trace());
    const int64_t n = 576 * 5 + 3;
    const std::vector<float> x = rounded(random_.normal(size_t(n)));
    const std::vector<float> delta = rounded(random_.normal(size_t(n)));
    std::vector<float> sum = x;
    add_inplace(sum.data(), delta.data(), n);
    const std::vector<float> expected = rounded(sum);  // one rounding of the fp32 sum

    auto x_gpu = on_device(to_bf16(x));
    auto delta_gpu = on_device(to_bf16(delta));
    cuda::add_inplace_bf16(x_gpu.data(), delta_gpu.data(), n, 0);
    EXPECT_EQ(to_float(x_gpu.download()), expected);
}

TEST_F(CudaKernels, EmbeddingGatherCopiesRowsAndZeroesBadIds) {
    SCOPED_TRACE(random_.trace());
    const int64_t vocab_size = 1000, dim = 67;
    const std::vector<float> table = rounded(random_.normal(size_t(vocab_size * dim)));
    std::vector<int32_t> ids;
    for (int i = 0; i < 37; ++i) ids.push_back(int32_t(random_.integer(0, vocab_size - 1)));
    ids.push_back(-1);                   // never produced by the host, which validates ids;
    ids.push_back(int32_t(vocab_size));  // the kernel still must not read outside the table
    std::vector<float> expected;
    for (int32_t id : ids) {
        for (int64_t d = 0; d < dim; ++d) {
            expected.push_back(id >= 0 && id < vocab_size ? table[size_t(id * dim + d)] : 0.0f);
        }
    }
    auto table_gpu = on_device(to_bf16(table));
    auto ids_gpu = on_device(ids);
    cuda::DeviceBuffer<bf16> out(expected.size());
    out.fill_bytes(0xFF);
    cuda::embedding_gather_bf16(table_gpu.data(), ids_gpu.data(), out.data(), int64_t(ids.size()),
                                dim, vocab_size, 0);
    EXPECT_EQ(to_float(out.download()), expected);
}

TEST_F(CudaKernels, RopeEqualsTheCpuKernelAtLongPositions) {
    SCOPED_TRACE(random_.trace());
    // SmolLM2's heads (64 wide, all rotated) and a partial rotation (rope_dim < head_dim).
    for (const RopeParams& params : {RopeParams{64, 64, 100000.0f}, RopeParams{80, 32, 10000.0f}}) {
        const int64_t num_tokens = 9, num_heads = 3, max_positions = 8192;
        const std::vector<float> x =
            rounded(random_.normal(static_cast<size_t>(num_tokens * num_heads * params.head_dim)));
        std::vector<int64_t> positions;
        std::vector<int32_t> positions32;
        for (int64_t t = 0; t < num_tokens; ++t) {
            positions.push_back(t == 0 ? 0 : random_.integer(1, max_positions - 1));
            positions32.push_back(int32_t(positions.back()));
        }
        std::vector<float> expected = x;
        rope_apply_rows(expected.data(), positions.data(), num_tokens, num_heads, params);

        auto x_gpu = on_device(to_bf16(x));
        auto positions_gpu = on_device(positions32);
        auto table_gpu = on_device(cuda::rope_cos_sin_table(params, max_positions));
        cuda::rope_bf16(x_gpu.data(), positions_gpu.data(), table_gpu.data(), num_tokens, num_heads,
                        params, 0);
        expect_bf16_close(to_float(x_gpu.download()), expected, "rope");
    }
}

TEST_F(CudaKernels, ArgmaxPicksTheLargestLogitAndTheFirstOfTies) {
    SCOPED_TRACE(random_.trace());
    const int64_t rows = 5, vocab_size = 49152 + 3;  // SmolLM2's vocabulary and a tail
    std::vector<float> logits = random_.normal(static_cast<size_t>(rows * vocab_size), 4.0f);
    // Row 1: a tie between two maxima; row 2: the maximum in the last slot;
    // row 3: every logit -inf (a fully masked row picks index 0, as on the CPU).
    const auto at = [&](int64_t row, int64_t i) -> float& {
        return logits[size_t(row * vocab_size + i)];
    };
    at(1, 777) = at(1, 40000) = 100.0f;
    at(2, vocab_size - 1) = 100.0f;
    for (int64_t i = 0; i < vocab_size; ++i) at(3, i) = -INFINITY;
    std::vector<int32_t> expected;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits.data() + r * vocab_size;
        expected.push_back(int32_t(std::max_element(row, row + vocab_size) - row));
    }
    EXPECT_EQ(expected[1], 777);

    auto logits_gpu = on_device(logits);
    cuda::DeviceBuffer<int32_t> out(static_cast<size_t>(rows));
    out.fill_bytes(0xFF);
    cuda::argmax_rows_f32(logits_gpu.data(), out.data(), rows, vocab_size, 0);
    EXPECT_EQ(out.download(), expected);
}

// ‖gpu − cpu‖ / ‖cpu‖ over the whole output: a GEMM's single elements can
// cancel to near 0, where an elementwise relative bound means nothing.
double relative_norm_error(const std::vector<float>& gpu, const std::vector<float>& cpu) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        diff += (double(gpu[i]) - cpu[i]) * (double(gpu[i]) - cpu[i]);
        norm += double(cpu[i]) * cpu[i];
    }
    return std::sqrt(diff / norm);
}

TEST_F(CudaKernels, CublasGemmEqualsTheCpuMatmul) {
    SCOPED_TRACE(random_.trace());
    cuda::CublasHandle cublas;
    // SmolLM2's projections (576 -> 576, 576 -> 1536, 1536 -> 576), its
    // output head (576 -> 49152), and odd sizes.
    for (const auto& [tokens, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 576, 576},
                                          {7, 576, 1536},
                                          {33, 1536, 576},
                                          {3, 576, 49152},
                                          {5, 101, 77}}) {
        const std::vector<float> x = rounded(random_.normal(static_cast<size_t>(tokens * in)));
        const std::vector<float> w = rounded(random_.normal(static_cast<size_t>(out * in), 0.05f));
        std::vector<float> expected(static_cast<size_t>(tokens * out));
        matmul_plain(x.data(), w.data(), expected.data(), tokens, in, out);

        auto x_gpu = on_device(to_bf16(x));
        auto w_gpu = on_device(to_bf16(w));
        cuda::DeviceBuffer<bf16> y_bf16(expected.size());
        cuda::DeviceBuffer<float> y_f32(expected.size());
        y_bf16.fill_bytes(0xFF);
        y_f32.fill_bytes(0xFF);
        cuda::gemm_bf16(cublas, x_gpu.data(), w_gpu.data(), y_bf16.data(), tokens, in, out, 0);
        cuda::gemm_bf16_f32_out(cublas, x_gpu.data(), w_gpu.data(), y_f32.data(), tokens, in, out,
                                0);
        // bf16 output: one rounding (2^-8 relative) per element; fp32 output:
        // only the summation order differs from the CPU's.
        EXPECT_LT(relative_norm_error(to_float(y_bf16.download()), expected), 8e-3)
            << tokens << "x" << in << "x" << out;
        EXPECT_LT(relative_norm_error(y_f32.download(), expected), 1e-4)
            << tokens << "x" << in << "x" << out;
    }
}

TEST_F(CudaKernels, PagedDecodeAttentionEqualsTheCpuPagedAttention) {
    SCOPED_TRACE(random_.trace());
    struct Case {
        int64_t heads, kv_heads, head_dim, block_size;
    };
    // SmolLM2 (9:3, 64 wide), MQA (8:1, 128 wide), MHA (4:4, 80 wide); block sizes 16, 7, 1.
    for (const Case& c : {Case{9, 3, 64, 16}, Case{8, 1, 128, 7}, Case{4, 4, 80, 1}}) {
        std::vector<int32_t> lens = {1, int32_t(c.block_size), 700};
        for (int i = 0; i < 3; ++i) lens.push_back(int32_t(random_.integer(2, 400)));
        const int64_t num_seqs = int64_t(lens.size());
        int64_t max_blocks = 0, total_blocks = 0;
        for (int32_t len : lens) {
            max_blocks = std::max(max_blocks, (len + c.block_size - 1) / c.block_size);
            total_blocks += (len + c.block_size - 1) / c.block_size;
        }
        // Every sequence's blocks are scattered through the pool in random order.
        std::vector<int32_t> physical(static_cast<size_t>(total_blocks + 5));
        std::iota(physical.begin(), physical.end(), 0);
        std::shuffle(physical.begin(), physical.end(), random_.engine());
        std::vector<int32_t> tables(static_cast<size_t>(num_seqs * max_blocks), -1);
        size_t next = 0;
        for (int64_t s = 0; s < num_seqs; ++s) {
            for (int64_t b = 0; b < (lens[size_t(s)] + c.block_size - 1) / c.block_size; ++b) {
                tables[size_t(s * max_blocks + b)] = physical[next++];
            }
        }
        const size_t pool_size = physical.size() * size_t(c.block_size * c.kv_heads * c.head_dim);
        const std::vector<float> keys = rounded(random_.normal(pool_size));
        const std::vector<float> values = rounded(random_.normal(pool_size));
        const size_t q_size = size_t(num_seqs * c.heads * c.head_dim);
        const std::vector<float> q = rounded(random_.normal(q_size));

        std::vector<float> expected(q_size);
        for (int64_t s = 0; s < num_seqs; ++s) {
            const AttentionShape shape{1, lens[size_t(s)], c.heads, c.kv_heads, c.head_dim};
            const size_t offset = size_t(s * c.heads * c.head_dim);
            paged_attention(q.data() + offset, keys.data(), values.data(),
                            tables.data() + s * max_blocks, c.block_size, expected.data() + offset,
                            shape);
        }

        auto q_gpu = on_device(to_bf16(q));
        auto keys_gpu = on_device(to_bf16(keys));
        auto values_gpu = on_device(to_bf16(values));
        auto tables_gpu = on_device(tables);
        auto lens_gpu = on_device(lens);
        cuda::DeviceBuffer<bf16> out(q_size);
        out.fill_bytes(0xFF);
        const cuda::PagedDecodeShape shape{num_seqs,     c.heads,    c.kv_heads, c.head_dim,
                                           c.block_size, max_blocks, 700};
        cuda::paged_decode_attention_bf16(q_gpu.data(), keys_gpu.data(), values_gpu.data(),
                                          tables_gpu.data(), lens_gpu.data(), out.data(), shape, 0);
        expect_bf16_close(to_float(out.download()), expected, "paged decode attention");
    }
}

}  // namespace
}  // namespace servelab
#endif
