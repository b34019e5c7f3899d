// quant_matmul_fast.cpp — see quant_matmul_fast.h.
#include "kernels/cpu/quant_matmul_fast.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/simd.h"

namespace servelab {
namespace {

constexpr int kBlock = 32;

// The block's scale d, offset m (Q4_0: −8d, Q8_0: 0) and where its codes start.
struct BlockHeader {
    float d;
    float m;
    const uint8_t* codes;
};

BlockHeader header(GgmlType type, const uint8_t* block) {
    switch (type) {
        case GgmlType::kQ4_1:
            return {load_fp16(block), load_fp16(block + 2), block + 4};
        case GgmlType::kQ4_0: {
            const float d = load_fp16(block);
            return {d, -8.0f * d, block + 2};
        }
        default:
            return {load_fp16(block), 0.0f, block + 2};  // Q8_0
    }
}

// Σ q·c over one block, integers only.
int32_t block_code_dot_portable(GgmlType type, const uint8_t* codes, const int8_t* c) {
    int32_t sum = 0;
    if (type == GgmlType::kQ8_0) {
        for (int i = 0; i < kBlock; ++i) sum += int32_t(int8_t(codes[i])) * c[i];
        return sum;
    }
    for (int j = 0; j < 16; ++j) {
        sum += int32_t(codes[j] & 0x0F) * c[j];
        sum += int32_t(codes[j] >> 4) * c[j + 16];
    }
    return sum;
}

#ifdef SERVELAB_X86
// Each x86 kernel is compiled for the instructions it names and called only
// when the CPU has them (cpu_has_avx2 / cpu_has_avx_vnni below); the target
// attributes and the helpers they share are in kernels/cpu/simd.h.

// The block's weight codes as 32 unsigned bytes in activation order (Q4:
// low nibbles are values 0–15, high nibbles 16–31) or, for Q8_0, as signed.
template <GgmlType kType>
SERVELAB_AVX2 inline __m256i load_codes_avx2(const uint8_t* codes) {
    if constexpr (kType == GgmlType::kQ8_0) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
    } else {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
        const __m128i mask = _mm_set1_epi8(0x0F);
        return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask),
                                _mm_and_si128(bytes, mask));
    }
}

// Σ w·c of one block as 8 int32 lanes (their sum is the dot product).
// maddubs multiplies unsigned by signed bytes and adds pairs into int16
// (Q4: 15 · 127 · 2 fits); madd by ones widens the pairs to int32. VNNI's
// dpbusd does both in one instruction. Q8_0 codes are signed, so their sign
// moves onto the activations first.
template <GgmlType kType, bool kVnni>
SERVELAB_AVX_VNNI inline __m256i block_dot(__m256i w, __m256i c) {
    if constexpr (kType == GgmlType::kQ8_0) {
        c = _mm256_sign_epi8(c, w);
        w = _mm256_sign_epi8(w, w);
    }
    if constexpr (kVnni) {
        return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, c);
    } else {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(w, c), _mm256_set1_epi16(1));
    }
}

