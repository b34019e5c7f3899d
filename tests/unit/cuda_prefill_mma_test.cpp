// cuda_prefill_mma_test.cpp — the tensor-core prefill attention against the CPU attention and
// the scalar CUDA kernel.
//
// CUDA backend (issue 48; chapter 11.5; Lab 9's GPU track grades its tile
// loop with these tests). Built only when nvcc was found; without a usable
// GPU the kernel tests report skipped (the argument checks, host code, still
// run). Inputs are fresh random bf16 values, outputs are poisoned (0xFF
// bytes: NaN in bf16) before each launch, block tables are shuffled through
// the pool. Shapes: GQA 9:3 and 6:2, MQA 8:1, MHA 4:4, heads 64 and 128
// wide, block sizes 16, 7 and 1; chunks of 1 row, of one 64-row tile, around
// the tile edges (63, 64, 65, 130 rows), after a cached prefix, and random.
//
// Tolerance, per output element, against the fp32 CPU attention:
//   |gpu − cpu| <= 2^-7 |cpu| + 2^-8 · Σ p_j |v_j| / Σ p_j + 1e-3.
// The first and last terms are every CUDA test's (cuda_test_util.h): one
// bf16 rounding of the output plus fp32 arithmetic. The middle term is the
// tensor cores': they multiply P in bf16, so each probability p_j is rounded
// (relative error <= 2^-8) before p·v, which moves the weighted mean by at
// most 2^-8 times the weighted mean of |v| (computed exactly on the CPU, as
// the attention of the same scores over |v|). q·kᵀ is exact (bf16 products
// accumulate in fp32), so nothing else is added.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/paged_prefill_attention.h"
#include "kernels/cuda/paged_prefill_attention_mma.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

using test::bf16;
using test::on_device;
using test::rounded;
using test::to_bf16;
using test::to_float;

constexpr int64_t kKeyTile = cuda::kMmaPrefillKeyTile;

// Query heads, KV heads, head width, block size.
struct MmaCase {
    int64_t heads, kv_heads, head_dim, block_size;
};

std::string describe(const MmaCase& c) {
    std::ostringstream out;
    out << c.heads << ":" << c.kv_heads << " heads " << c.head_dim << " wide, block size "
        << c.block_size;
    return out.str();
}

// One step's packed chunks over a shuffled paged pool, as the kernels take them.
struct PrefillBatch {
    MmaCase shape_case;
    std::vector<std::pair<int32_t, int32_t>> chunks;  // (q_len, context_len) per sequence
    std::vector<int32_t> query_start = {0}, context_lens;
    int64_t max_query_len = 0, max_blocks = 1;
    std::vector<int32_t> tables;  // (sequences, max_blocks), −1 past a sequence's blocks
    std::vector<float> q, keys, values;

    int64_t q_row() const { return shape_case.heads * shape_case.head_dim; }
    // Element offset of `key` of sequence `s`, KV head `kv_head`, in a pool.
    size_t pool_offset(size_t s, int64_t key, int64_t kv_head) const {
        const int64_t bs = shape_case.block_size;
        const int64_t row =
            int64_t(tables[s * size_t(max_blocks) + size_t(key / bs)]) * bs + key % bs;
        return size_t((row * shape_case.kv_heads + kv_head) * shape_case.head_dim);
    }
    cuda::PagedPrefillShape shape() const {
        return {int64_t(chunks.size()), query_start.back(),  max_query_len,
                shape_case.heads,       shape_case.kv_heads, shape_case.head_dim,
                shape_case.block_size,  max_blocks};
    }
};

PrefillBatch make_batch(test::RandomSource& random, const MmaCase& c,
                        std::vector<std::pair<int32_t, int32_t>> chunks) {
    PrefillBatch b;
    b.shape_case = c;
    b.chunks = std::move(chunks);
    int64_t total_blocks = 0;
    for (const auto& [q_len, context_len] : b.chunks) {
        b.query_start.push_back(b.query_start.back() + q_len);
        b.context_lens.push_back(context_len);
        b.max_query_len = std::max<int64_t>(b.max_query_len, q_len);
        const int64_t blocks = (context_len + c.block_size - 1) / c.block_size;
        b.max_blocks = std::max(b.max_blocks, blocks);
        total_blocks += blocks;
    }
    std::vector<int32_t> physical(size_t(total_blocks + 3));  // 3 blocks nobody owns
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), random.engine());
    b.tables.assign(b.chunks.size() * size_t(b.max_blocks), -1);
    size_t next = 0;
    for (size_t s = 0; s < b.chunks.size(); ++s) {
        const int64_t blocks = (b.context_lens[s] + c.block_size - 1) / c.block_size;
        for (int64_t i = 0; i < blocks; ++i)
            b.tables[s * size_t(b.max_blocks) + size_t(i)] = physical[next++];
    }
    const size_t pool_size = physical.size() * size_t(c.block_size * c.kv_heads * c.head_dim);
    b.keys = rounded(random.normal(pool_size));
    b.values = rounded(random.normal(pool_size));
    b.q = rounded(random.normal(size_t(b.query_start.back() * b.q_row())));
    return b;
}

