// quant_matmul.cpp — see quant_matmul.h.
//
// The block formats (kernels/cpu/dequantize.cpp has them byte by byte):
//   Q8_0 (34 B): fp16 d, 32 int8 q          w = d·q
//   Q4_0 (18 B): fp16 d, 16 bytes of nibbles w = d·(q − 8)
//   Q4_1 (20 B): fp16 d, fp16 m, 16 bytes    w = d·q + m
// In the 4-bit formats byte j holds weight j (low nibble) and j + 16 (high).
//
// The algebra that makes a fused kernel cheap: over one block,
//   Σ w_i·x_i = d·Σ q_i·x_i + m·Σ x_i
// so the codes q are multiplied as small numbers and the scale and offset are
// applied once per block, not once per weight (Q4_0 is the case m = −8d).
#include "kernels/cpu/quant_matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/simd.h"

namespace servelab {
namespace {

constexpr int kBlock = 32;  // weights per Q8_0 / Q4_0 / Q4_1 block
constexpr int kTile = 4;    // tokens that share one decoded block

// ---- portable kernels --------------------------------------------------------
// Each adds one block's Σ w_i·x_t[i] to acc[t] for `tokens` token rows.

// The 32 codes of a 4-bit block, in weight order.
void unpack_nibbles(const uint8_t* qs, float* codes) {
    for (int j = 0; j < 16; ++j) {
        codes[j] = float(qs[j] & 0x0F);
        codes[j + 16] = float(qs[j] >> 4);
    }
}

// d·Σ q·x + m·Σ x for each token: the shared step of Q4_0 and Q4_1.
void scaled_block_dot(const float* codes, float d, float m, const float* const* x, int tokens,
                      float* acc) {
    for (int t = 0; t < tokens; ++t) {
        float qx = 0.0f, sum_x = 0.0f;
        for (int i = 0; i < kBlock; ++i) {
            qx += codes[i] * x[t][i];
            sum_x += x[t][i];
        }
        acc[t] += d * qx + m * sum_x;
    }
}

void block_q4_0_portable(const uint8_t* block, const float* const* x, int tokens, float* acc) {
    float codes[kBlock];
    unpack_nibbles(block + 2, codes);
    const float d = load_fp16(block);
    scaled_block_dot(codes, d, -8.0f * d, x, tokens, acc);
}

void block_q4_1_portable(const uint8_t* block, const float* const* x, int tokens, float* acc) {
    float codes[kBlock];
    unpack_nibbles(block + 4, codes);
    scaled_block_dot(codes, load_fp16(block), load_fp16(block + 2), x, tokens, acc);
}

void block_q8_0_portable(const uint8_t* block, const float* const* x, int tokens, float* acc) {
    const float d = load_fp16(block);
    const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
    for (int t = 0; t < tokens; ++t) {
        float qx = 0.0f;
        for (int i = 0; i < kBlock; ++i) qx += float(qs[i]) * x[t][i];
        acc[t] += d * qx;
    }
}

using BlockKernel = void (*)(const uint8_t*, const float* const*, int, float*);

// One row against a tile of tokens: y[t] = Σ over blocks.
template <BlockKernel kernel>
void row_portable(const uint8_t* row, int64_t num_blocks, int64_t block_bytes,
                  const float* const* x, int tokens, float* out) {
    float acc[kTile] = {0, 0, 0, 0};
    const float* xb[kTile];
    for (int64_t b = 0; b < num_blocks; ++b) {
        for (int t = 0; t < tokens; ++t) xb[t] = x[t] + b * kBlock;
        kernel(row + b * block_bytes, xb, tokens, acc);
    }
    for (int t = 0; t < tokens; ++t) out[t] = acc[t];
}

#ifdef SERVELAB_X86
// ---- AVX2 + FMA kernels ------------------------------------------------------
// The same sums with 8 lanes: a block is 4 vectors of 8 weights. Per token
// the accumulator stays a vector across the whole row; one horizontal sum at
// the end of the row (SERVELAB_AVX2 and the helpers: kernels/cpu/simd.h).

// 16 bytes of nibbles → the 32 codes as 4 vectors of floats, in weight order.
SERVELAB_AVX2 inline void unpack_nibbles_avx2(const uint8_t* qs, __m256 codes[4]) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(bytes, mask);                      // weights 0..15
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);  // weights 16..31
    codes[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(low));
    codes[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(low, 8)));
    codes[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(high));
    codes[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(high, 8)));
}