// A tile of outputs: kRows weight rows (row_bytes apart) × kTokens tokens
// (their codes cols apart). Each block of weight codes is unpacked once for
// all kTokens tokens and each block of activation codes loaded once for all
// kRows rows; every output has its own accumulator, so the kRows × kTokens
// dependency chains run side by side. y(i, t) is y[t * y_stride + i].
template <GgmlType kType, bool kVnni, int kRows, int kTokens>
SERVELAB_AVX_VNNI void tile_dot(const uint8_t* rows, int64_t row_bytes, int64_t num_blocks,
                                const int8_t* codes, const float* scales, const float* scaled_sums,
                                int64_t cols, float* y, int64_t y_stride) {
    constexpr int64_t kBlockBytes = kType == GgmlType::kQ4_1   ? 20
                                    : kType == GgmlType::kQ4_0 ? 18
                                                               : 34;
    constexpr int64_t kCodesAt = kType == GgmlType::kQ4_1 ? 4 : 2;
    __m256 acc[kRows][kTokens];
    for (int i = 0; i < kRows; ++i) {
        for (int t = 0; t < kTokens; ++t) acc[i][t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < num_blocks; ++b) {
        __m256i c[kTokens];
        for (int t = 0; t < kTokens; ++t) {
            c[t] =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + t * cols + b * kBlock));
        }
        for (int i = 0; i < kRows; ++i) {
            const uint8_t* block = rows + i * row_bytes + b * kBlockBytes;
            const float d = load_fp16_avx2(block);
            const __m256i w = load_codes_avx2<kType>(block + kCodesAt);
            for (int t = 0; t < kTokens; ++t) {
                const __m256i dot = block_dot<kType, kVnni>(w, c[t]);
                const __m256 scale = _mm256_set1_ps(d * scales[t * num_blocks + b]);
                acc[i][t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), acc[i][t]);
            }
        }
    }
    // The offset term Σ m·(d_x Σc), in its own pass: the rows are in L1 by
    // now, the main loop keeps its registers for the dots, and the
    // kRows × kTokens sums are independent chains (one chain alone would
    // wait out each add's latency).
    float offset[kRows][kTokens] = {};
    if constexpr (kType != GgmlType::kQ8_0) {
        for (int64_t b = 0; b < num_blocks; ++b) {
            for (int i = 0; i < kRows; ++i) {
                const uint8_t* block = rows + i * row_bytes + b * kBlockBytes;
                const float m = kType == GgmlType::kQ4_1 ? load_fp16_avx2(block + 2)
                                                         : -8.0f * load_fp16_avx2(block);
                for (int t = 0; t < kTokens; ++t)
                    offset[i][t] += m * scaled_sums[t * num_blocks + b];
            }
        }
    }
    for (int i = 0; i < kRows; ++i) {
        for (int t = 0; t < kTokens; ++t) {
            y[t * y_stride + i] = horizontal_sum(acc[i][t]) + offset[i][t];
        }
    }
}

SERVELAB_BEGIN_AVX512_SECTION

// AVX-512 VNNI: two blocks per instruction. Each 512-bit dpbusd multiplies
// 64 weight codes by 64 activation codes; lanes 0–7 hold block b's sums,
// lanes 8–15 block b+1's. dpbusd needs unsigned weights, so Q8_0's signed
// codes are shifted by 128 (w ^ 0x80 = w + 128) and the shift comes back
// through the offset term, as Q4_0's 8 does: Σ w·c = Σ (w+128)·c − 128·Σ c.
template <GgmlType kType>
SERVELAB_AVX512_VNNI inline __m512i load_two_blocks_512(const uint8_t* block0,
                                                        const uint8_t* block1) {
    constexpr int64_t kCodesAt = kType == GgmlType::kQ4_1 ? 4 : 2;
    if constexpr (kType == GgmlType::kQ8_0) {
        const __m512i both = _mm512_inserti64x4(
            _mm512_zextsi256_si512(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block0 + kCodesAt))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block1 + kCodesAt)), 1);
        return _mm512_xor_si512(both, _mm512_set1_epi8(char(0x80)));
    } else {
        return _mm512_inserti64x4(_mm512_zextsi256_si512(load_codes_avx2<kType>(block0 + kCodesAt)),
                                  load_codes_avx2<kType>(block1 + kCodesAt), 1);
    }
}