// The CPU attention of every chunk over `values` (the pool's, or their
// absolute values for the tolerance's weighted mean of |v|).
std::vector<float> cpu_attention(const PrefillBatch& b, const std::vector<float>& values) {
    const MmaCase& c = b.shape_case;
    std::vector<float> out(b.q.size());
    for (size_t s = 0; s < b.chunks.size(); ++s) {
        const auto [q_len, context_len] = b.chunks[s];
        const AttentionShape shape{q_len, context_len, c.heads, c.kv_heads, c.head_dim};
        const size_t offset = size_t(b.query_start[s] * b.q_row());
        paged_attention(b.q.data() + offset, b.keys.data(), values.data(),
                        b.tables.data() + s * size_t(b.max_blocks), c.block_size,
                        out.data() + offset, shape);
    }
    return out;
}

// The kernel's output for the batch: the tensor-core one or the scalar one.
std::vector<float> gpu_attention(const PrefillBatch& b, bool tensor_cores) {
    auto q = on_device(to_bf16(b.q));
    auto keys = on_device(to_bf16(b.keys));
    auto values = on_device(to_bf16(b.values));
    auto tables = on_device(b.tables);
    auto query_start = on_device(b.query_start);
    auto context_lens = on_device(b.context_lens);
    cuda::DeviceBuffer<bf16> out(b.q.size());
    out.fill_bytes(0xFF);  // NaN: a row the kernel never writes fails
    const auto run =
        tensor_cores ? cuda::paged_prefill_attention_mma_bf16 : cuda::paged_prefill_attention_bf16;
    run(q.data(), keys.data(), values.data(), tables.data(), query_start.data(),
        context_lens.data(), out.data(), b.shape(), 0);
    return to_float(out.download());
}

// The tolerance of the header comment, element by element.
std::vector<float> tolerance(const std::vector<float>& cpu, const std::vector<float>& mean_abs_v) {
    std::vector<float> bound(cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i)
        bound[i] = 0.0078125f * std::fabs(cpu[i]) + 0.00390625f * mean_abs_v[i] + 1e-3f;
    return bound;
}

// Where output element `i` sits: "sequence s row r head h dim d".
std::string where(const PrefillBatch& b, size_t i) {
    const int64_t d = int64_t(i) % b.shape_case.head_dim;
    const int64_t head = int64_t(i) / b.shape_case.head_dim % b.shape_case.heads;
    const int64_t token = int64_t(i) / b.q_row();
    size_t s = 0;
    while (b.query_start[s + 1] <= token) ++s;
    std::ostringstream out;
    out << "sequence " << s << " (" << b.chunks[s].first << " rows, " << b.chunks[s].second
        << " keys) row " << token - b.query_start[s] << " head " << head << " dim " << d;
    return out.str();
}

// Counts the elements outside their bound; reports the first three.
size_t expect_within(const PrefillBatch& b, const std::vector<float>& got,
                     const std::vector<float>& want, const std::vector<float>& bound,
                     const std::string& what) {
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::fabs(got[i] - want[i]) <= bound[i]) continue;  // NaN fails
        if (++bad <= 3) {
            ADD_FAILURE() << what << ", " << where(b, i) << ": got " << got[i] << ", want "
                          << want[i] << " (bound " << bound[i] << ")";
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off";
    return bad;
}

class CudaPrefillMma : public test::CudaTest {};

