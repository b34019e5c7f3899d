// quant_matmul_repacked.cpp — see quant_matmul_repacked.h.
#include "kernels/cpu/quant_matmul_repacked.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/simd.h"

namespace servelab {
namespace {

constexpr int kBlock = 32;
constexpr int64_t kRows = kRepackRows;

// Bytes of one block of one group (16 rows), and where its parts start.
struct GroupBlockLayout {
    int64_t bytes;      // 16 × the GGUF block size
    int64_t m_at;       // Q4_1's offsets (else unused)
    int64_t codes_at;   // the code chunks
    float offset_code;  // Q4_0: −8, Q8_0: −128 (the offset as a multiple of d); Q4_1: 0
};

GroupBlockLayout layout_of(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_1:
            return {320, 32, 64, 0.0f};
        case GgmlType::kQ4_0:
            return {288, 0, 32, -8.0f};
        default:
            return {544, 0, 32, -128.0f};  // Q8_0
    }
}

// The 32 codes of one GGUF block as unsigned values (Q8_0: code + 128).
void block_codes(GgmlType type, const uint8_t* block, uint8_t codes[kBlock]) {
    if (type == GgmlType::kQ8_0) {
        for (int i = 0; i < kBlock; ++i) codes[i] = uint8_t(block[2 + i] ^ 0x80);
        return;
    }
    const uint8_t* qs = block + (type == GgmlType::kQ4_1 ? 4 : 2);
    for (int j = 0; j < 16; ++j) {
        codes[j] = qs[j] & 0x0F;
        codes[j + 16] = qs[j] >> 4;
    }
}

// The code of row r, column i (0..31) of one group block, as stored.
int32_t stored_code(GgmlType type, const uint8_t* codes, int r, int i) {
    if (type == GgmlType::kQ8_0) return codes[64 * (i / 4) + 4 * r + i % 4];
    const int j = i / 8, within = i % 8;
    const uint8_t byte = codes[64 * j + 4 * r + within % 4];
    return within < 4 ? (byte & 0x0F) : (byte >> 4);
}

// The plain loops over the repacked layout: what the SIMD kernel computes,
// lane by lane.
void rows_portable(const QuantizedActivations& x, const RepackedMatrix& w, float* y,
                   int64_t row_begin, int64_t row_end) {
    const GroupBlockLayout layout = layout_of(w.type);
    const int64_t num_blocks = w.cols / kBlock;
    for (int64_t row0 = row_begin; row0 < row_end; row0 += kRows) {
        const uint8_t* group = w.data + (row0 / kRows) * num_blocks * layout.bytes;
        for (int64_t t = 0; t < x.num_tokens; ++t) {
            const int8_t* c = x.codes.data() + t * w.cols;
            for (int r = 0; r < kRows; ++r) {
                float sum = 0.0f;
                for (int64_t b = 0; b < num_blocks; ++b) {
                    const uint8_t* gb = group + b * layout.bytes;
                    int32_t dot = 0;
                    for (int i = 0; i < kBlock; ++i) {
                        dot += stored_code(w.type, gb + layout.codes_at, r, i) * c[b * kBlock + i];
                    }
                    const float d = load_fp16(gb + 2 * r);
                    const float m = w.type == GgmlType::kQ4_1 ? load_fp16(gb + layout.m_at + 2 * r)
                                                              : layout.offset_code * d;
                    const int64_t at = t * num_blocks + b;
                    sum += d * x.scales[size_t(at)] * float(dot) + m * x.scaled_sums[size_t(at)];
                }
                y[t * w.rows + row0 + r] = sum;
            }
        }
    }
}

#ifdef SERVELAB_X86
SERVELAB_BEGIN_AVX512_SECTION

SERVELAB_AVX512_VNNI inline __m512i broadcast_quad(const int8_t* codes) {
    int32_t quad;
    std::memcpy(&quad, codes, 4);
    return _mm512_set1_epi32(quad);
}

// One group (16 rows) against kTokens tokens. The block's weight codes are
// loaded once into 8 registers (each: 16 rows × 4 codes) and used by every
// token; per token, 8 dpbusd against its activation codes broadcast four at
// a time give the 16 rows' integer dots, in two chains of 4 so that the
// adds do not wait on each other.
template <GgmlType kType, int kTokens>
SERVELAB_AVX512_VNNI void group_tile(const uint8_t* group, int64_t num_blocks, const int8_t* codes,
                                     const float* scales, const float* scaled_sums, int64_t cols,
                                     float* y, int64_t y_stride) {
    const GroupBlockLayout layout = layout_of(kType);
    __m512 acc[kTokens];
    for (int k = 0; k < kTokens; ++k) acc[k] = _mm512_setzero_ps();
    const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* gb = group + b * layout.bytes;
        const uint8_t* chunks = gb + layout.codes_at;
        __m512i w[8];  // w[k] pairs with activation codes 4k .. 4k+3
        if constexpr (kType == GgmlType::kQ8_0) {
            for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(chunks + 64 * k);
        } else {
            for (int j = 0; j < 4; ++j) {
                const __m512i raw = _mm512_loadu_si512(chunks + 64 * j);
                w[2 * j] = _mm512_and_si512(raw, low_nibbles);
                w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibbles);
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb)));
        __m512 m = _mm512_setzero_ps();
        if constexpr (kType == GgmlType::kQ4_1) {
            m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 32)));
        }
        for (int k = 0; k < kTokens; ++k) {
            const int8_t* c = codes + k * cols + b * kBlock;
            __m512i dot0 = _mm512_setzero_si512(), dot1 = _mm512_setzero_si512();
            for (int q = 0; q < 8; q += 2) {
                dot0 = _mm512_dpbusd_epi32(dot0, w[q], broadcast_quad(c + 4 * q));
                dot1 = _mm512_dpbusd_epi32(dot1, w[q + 1], broadcast_quad(c + 4 * q + 4));
            }
            const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(dot0, dot1));
            const float scale = scales[k * num_blocks + b];
            const float sum = scaled_sums[k * num_blocks + b];
            if constexpr (kType == GgmlType::kQ4_1) {
                acc[k] = _mm512_fmadd_ps(d, _mm512_mul_ps(dot, _mm512_set1_ps(scale)), acc[k]);
                acc[k] = _mm512_fmadd_ps(m, _mm512_set1_ps(sum), acc[k]);
            } else {
                // d·(d_x·dot + offset_code·d_x·Σc)
                const __m512 inner = _mm512_fmadd_ps(dot, _mm512_set1_ps(scale),
                                                     _mm512_set1_ps(layout.offset_code * sum));
                acc[k] = _mm512_fmadd_ps(d, inner, acc[k]);
            }
        }
    }
    for (int k = 0; k < kTokens; ++k) _mm512_storeu_ps(y + k * y_stride, acc[k]);
}