template <GgmlType kType, int kRows, int kTokens>
SERVELAB_AVX512_VNNI void tile_dot_512(const uint8_t* rows, int64_t row_bytes, int64_t num_blocks,
                                       const int8_t* codes, const float* scales,
                                       const float* scaled_sums, int64_t cols, float* y,
                                       int64_t y_stride) {
    constexpr int64_t kBlockBytes = kType == GgmlType::kQ4_1   ? 20
                                    : kType == GgmlType::kQ4_0 ? 18
                                                               : 34;
    __m512 acc[kRows][kTokens];
    for (int i = 0; i < kRows; ++i) {
        for (int t = 0; t < kTokens; ++t) acc[i][t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b + 2 <= num_blocks; b += 2) {
        // Each token's codes and its two block scales, once for all kRows rows.
        __m512i c[kTokens];
        __m512 token_scales[kTokens];
        for (int t = 0; t < kTokens; ++t) {
            c[t] = _mm512_loadu_si512(codes + t * cols + b * kBlock);
            const float* s = scales + t * num_blocks + b;
            token_scales[t] = _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(s[0])),
                                                 _mm256_set1_ps(s[1]), 1);
        }
        for (int i = 0; i < kRows; ++i) {
            const uint8_t* block = rows + i * row_bytes + b * kBlockBytes;
            const __m512i w = load_two_blocks_512<kType>(block, block + kBlockBytes);
            const __m512 d =
                _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(load_fp16_avx2(block))),
                                   _mm256_set1_ps(load_fp16_avx2(block + kBlockBytes)), 1);
            for (int t = 0; t < kTokens; ++t) {
                const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, c[t]);
                acc[i][t] = _mm512_fmadd_ps(_mm512_mul_ps(d, token_scales[t]),
                                            _mm512_cvtepi32_ps(dot), acc[i][t]);
            }
        }
    }
    float offset[kRows][kTokens] = {};
    for (int64_t b = 0; b < num_blocks; ++b) {
        for (int i = 0; i < kRows; ++i) {
            const uint8_t* block = rows + i * row_bytes + b * kBlockBytes;
            const float m = kType == GgmlType::kQ4_1   ? load_fp16_avx2(block + 2)
                            : kType == GgmlType::kQ4_0 ? -8.0f * load_fp16_avx2(block)
                                                       : -128.0f * load_fp16_avx2(block);
            for (int t = 0; t < kTokens; ++t) offset[i][t] += m * scaled_sums[t * num_blocks + b];
        }
    }
    for (int i = 0; i < kRows; ++i) {
        for (int t = 0; t < kTokens; ++t) {
            y[t * y_stride + i] = _mm512_reduce_add_ps(acc[i][t]) + offset[i][t];
        }
    }
}

// One run of kRows rows against every token: kTokens tokens at a time, then
// the rest one by one.
template <GgmlType kType, bool kVnni, int kRows, int kTokens>
SERVELAB_AVX_VNNI void rows_all_tokens(const QuantizedActivations& x, const QuantMatrix& w,
                                       float* y, int64_t r) {
    const int64_t num_blocks = w.cols / kBlock;
    const auto at = [&](int64_t t) { return t * num_blocks; };
    int64_t t = 0;
    for (; t + kTokens <= x.num_tokens; t += kTokens) {
        tile_dot<kType, kVnni, kRows, kTokens>(w.data + r * w.row_bytes, w.row_bytes, num_blocks,
                                               x.codes.data() + t * w.cols, x.scales.data() + at(t),
                                               x.scaled_sums.data() + at(t), w.cols,
                                               y + t * w.rows + r, w.rows);
    }
    for (; t < x.num_tokens; ++t) {
        tile_dot<kType, kVnni, kRows, 1>(w.data + r * w.row_bytes, w.row_bytes, num_blocks,
                                         x.codes.data() + t * w.cols, x.scales.data() + at(t),
                                         x.scaled_sums.data() + at(t), w.cols, y + t * w.rows + r,
                                         w.rows);
    }
}

// Rows [row_begin, row_end) for every token, four rows at a time (their
// blocks, under 1.5 KB for SmolLM2, stay in L1 across the tokens), in
// tiles of 4 rows × 2 tokens: 8 accumulators, the 4 unpacked weight blocks
// and 2 activation blocks fit AVX2's 16 vector registers.
template <GgmlType kType, bool kVnni>
SERVELAB_AVX_VNNI void rows_range(const QuantizedActivations& x, const QuantMatrix& w, float* y,
                                  int64_t row_begin, int64_t row_end) {
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) rows_all_tokens<kType, kVnni, 4, 2>(x, w, y, r);
    for (; r < row_end; ++r) rows_all_tokens<kType, kVnni, 1, 2>(x, w, y, r);
}