TEST_F(CudaPrefillMma, EqualsTheCpuAttentionAndTheScalarKernel) {
    SCOPED_TRACE(random_.trace());
    const MmaCase cases[] = {{9, 3, 64, 16}, {8, 1, 128, 7}, {4, 4, 64, 1}, {6, 2, 128, 16}};
    for (const MmaCase& c : cases) {
        SCOPED_TRACE(describe(c));
        // (rows, keys): a single token; one row tile and the rows around its
        // edges; a fresh prompt over three row tiles; chunks after a cached
        // prefix (one ending exactly on a key tile); and two random chunks.
        std::vector<std::pair<int32_t, int32_t>> chunks = {
            {1, 1},     {63, 63},  {64, 64},  {65, 65},
            {130, 130}, {20, 170}, {64, 128}, {100, 100 + int32_t(random_.integer(1, 200))}};
        for (int i = 0; i < 2; ++i) {
            const auto q_len = int32_t(random_.integer(1, 150));
            chunks.push_back({q_len, q_len + int32_t(random_.integer(0, 150))});
        }
        const PrefillBatch b = make_batch(random_, c, chunks);
        const std::vector<float> want = cpu_attention(b, b.values);
        std::vector<float> abs_values(b.values.size());
        std::transform(b.values.begin(), b.values.end(), abs_values.begin(),
                       [](float v) { return std::fabs(v); });
        const std::vector<float> bound = tolerance(want, cpu_attention(b, abs_values));

        const std::vector<float> mma = gpu_attention(b, true);
        expect_within(b, mma, want, bound, "tensor-core prefill against the CPU attention");
        // The scalar kernel is within 2^-7 |cpu| + 1e-3 of the CPU, so the two
        // kernels are within the sum of both bounds of each other.
        const std::vector<float> scalar = gpu_attention(b, false);
        std::vector<float> both(bound.size());
        for (size_t i = 0; i < both.size(); ++i)
            both[i] = bound[i] + 0.0078125f * std::fabs(want[i]) + 1e-3f;
        expect_within(b, mma, scalar, both, "tensor-core prefill against the scalar CUDA kernel");
    }
}

// Later key tiles hold larger scores, so the running max grows at every
// tile. A row that fails is diagnosed: an output that is the right vector
// shrunk by a constant means the running sum kept weights of the old max.
TEST_F(CudaPrefillMma, RescalesWhenTheRunningMaxGrows) {
    SCOPED_TRACE(random_.trace());
    for (int64_t head_dim : {int64_t(64), int64_t(128)}) {
        const MmaCase c{2, 2, head_dim, 16};
        SCOPED_TRACE(describe(c));
        PrefillBatch b = make_batch(random_, c, {{1, 150}, {4, 300}, {1, 513}, {16, 200}});
        // Key j of a sequence gets its first query row's direction, weighted
        // so that its scaled score with that row grows by 3 · j / context:
        // about 3 over the context, a larger max in (nearly) every tile.
        for (size_t s = 0; s < b.chunks.size(); ++s) {
            const int32_t context_len = b.chunks[s].second;
            for (int64_t h = 0; h < c.kv_heads; ++h) {
                const float* q_row =
                    b.q.data() + size_t(b.query_start[s] * b.q_row() + h * head_dim);
                float norm_squared = 0.0f;
                for (int64_t d = 0; d < head_dim; ++d) norm_squared += q_row[d] * q_row[d];
                for (int64_t j = 0; j < context_len; ++j) {
                    // q · (weight q) / sqrt(d) = 3 j / context
                    const float weight = 3.0f * float(j) / float(context_len) *
                                         std::sqrt(float(head_dim)) / norm_squared;
                    float* key = b.keys.data() + b.pool_offset(s, j, h);
                    for (int64_t d = 0; d < head_dim; ++d) key[d] += weight * q_row[d];
                }
            }
        }
        b.keys = rounded(b.keys);
        const std::vector<float> want = cpu_attention(b, b.values);
        std::vector<float> abs_values(b.values.size());
        std::transform(b.values.begin(), b.values.end(), abs_values.begin(),
                       [](float v) { return std::fabs(v); });
        const std::vector<float> bound = tolerance(want, cpu_attention(b, abs_values));
        const std::vector<float> got = gpu_attention(b, true);

        size_t rows_shrunk = 0, rows_wrong = 0;
        for (size_t row = 0; row < got.size() / size_t(head_dim); ++row) {
            const size_t first = row * size_t(head_dim);
            bool row_ok = true;
            double dot = 0.0, want_squared = 0.0;
            for (size_t i = first; i < first + size_t(head_dim); ++i) {
                row_ok = row_ok && std::fabs(got[i] - want[i]) <= bound[i];
                dot += double(got[i]) * want[i];
                want_squared += double(want[i]) * want[i];
            }
            if (row_ok) continue;
            // got ≈ factor · want with factor < 1: the right mean, divided by too large a sum.
            const double factor = dot / want_squared;
            bool proportional = factor < 0.98;
            for (size_t i = first; i < first + size_t(head_dim); ++i)
                proportional = proportional && std::fabs(got[i] - factor * want[i]) <= 2 * bound[i];
            if (proportional && ++rows_shrunk <= 2) {
                ADD_FAILURE() << where(b, first) << ": the output is the right vector times "
                              << factor << ": the running sum (the softmax denominator) was not "
                              << "rescaled by exp(m_old - m_new) when a later key tile raised the "
                              << "running max";
            } else if (!proportional && ++rows_wrong <= 2) {
                ADD_FAILURE() << where(b, first) << ": got " << got[first] << ", want "
                              << want[first] << " at dim 0: the output accumulator was not "
                              << "rescaled by exp(m_old - m_new) when a later key tile raised the "
                              << "running max (earlier tiles keep too much weight)";
            }
        }
        EXPECT_EQ(rows_shrunk + rows_wrong, 0u)
            << rows_shrunk << " rows shrunk, " << rows_wrong << " rows wrong";
    }
}