template <GgmlType kType>
SERVELAB_AVX512_VNNI void rows_avx512(const QuantizedActivations& x, const RepackedMatrix& w,
                                      float* y, int64_t row_begin, int64_t row_end) {
    const int64_t num_blocks = w.cols / kBlock;
    const int64_t group_bytes = num_blocks * layout_of(kType).bytes;
    // Group outside, tokens inside: a group's blocks (under 16 KB for
    // SmolLM2) stay in L1 while every token tile passes over them, and the
    // step's activation codes (T × cols bytes) stay in L2.
    for (int64_t row0 = row_begin; row0 < row_end; row0 += kRows) {
        const uint8_t* group = w.data + (row0 / kRows) * group_bytes;
        int64_t t = 0;
        const auto tile = [&](auto tokens_constant) {
            constexpr int kTokens = decltype(tokens_constant)::value;
            group_tile<kType, kTokens>(
                group, num_blocks, x.codes.data() + t * w.cols, x.scales.data() + t * num_blocks,
                x.scaled_sums.data() + t * num_blocks, w.cols, y + t * w.rows + row0, w.rows);
            t += kTokens;
        };
        while (t + 8 <= x.num_tokens) tile(std::integral_constant<int, 8>{});
        if (t + 4 <= x.num_tokens) tile(std::integral_constant<int, 4>{});
        if (t + 2 <= x.num_tokens) tile(std::integral_constant<int, 2>{});
        if (t < x.num_tokens) tile(std::integral_constant<int, 1>{});
    }
}
SERVELAB_END_AVX512_SECTION
#endif  // SERVELAB_X86

}  // namespace