// The same with AVX-512 VNNI tiles (two blocks per instruction); used when
// the CPU has it and a row is an even number of blocks.
template <GgmlType kType, int kRows, int kTokens>
SERVELAB_AVX512_VNNI void rows_all_tokens_512(const QuantizedActivations& x, const QuantMatrix& w,
                                              float* y, int64_t r) {
    const int64_t num_blocks = w.cols / kBlock;
    const auto at = [&](int64_t t) { return t * num_blocks; };
    int64_t t = 0;
    for (; t + kTokens <= x.num_tokens; t += kTokens) {
        tile_dot_512<kType, kRows, kTokens>(w.data + r * w.row_bytes, w.row_bytes, num_blocks,
                                            x.codes.data() + t * w.cols, x.scales.data() + at(t),
                                            x.scaled_sums.data() + at(t), w.cols,
                                            y + t * w.rows + r, w.rows);
    }
    for (; t < x.num_tokens; ++t) {
        tile_dot_512<kType, kRows, 1>(w.data + r * w.row_bytes, w.row_bytes, num_blocks,
                                      x.codes.data() + t * w.cols, x.scales.data() + at(t),
                                      x.scaled_sums.data() + at(t), w.cols, y + t * w.rows + r,
                                      w.rows);
    }
}

// 4 rows × 4 tokens: 16 accumulators of AVX-512's 32 registers.
template <GgmlType kType>
SERVELAB_AVX512_VNNI void rows_range_512(const QuantizedActivations& x, const QuantMatrix& w,
                                         float* y, int64_t row_begin, int64_t row_end) {
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) rows_all_tokens_512<kType, 4, 4>(x, w, y, r);
    for (; r < row_end; ++r) rows_all_tokens_512<kType, 1, 4>(x, w, y, r);
}
SERVELAB_END_AVX512_SECTION

using RowsRangeKernel = void (*)(const QuantizedActivations&, const QuantMatrix&, float*, int64_t,
                                 int64_t);

template <bool kVnni>
RowsRangeKernel rows_range_for(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_1:
            return rows_range<GgmlType::kQ4_1, kVnni>;
        case GgmlType::kQ4_0:
            return rows_range<GgmlType::kQ4_0, kVnni>;
        default:
            return rows_range<GgmlType::kQ8_0, kVnni>;
    }
}

bool cpu_has_avx2() {
    return simd_level() >= SimdLevel::kAvx2;
}

RowsRangeKernel rows_range_512_for(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_1:
            return rows_range_512<GgmlType::kQ4_1>;
        case GgmlType::kQ4_0:
            return rows_range_512<GgmlType::kQ4_0>;
        default:
            return rows_range_512<GgmlType::kQ8_0>;
    }
}

bool cpu_has_avx512_vnni() {
    return simd_level() == SimdLevel::kAvx512;
}

bool cpu_has_avx_vnni() {
    static const bool has = cpuid_has_avx_vnni();
    return cpu_has_avx2() && has;
}
#endif  // SERVELAB_X86

// One block of 32 activations: d_x = max|x| / 127, codes round(x / d_x).
void quantize_block(const float* values, int8_t* codes, float* scale, float* scaled_sum) {
    float amax = 0.0f;
    for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::abs(values[i]));
    const float d = amax / 127.0f;
    const float inverse = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t code_sum = 0;
    for (int i = 0; i < kBlock; ++i) {
        const int8_t code = int8_t(std::nearbyint(values[i] * inverse));
        codes[i] = code;
        code_sum += code;
    }
    *scale = d;
    *scaled_sum = d * float(code_sum);
}

#ifdef SERVELAB_X86
SERVELAB_BEGIN_AVX512_SECTION
// The same numbers, 16 lanes at a time (cvtps rounds to nearest even, as
// nearbyint does in the default rounding mode).
SERVELAB_AVX512_VNNI void quantize_block_avx512(const float* values, int8_t* codes, float* scale,
                                                float* scaled_sum) {
    const __m512 v0 = _mm512_loadu_ps(values), v1 = _mm512_loadu_ps(values + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const __m512 inverse = _mm512_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    const __m512i c0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inverse));
    const __m512i c1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtsepi32_epi8(c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16), _mm512_cvtsepi32_epi8(c1));
    *scale = d;
    *scaled_sum = d * float(_mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1)));
}
SERVELAB_END_AVX512_SECTION
#endif

float row_dot_portable(GgmlType type, const uint8_t* row, int64_t num_blocks, int64_t block_bytes,
                       const int8_t* codes, const float* scales, const float* scaled_sums) {
    float sum = 0.0f;
    for (int64_t b = 0; b < num_blocks; ++b) {
        const BlockHeader h = header(type, row + b * block_bytes);
        const int32_t dot = block_code_dot_portable(type, h.codes, codes + b * kBlock);
        sum += h.d * scales[b] * float(dot) + h.m * scaled_sums[b];
    }
    return sum;
}

}  // namespace