// One row per sequence at the end of contexts around the 64-key tile: a
// row that fails is checked against the attention over only the whole
// tiles of its keys, the signature of a tile count rounded down.
TEST_F(CudaPrefillMma, KeepsTheLastPartialKeyTile) {
    SCOPED_TRACE(random_.trace());
    const MmaCase c{4, 2, 64, 16};
    const std::vector<int32_t> contexts = {1, 5, 63, 64, 65, 100, 127, 128, 129, 200};
    std::vector<std::pair<int32_t, int32_t>> chunks;
    for (int32_t n : contexts) chunks.push_back({1, n});
    const PrefillBatch b = make_batch(random_, c, chunks);
    const std::vector<float> want = cpu_attention(b, b.values);
    std::vector<float> abs_values(b.values.size());
    std::transform(b.values.begin(), b.values.end(), abs_values.begin(),
                   [](float v) { return std::fabs(v); });
    const std::vector<float> bound = tolerance(want, cpu_attention(b, abs_values));
    const std::vector<float> got = gpu_attention(b, true);

    // The same rows seeing only the first 64 · floor(n / 64) keys.
    PrefillBatch whole_tiles = b;
    for (auto& [q_len, context_len] : whole_tiles.chunks)
        context_len = std::max<int32_t>(1, context_len / int32_t(kKeyTile) * int32_t(kKeyTile));
    const std::vector<float> whole_tiles_only = cpu_attention(whole_tiles, b.values);

    const size_t row = size_t(b.q_row());
    for (size_t s = 0; s < contexts.size(); ++s) {
        const int32_t n = contexts[s];
        bool ok = true, nan = false, matches_whole_tiles = true;
        for (size_t i = s * row; i < (s + 1) * row; ++i) {
            ok = ok && std::fabs(got[i] - want[i]) <= bound[i];
            nan = nan || std::isnan(got[i]);
            matches_whole_tiles =
                matches_whole_tiles && std::fabs(got[i] - whole_tiles_only[i]) <= bound[i];
        }
        if (ok) continue;
        if (nan && n < kKeyTile) {
            ADD_FAILURE() << "a row with " << n << " keys got NaN: no key tile was loaded; the "
                          << "last, partial key tile was skipped (round the tile count up: "
                          << "ceil(num_keys / 64))";
        } else if (matches_whole_tiles && n % kKeyTile != 0) {
            ADD_FAILURE() << "a row with " << n << " keys saw only the first "
                          << n / kKeyTile * kKeyTile << ": the last, partial key tile was "
                          << "skipped (round the tile count up: ceil(num_keys / 64))";
        } else {
            ADD_FAILURE() << "a row with " << n << " keys differs from the CPU attention: got "
                          << got[s * row] << ", want " << want[s * row] << " at head 0 dim 0";
        }
    }
}

TEST(CudaPrefillMmaArguments, TakesHeads64And128WideAndRefusesOthers) {
    EXPECT_TRUE(cuda::paged_prefill_mma_supports_head_dim(64));
    EXPECT_TRUE(cuda::paged_prefill_mma_supports_head_dim(128));
    for (int64_t head_dim : {int64_t(0), int64_t(32), int64_t(80), int64_t(256)}) {
        EXPECT_FALSE(cuda::paged_prefill_mma_supports_head_dim(head_dim)) << head_dim;
        // The checks come before any CUDA call: this runs without a GPU.
        const cuda::PagedPrefillShape shape{1, 1, 1, 1, 1, head_dim, 16, 1};
        const std::string message = test::error_of([&] {
            cuda::paged_prefill_attention_mma_bf16(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                   nullptr, nullptr, shape, 0);
        });
        EXPECT_NE(message.find("head_dim " + std::to_string(head_dim)), std::string::npos)
            << message;
    }
    const cuda::PagedPrefillShape bad_groups{1, 1, 1, 6, 4, 64, 16, 1};
    EXPECT_NE(test::error_of([&] {
                  cuda::paged_prefill_attention_mma_bf16(nullptr, nullptr, nullptr, nullptr,
                                                         nullptr, nullptr, nullptr, bad_groups, 0);
              }).find("num_kv_heads must divide num_heads"),
              std::string::npos);
}

}  // namespace
}  // namespace servelab

#endif  // SERVELAB_HAVE_CUDA