SERVELAB_AVX2 inline void unpack_q8_avx2(const uint8_t* qs, __m256 codes[4]) {
    for (int k = 0; k < 4; ++k) {
        const __m128i eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * k));
        codes[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight));
    }
}

// acc[t] += d·Σ codes·x_t (+ m·Σ x_t when with_offset).
template <int kTokens, bool with_offset>
SERVELAB_AVX2 inline void accumulate_avx2(const __m256 codes[4], float d, float m,
                                          const float* const* x, int64_t offset, __m256* acc) {
    const __m256 dv = _mm256_set1_ps(d);
    const __m256 mv = _mm256_set1_ps(m);
    for (int t = 0; t < kTokens; ++t) {
        const float* xt = x[t] + offset;
        const __m256 x0 = _mm256_loadu_ps(xt), x1 = _mm256_loadu_ps(xt + 8);
        const __m256 x2 = _mm256_loadu_ps(xt + 16), x3 = _mm256_loadu_ps(xt + 24);
        __m256 qx = _mm256_mul_ps(codes[0], x0);
        qx = _mm256_fmadd_ps(codes[1], x1, qx);
        qx = _mm256_fmadd_ps(codes[2], x2, qx);
        qx = _mm256_fmadd_ps(codes[3], x3, qx);
        acc[t] = _mm256_fmadd_ps(dv, qx, acc[t]);
        if constexpr (with_offset) {
            const __m256 sum_x = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
            acc[t] = _mm256_fmadd_ps(mv, sum_x, acc[t]);
        }
    }
}

template <GgmlType type, int kTokens>
SERVELAB_AVX2 void row_avx2(const uint8_t* row, int64_t num_blocks, const float* const* x,
                            float* out) {
    __m256 acc[kTokens];
    for (int t = 0; t < kTokens; ++t) acc[t] = _mm256_setzero_ps();
    __m256 codes[4];
    for (int64_t b = 0; b < num_blocks; ++b) {
        const int64_t offset = b * kBlock;
        if constexpr (type == GgmlType::kQ4_1) {
            const uint8_t* block = row + b * 20;
            unpack_nibbles_avx2(block + 4, codes);
            accumulate_avx2<kTokens, true>(codes, load_fp16_avx2(block), load_fp16_avx2(block + 2),
                                           x, offset, acc);
        } else if constexpr (type == GgmlType::kQ4_0) {
            const uint8_t* block = row + b * 18;
            unpack_nibbles_avx2(block + 2, codes);
            const float d = load_fp16_avx2(block);
            accumulate_avx2<kTokens, true>(codes, d, -8.0f * d, x, offset, acc);
        } else {
            static_assert(type == GgmlType::kQ8_0);
            const uint8_t* block = row + b * 34;
            unpack_q8_avx2(block + 2, codes);
            accumulate_avx2<kTokens, false>(codes, load_fp16_avx2(block), 0.0f, x, offset, acc);
        }
    }
    for (int t = 0; t < kTokens; ++t) out[t] = horizontal_sum(acc[t]);
}

template <GgmlType type>
void row_avx2_tile(const uint8_t* row, int64_t num_blocks, const float* const* x, int tokens,
                   float* out) {
    switch (tokens) {
        case 1:
            return row_avx2<type, 1>(row, num_blocks, x, out);
        case 2:
            return row_avx2<type, 2>(row, num_blocks, x, out);
        case 3:
            return row_avx2<type, 3>(row, num_blocks, x, out);
        default:
            return row_avx2<type, 4>(row, num_blocks, x, out);
    }
}

bool cpu_has_avx2() {
    return simd_level() >= SimdLevel::kAvx2;
}
#endif  // SERVELAB_X86