void resize_activations(QuantizedActivations& out, int64_t num_tokens, int64_t cols) {
    if (cols % kBlock != 0) {
        throw Error("quantize_activations: cols must be a multiple of 32");
    }
    const int64_t blocks = num_tokens * cols / kBlock;
    out.num_tokens = num_tokens;
    out.cols = cols;
    out.codes.resize(size_t(num_tokens * cols));
    out.scales.resize(size_t(blocks));
    out.scaled_sums.resize(size_t(blocks));
}

void quantize_activation_block(const float* values, int8_t* codes, float* scale,
                               float* scaled_sum) {
#ifdef SERVELAB_X86
    if (cpu_has_avx512_vnni()) {
        quantize_block_avx512(values, codes, scale, scaled_sum);
        return;
    }
#endif
    quantize_block(values, codes, scale, scaled_sum);
}

void quantize_activations(const float* x, int64_t num_tokens, int64_t cols,
                          QuantizedActivations& out) {
    resize_activations(out, num_tokens, cols);
    const int64_t blocks = num_tokens * cols / kBlock;
#ifdef SERVELAB_X86
    const bool simd = cpu_has_avx512_vnni();
#else
    const bool simd = false;
#endif
    // A prefill step quantizes thousands of blocks: worth both cores. A
    // decode step's 18 blocks are not worth waking the other thread.
#pragma omp parallel for schedule(static) if (blocks >= 1024)
    for (int64_t b = 0; b < blocks; ++b) {
#ifdef SERVELAB_X86
        if (simd) {
            quantize_block_avx512(x + b * kBlock, out.codes.data() + b * kBlock,
                                  out.scales.data() + b, out.scaled_sums.data() + b);
            continue;
        }
#endif
        quantize_block(x + b * kBlock, out.codes.data() + b * kBlock, out.scales.data() + b,
                       out.scaled_sums.data() + b);
    }
}

bool has_fast_kernel(GgmlType type) {
    return type == GgmlType::kQ4_1 || type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0;
}

void quant_matmul_fast(const QuantizedActivations& x, const QuantMatrix& w, float* y,
                       QuantKernels kernels) {
    if (!has_fast_kernel(w.type) || x.cols != w.cols || w.cols % kBlock != 0) {
        throw Error("quant_matmul_fast: needs Q4_0, Q4_1 or Q8_0 weights as wide as x");
    }
    const int64_t num_blocks = w.cols / kBlock;
    const int64_t block_bytes = ggml_type_traits(w.type).block_bytes;
#ifdef SERVELAB_X86
    if (kernels == QuantKernels::kBest && cpu_has_avx2()) {
        // AVX-512 pays off once a tile has several tokens (1.3× at 64 on the
        // 2-core Xeon); for one token the 256-bit tiles were faster there.
        const bool wide = x.num_tokens >= 4 && num_blocks % 2 == 0 && cpu_has_avx512_vnni();
        const RowsRangeKernel kernel = wide                 ? rows_range_512_for(w.type)
                                       : cpu_has_avx_vnni() ? rows_range_for<true>(w.type)
                                                            : rows_range_for<false>(w.type);
        // Chunks of 16 rows (a multiple of the 4-row tile) in a static
        // schedule: each thread gets one contiguous run of rows.
        const int64_t num_chunks = (w.rows + 15) / 16;
#pragma omp parallel for schedule(static)
        for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
            kernel(x, w, y, chunk * 16, std::min(w.rows, chunk * 16 + 16));
        }
        return;
    }
#endif
    (void)kernels;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
        const uint8_t* row = w.data + r * w.row_bytes;
        for (int64_t t = 0; t < x.num_tokens; ++t) {
            y[t * w.rows + r] = row_dot_portable(
                w.type, row, num_blocks, block_bytes, x.codes.data() + t * w.cols,
                x.scales.data() + t * num_blocks, x.scaled_sums.data() + t * num_blocks);
        }
    }
}

}  // namespace servelab