bool can_repack(GgmlType type, int64_t rows, int64_t cols) {
    const bool has_layout =
        type == GgmlType::kQ4_1 || type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0;
    return has_layout && rows > 0 && rows % kRows == 0 && cols > 0 && cols % kBlock == 0;
}

bool cpu_runs_repacked() {
    return simd_level() == SimdLevel::kAvx512;
}

std::vector<uint8_t> repack_rows(const QuantMatrix& w) {
    if (!can_repack(w.type, w.rows, w.cols) || w.row_bytes != row_size_bytes(w.type, w.cols)) {
        throw Error("repack_rows: needs Q4_0, Q4_1 or Q8_0 rows, 16 at a time, of whole blocks");
    }
    const GroupBlockLayout layout = layout_of(w.type);
    const int64_t block_bytes = ggml_type_traits(w.type).block_bytes;
    const int64_t num_blocks = w.cols / kBlock;
    std::vector<uint8_t> out(size_t(w.rows / kRows * num_blocks * layout.bytes));
    // Groups are independent: a load-time pass over every weight, so both cores.
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < w.rows / kRows; ++g) {
        uint8_t codes[kBlock];
        for (int64_t b = 0; b < num_blocks; ++b) {
            uint8_t* gb = out.data() + (g * num_blocks + b) * layout.bytes;
            uint8_t* chunks = gb + layout.codes_at;
            for (int r = 0; r < kRows; ++r) {
                const uint8_t* block = w.data + (g * kRows + r) * w.row_bytes + b * block_bytes;
                std::memcpy(gb + 2 * r, block, 2);  // d
                if (w.type == GgmlType::kQ4_1) std::memcpy(gb + layout.m_at + 2 * r, block + 2, 2);
                block_codes(w.type, block, codes);
                if (w.type == GgmlType::kQ8_0) {
                    for (int i = 0; i < kBlock; ++i)
                        chunks[64 * (i / 4) + 4 * r + i % 4] = codes[i];
                } else {
                    for (int j = 0; j < 4; ++j) {
                        for (int i = 0; i < 4; ++i) {
                            chunks[64 * j + 4 * r + i] =
                                uint8_t(codes[8 * j + i] | (codes[8 * j + 4 + i] << 4));
                        }
                    }
                }
            }
        }
    }
    return out;
}

void quant_matmul_repacked_rows(const QuantizedActivations& x, const RepackedMatrix& w, float* y,
                                int64_t row_begin, int64_t row_end, bool portable) {
    if (!can_repack(w.type, w.rows, w.cols) || x.cols != w.cols || row_begin % kRows != 0 ||
        row_end % kRows != 0 || row_begin < 0 || row_end > w.rows) {
        throw Error(
            "quant_matmul_repacked: rows must be whole groups of a repacked matrix as wide as x");
    }
#ifdef SERVELAB_X86
    if (!portable && cpu_runs_repacked()) {
        switch (w.type) {
            case GgmlType::kQ4_1:
                return rows_avx512<GgmlType::kQ4_1>(x, w, y, row_begin, row_end);
            case GgmlType::kQ4_0:
                return rows_avx512<GgmlType::kQ4_0>(x, w, y, row_begin, row_end);
            default:
                return rows_avx512<GgmlType::kQ8_0>(x, w, y, row_begin, row_end);
        }
    }
#endif
    rows_portable(x, w, y, row_begin, row_end);
}

void quant_matmul_repacked(const QuantizedActivations& x, const RepackedMatrix& w, float* y) {
    // Checked here, not inside the region: an exception must not leave it.
    if (!can_repack(w.type, w.rows, w.cols) || x.cols != w.cols) {
        throw Error("quant_matmul_repacked: needs a repacked matrix as wide as x");
    }
    const int64_t num_groups = w.rows / kRows;
#pragma omp parallel if (num_groups > 1)
    {
        // One contiguous run of groups per thread: each streams its own part
        // of the matrix front to back.
        const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t first = num_groups * me / threads, last = num_groups * (me + 1) / threads;
        if (first < last) quant_matmul_repacked_rows(x, w, y, first * kRows, last * kRows);
    }
}

}  // namespace servelab
