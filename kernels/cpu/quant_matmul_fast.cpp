// quant_matmul_fast.cpp — see quant_matmul_fast.h.
#include "kernels/cpu/quant_matmul_fast.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SERVELAB_X86 1
#endif

#include "kernels/cpu/dequantize.h"
#include "reference/common/error.h"

namespace servelab {
namespace {

constexpr int kBlock = 32;

float load_fp16(const uint8_t* p) {
    return fp16_to_float(uint16_t(p[0] | (p[1] << 8)));
}

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
#define SERVELAB_AVX2 __attribute__((target("avx2,fma,f16c")))

// Σ q·c of one block as 8 int32 lanes (their sum is the dot product).
SERVELAB_AVX2 inline __m256i block_code_dot_avx2(GgmlType type, const uint8_t* codes,
                                                 const int8_t* c) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    __m256i pairs;
    if (type == GgmlType::kQ8_0) {
        // maddubs multiplies unsigned by signed bytes: move w's sign onto x.
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
        pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    } else {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
        const __m128i mask = _mm_set1_epi8(0x0F);
        const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask),
                                           _mm_and_si128(bytes, mask));
        pairs = _mm256_maddubs_epi16(q, x);  // 15 · 127 · 2 fits in int16
    }
    return _mm256_madd_epi16(pairs, ones);
}

SERVELAB_AVX2 float row_dot_avx2(GgmlType type, const uint8_t* row, int64_t num_blocks,
                                 int64_t block_bytes, const int8_t* codes, const float* scales,
                                 const float* scaled_sums) {
    __m256 acc = _mm256_setzero_ps();
    float offsets = 0.0f;
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = row + b * block_bytes;
        const float d = _cvtsh_ss(uint16_t(block[0] | (block[1] << 8)));
        const uint8_t* block_codes = type == GgmlType::kQ4_1 ? block + 4 : block + 2;
        const __m256i dot = block_code_dot_avx2(type, block_codes, codes + b * kBlock);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * scales[b]), _mm256_cvtepi32_ps(dot), acc);
        if (type == GgmlType::kQ4_1) {
            offsets += _cvtsh_ss(uint16_t(block[2] | (block[3] << 8))) * scaled_sums[b];
        } else if (type == GgmlType::kQ4_0) {
            offsets -= 8.0f * d * scaled_sums[b];
        }
    }
    const __m128 pairs = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    const __m128 quads = _mm_add_ps(pairs, _mm_movehl_ps(pairs, pairs));
    return _mm_cvtss_f32(_mm_add_ss(quads, _mm_shuffle_ps(quads, quads, 1))) + offsets;
}

bool cpu_has_avx2() {
    static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                            __builtin_cpu_supports("f16c");
    return has;
}
#endif  // SERVELAB_X86

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

void quantize_activations(const float* x, int64_t num_tokens, int64_t cols,
                          QuantizedActivations& out) {
    if (cols % kBlock != 0) {
        throw Error("quantize_activations: cols must be a multiple of 32");
    }
    const int64_t blocks = num_tokens * cols / kBlock;
    out.num_tokens = num_tokens;
    out.cols = cols;
    out.codes.resize(size_t(num_tokens * cols));
    out.scales.resize(size_t(blocks));
    out.scaled_sums.resize(size_t(blocks));
    for (int64_t b = 0; b < blocks; ++b) {
        const float* values = x + b * kBlock;
        float amax = 0.0f;
        for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::abs(values[i]));
        const float d = amax / 127.0f;
        const float inverse = d > 0.0f ? 1.0f / d : 0.0f;
        int32_t code_sum = 0;
        for (int i = 0; i < kBlock; ++i) {
            const int8_t code = int8_t(std::lround(values[i] * inverse));
            out.codes[size_t(b * kBlock + i)] = code;
            code_sum += code;
        }
        out.scales[size_t(b)] = d;
        out.scaled_sums[size_t(b)] = d * float(code_sum);
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
    const bool avx2 = kernels == QuantKernels::kBest && cpu_has_avx2();
#else
    [[maybe_unused]] const bool avx2 = false;
    (void)kernels;
#endif
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
        const uint8_t* row = w.data + r * w.row_bytes;
        for (int64_t t = 0; t < x.num_tokens; ++t) {
            const int8_t* codes = x.codes.data() + t * w.cols;
            const float* scales = x.scales.data() + t * num_blocks;
            const float* sums = x.scaled_sums.data() + t * num_blocks;
#ifdef SERVELAB_X86
            if (avx2) {
                y[t * w.rows + r] =
                    row_dot_avx2(w.type, row, num_blocks, block_bytes, codes, scales, sums);
                continue;
            }
#endif
            y[t * w.rows + r] =
                row_dot_portable(w.type, row, num_blocks, block_bytes, codes, scales, sums);
        }
    }
}

}  // namespace servelab