// One row of W against a tile of up to kTile tokens, by the best kernel.
void row_tile(const QuantMatrix& w, const uint8_t* row, const float* const* x, int tokens,
              QuantKernels kernels, float* out) {
    const int64_t num_blocks = w.cols / kBlock;
#ifndef SERVELAB_X86
    (void)kernels;  // only x86-64 has more than the portable kernels so far
#else
    if (kernels == QuantKernels::kBest && cpu_has_avx2()) {
        switch (w.type) {
            case GgmlType::kQ4_1:
                return row_avx2_tile<GgmlType::kQ4_1>(row, num_blocks, x, tokens, out);
            case GgmlType::kQ4_0:
                return row_avx2_tile<GgmlType::kQ4_0>(row, num_blocks, x, tokens, out);
            case GgmlType::kQ8_0:
                return row_avx2_tile<GgmlType::kQ8_0>(row, num_blocks, x, tokens, out);
            default:
                break;
        }
    }
#endif
    switch (w.type) {
        case GgmlType::kQ4_1:
            return row_portable<block_q4_1_portable>(row, num_blocks, 20, x, tokens, out);
        case GgmlType::kQ4_0:
            return row_portable<block_q4_0_portable>(row, num_blocks, 18, x, tokens, out);
        case GgmlType::kQ8_0:
            return row_portable<block_q8_0_portable>(row, num_blocks, 34, x, tokens, out);
        default:
            break;
    }
    // Other formats (Q4_K, Q6_K, F16, ...): decode the row, then plain dots.
    // The buffer is per thread and grows once, so steady decoding allocates nothing.
    thread_local std::vector<float> decoded;
    decoded.resize(size_t(w.cols));
    dequantize_row(w.type, row, decoded.data(), w.cols);
    for (int t = 0; t < tokens; ++t) {
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < w.cols; ++c) sum += decoded[size_t(c)] * x[t][c];
        out[t] = sum;
    }
}

void check_shape(const QuantMatrix& w) {
    if (!row_is_whole_blocks(w.type, w.cols) || w.row_bytes != row_size_bytes(w.type, w.cols)) {
        throw Error("quant_matmul: a row is not a whole number of blocks of its type");
    }
}

}  // namespace

bool has_fused_kernel(GgmlType type) {
    return type == GgmlType::kQ4_1 || type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0;
}

void quant_matmul_plain(const float* x, const QuantMatrix& w, float* y, int64_t num_tokens) {
    check_shape(w);
    std::vector<float> row(size_t(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(w.type, w.data + r * w.row_bytes, row.data(), w.cols);
        for (int64_t t = 0; t < num_tokens; ++t) {
            float sum = 0.0f;
            for (int64_t c = 0; c < w.cols; ++c) sum += row[size_t(c)] * x[t * w.cols + c];
            y[t * w.rows + r] = sum;
        }
    }
}

void quant_matmul(const float* x, const QuantMatrix& w, float* y, int64_t num_tokens,
                  QuantKernels kernels) {
    check_shape(w);
    // Threads take chunks of rows. Within a chunk, each tile of kTile tokens
    // meets every row of the chunk: a decoded block is used kTile times while
    // in registers, and the chunk's rows and the tile's activations both stay
    // in L1 (16 Q4_1 rows of 576 are 5.6 KiB; 4 tokens of 576 floats 9 KiB).
    constexpr int64_t kRowChunk = 16;
#pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < w.rows; r0 += kRowChunk) {
        const int64_t r1 = std::min(r0 + kRowChunk, w.rows);
        for (int64_t t0 = 0; t0 < num_tokens; t0 += kTile) {
            const int tokens = int(std::min<int64_t>(kTile, num_tokens - t0));
            const float* x_tile[kTile];
            for (int t = 0; t < tokens; ++t) x_tile[t] = x + (t0 + t) * w.cols;
            for (int64_t r = r0; r < r1; ++r) {
                float out[kTile];
                row_tile(w, w.data + r * w.row_bytes, x_tile, tokens, kernels, out);
                for (int t = 0; t < tokens; ++t) y[(t0 + t) * w.rows + r] = out[t];
            }
        }
    }
}

}  // namespace servelab
