// gemv_steps.cpp — Lab 8's GEMV steps (see gemv_steps.h for the plan).
//
// The Q4_1 block (kernels/cpu/dequantize.cpp has it byte by byte):
//   bytes 0-1  fp16 d     bytes 2-3  fp16 m     bytes 4-19  codes
// byte 4 + j holds code j in its low nibble and code j + 16 in its high one,
// and weight i is d·q_i + m. Rows are stored back to back, w.row_bytes apart.
#include "kernels/cpu/gemv_steps.h"

#include <omp.h>

#include <algorithm>
#include <string>

#include "kernels/common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/simd.h"

namespace servelab {
namespace {

constexpr int kBlock = 32;           // weights per Q4_1 block
constexpr int64_t kBlockBytes = 20;  // 2 (d) + 2 (m) + 16 (codes)
constexpr int kRowsPerPass = 4;      // rows that share each x load (steps 1, 2, 4)

// A 4-bit code as a float by a table load, cheaper than an int-to-float conversion.
constexpr float kCodeValue[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

void check_q4_1(const QuantMatrix& w, const char* step) {
    if (w.type != GgmlType::kQ4_1 || !row_is_whole_blocks(w.type, w.cols) ||
        w.row_bytes != row_size_bytes(w.type, w.cols)) {
        throw Error(std::string(step) + ": needs a Q4_1 matrix whose rows are whole blocks");
    }
}

// One row by the block algebra: Σ over blocks of d·Σ q·x + m·Σ x.
float row_block_algebra(const float* x, const uint8_t* row, int64_t num_blocks) {
    // BEGIN SOLUTION lab08 (gemv_step1_unrolled)
    // HINT: per block, Σ w·x = d·Σ q·x + m·Σ x: multiply the small integer codes q by x
    // HINT: and apply d and m once per block instead of decoding every weight.
    float acc = 0.0f;
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = row + b * kBlockBytes;
        const float* xb = x + b * kBlock;
        float qx = 0.0f, sum_x = 0.0f;
        for (int j = 0; j < 16; ++j) {
            qx += float(block[4 + j] & 0x0F) * xb[j] + float(block[4 + j] >> 4) * xb[j + 16];
            sum_x += xb[j] + xb[j + 16];
        }
        acc += load_fp16(block) * qx + load_fp16(block + 2) * sum_x;
    }
    return acc;
    // END SOLUTION
}

// Step 1's loop over rows [r0, r1): four rows per pass, then the rest one by one.
void rows_unrolled(const float* x, const QuantMatrix& w, int64_t r0, int64_t r1, float* y) {
    // BEGIN SOLUTION lab08 (gemv_step1_unrolled)
    // HINT: one row's sums form one long chain of dependent adds: each waits for the last.
    // HINT: Write the pass over four rows out by hand, with four accumulators (qx0..qx3,
    // HINT: acc0..acc3) in plain local variables, so one load of x[j] feeds four independent
    // HINT: chains; the rows left over (fewer than four) go through row_block_algebra.
    // HINT: kCodeValue[q] turns a code into a float by a load, cheaper than a conversion.
    const int64_t num_blocks = w.cols / kBlock;
    int64_t r = r0;
    for (; r + kRowsPerPass <= r1; r += kRowsPerPass) {
        const uint8_t* row0 = w.data + r * w.row_bytes;
        const uint8_t* row1 = row0 + w.row_bytes;
        const uint8_t* row2 = row1 + w.row_bytes;
        const uint8_t* row3 = row2 + w.row_bytes;
        float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
        for (int64_t b = 0; b < num_blocks; ++b) {
            const int64_t at = b * kBlockBytes;
            const uint8_t *q0 = row0 + at + 4, *q1 = row1 + at + 4;
            const uint8_t *q2 = row2 + at + 4, *q3 = row3 + at + 4;
            const float* xb = x + b * kBlock;
            float qx0 = 0.0f, qx1 = 0.0f, qx2 = 0.0f, qx3 = 0.0f;
            float sum_low = 0.0f, sum_high = 0.0f;
            for (int j = 0; j < 16; ++j) {
                const float x_low = xb[j], x_high = xb[j + 16];
                sum_low += x_low;
                sum_high += x_high;
                qx0 += kCodeValue[q0[j] & 0x0F] * x_low + kCodeValue[q0[j] >> 4] * x_high;
                qx1 += kCodeValue[q1[j] & 0x0F] * x_low + kCodeValue[q1[j] >> 4] * x_high;
                qx2 += kCodeValue[q2[j] & 0x0F] * x_low + kCodeValue[q2[j] >> 4] * x_high;
                qx3 += kCodeValue[q3[j] & 0x0F] * x_low + kCodeValue[q3[j] >> 4] * x_high;
            }
            const float sum_x = sum_low + sum_high;
            acc0 += load_fp16(row0 + at) * qx0 + load_fp16(row0 + at + 2) * sum_x;
            acc1 += load_fp16(row1 + at) * qx1 + load_fp16(row1 + at + 2) * sum_x;
            acc2 += load_fp16(row2 + at) * qx2 + load_fp16(row2 + at + 2) * sum_x;
            acc3 += load_fp16(row3 + at) * qx3 + load_fp16(row3 + at + 2) * sum_x;
        }
        y[r] = acc0, y[r + 1] = acc1, y[r + 2] = acc2, y[r + 3] = acc3;
    }
    for (; r < r1; ++r) y[r] = row_block_algebra(x, w.data + r * w.row_bytes, num_blocks);
    // END SOLUTION
}

#ifdef SERVELAB_X86
// ---- AVX2 + FMA (steps 3 and 4) ---------------------------------------------
// Functions compiled for AVX2 whatever the build's -march (SERVELAB_AVX2,
// kernels/cpu/simd.h, which also has horizontal_sum and load_fp16_avx2);
// they may run only after cpu_has_avx2() said yes.

bool cpu_has_avx2() {
    static const bool has =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_has_f16c();
    return has;
}

// The 16 code bytes of a block → its 32 codes as four vectors of 8 floats, in
// weight order (codes[0] = q0..q7, codes[1] = q8..q15, codes[2] = q16..q23, ...).
SERVELAB_AVX2 inline void unpack_codes_avx2(const uint8_t* qs, __m256 codes[4]) {
    // BEGIN SOLUTION lab08 (gemv_step3_simd)
    // HINT: load the 16 bytes (_mm_loadu_si128); the low nibbles are bytes & 0x0F, the high
    // HINT: ones (bytes >> 4) & 0x0F (_mm_srli_epi16 shifts 16-bit lanes, hence the mask);
    // HINT: widen 8 bytes at a time to 8 int32 (_mm256_cvtepu8_epi32), then to float.
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(bytes, mask);                      // codes 0..15
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);  // codes 16..31
    codes[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(low));
    codes[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(low, 8)));
    codes[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(high));
    codes[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(high, 8)));
    // END SOLUTION
}

// Step 3: rows [r0, r1), one row at a time, 8 lanes at a time.
SERVELAB_AVX2 void rows_simd(const float* x, const QuantMatrix& w, int64_t r0, int64_t r1,
                             float* y) {
    // BEGIN SOLUTION lab08 (gemv_step3_simd)
    // HINT: keep one __m256 accumulator per row across all its blocks and sum its 8 lanes
    // HINT: once at the end (horizontal_sum). Per block: codes from unpack_codes_avx2, x as
    // HINT: four _mm256_loadu_ps, qx = Σ codes·x with _mm256_fmadd_ps, then
    // HINT: acc += d·qx + m·(x0 + x1 + x2 + x3) (the lanes of that vector sum to Σ x).
    // HINT: Read d and m with load_fp16_avx2: load_fp16 is a function call, too slow here.
    const int64_t num_blocks = w.cols / kBlock;
    __m256 codes[4];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = w.data + r * w.row_bytes;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < num_blocks; ++b) {
            const uint8_t* block = row + b * kBlockBytes;
            const float* xb = x + b * kBlock;
            unpack_codes_avx2(block + 4, codes);
            const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
            const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
            __m256 qx = _mm256_mul_ps(codes[0], x0);
            qx = _mm256_fmadd_ps(codes[1], x1, qx);
            qx = _mm256_fmadd_ps(codes[2], x2, qx);
            qx = _mm256_fmadd_ps(codes[3], x3, qx);
            const __m256 sum_x = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(load_fp16_avx2(block)), qx, acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(load_fp16_avx2(block + 2)), sum_x, acc);
        }
        y[r] = horizontal_sum(acc);
    }
    // END SOLUTION
}

// Step 4's pass: kRows consecutive rows starting at `row` (w.row_bytes apart),
// each block of x loaded once for all of them; writes their kRows outputs.
template <int kRows>
SERVELAB_AVX2 void pass_blocked(const float* x, const uint8_t* row, int64_t row_bytes,
                                int64_t num_blocks, float* out) {
    // BEGIN SOLUTION lab08 (gemv_step4_blocked)
    // HINT: as rows_simd, but kRows accumulators: per block load x (four vectors) and
    // HINT: their sum once, then for each of the kRows rows unpack its codes and update
    // HINT: its accumulator. kRows is a constant: the compiler keeps them all in registers.
    __m256 acc[kRows];
    for (int k = 0; k < kRows; ++k) acc[k] = _mm256_setzero_ps();
    __m256 codes[4];
    for (int64_t b = 0; b < num_blocks; ++b) {
        const float* xb = x + b * kBlock;
        const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
        const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
        const __m256 sum_x = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
        for (int k = 0; k < kRows; ++k) {
            const uint8_t* block = row + k * row_bytes + b * kBlockBytes;
            unpack_codes_avx2(block + 4, codes);
            __m256 qx = _mm256_mul_ps(codes[0], x0);
            qx = _mm256_fmadd_ps(codes[1], x1, qx);
            qx = _mm256_fmadd_ps(codes[2], x2, qx);
            qx = _mm256_fmadd_ps(codes[3], x3, qx);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(load_fp16_avx2(block)), qx, acc[k]);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(load_fp16_avx2(block + 2)), sum_x, acc[k]);
        }
    }
    for (int k = 0; k < kRows; ++k) out[k] = horizontal_sum(acc[k]);
    // END SOLUTION
}

// Rows [r0, r1) in passes of kRowsPerPass, the last pass shorter if need be.
SERVELAB_AVX2 void rows_blocked(const float* x, const QuantMatrix& w, int64_t r0, int64_t r1,
                                float* y) {
    const int64_t num_blocks = w.cols / kBlock;
    for (int64_t r = r0; r < r1; r += kRowsPerPass) {
        const uint8_t* row = w.data + r * w.row_bytes;
        switch (std::min<int64_t>(kRowsPerPass, r1 - r)) {
            case 1:
                pass_blocked<1>(x, row, w.row_bytes, num_blocks, y + r);
                break;
            case 2:
                pass_blocked<2>(x, row, w.row_bytes, num_blocks, y + r);
                break;
            case 3:
                pass_blocked<3>(x, row, w.row_bytes, num_blocks, y + r);
                break;
            default:
                pass_blocked<kRowsPerPass>(x, row, w.row_bytes, num_blocks, y + r);
                break;
        }
    }
}
#endif  // SERVELAB_X86

}  // namespace

void gemv_step0_scalar(const float* x, const QuantMatrix& w, float* y) {
    check_q4_1(w, "gemv_step0_scalar");
    const int64_t num_blocks = w.cols / kBlock;
    for (int64_t r = 0; r < w.rows; ++r) {
        const uint8_t* row = w.data + r * w.row_bytes;
        float sum = 0.0f;
        for (int64_t b = 0; b < num_blocks; ++b) {
            const uint8_t* block = row + b * kBlockBytes;
            const float d = load_fp16(block), m = load_fp16(block + 2);
            float weights[kBlock];  // the block decoded: weight i = d·q_i + m
            for (int j = 0; j < 16; ++j) {
                weights[j] = d * float(block[4 + j] & 0x0F) + m;
                weights[j + 16] = d * float(block[4 + j] >> 4) + m;
            }
            for (int i = 0; i < kBlock; ++i) sum += weights[i] * x[b * kBlock + i];
        }
        y[r] = sum;
    }
}

void gemv_step1_unrolled(const float* x, const QuantMatrix& w, float* y) {
    check_q4_1(w, "gemv_step1_unrolled");
    rows_unrolled(x, w, 0, w.rows, y);
}

void gemv_step2_threads(const float* x, const QuantMatrix& w, float* y) {
    check_q4_1(w, "gemv_step2_threads");
    // BEGIN SOLUTION lab08
    // HINT: rows are independent: let an OpenMP loop (#pragma omp parallel for) hand each
    // HINT: thread whole passes of kRowsPerPass rows, and run rows_unrolled on each pass.
    const int64_t passes = (w.rows + kRowsPerPass - 1) / kRowsPerPass;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < passes; ++p) {
        const int64_t r0 = p * kRowsPerPass;
        rows_unrolled(x, w, r0, std::min(r0 + kRowsPerPass, w.rows), y);
    }
    // END SOLUTION
}

void gemv_step3_simd(const float* x, const QuantMatrix& w, float* y) {
    check_q4_1(w, "gemv_step3_simd");
#ifdef SERVELAB_X86
    if (cpu_has_avx2()) return rows_simd(x, w, 0, w.rows, y);
#endif
    rows_unrolled(x, w, 0, w.rows, y);  // no AVX2 here: step 1 stands in
}

void gemv_step4_blocked(const float* x, const QuantMatrix& w, float* y) {
    check_q4_1(w, "gemv_step4_blocked");
#ifdef SERVELAB_X86
    if (cpu_has_avx2()) {
        // BEGIN SOLUTION lab08
        // HINT: give each thread one contiguous chunk of rows (a whole number of passes:
        // HINT: omp_get_thread_num / omp_get_num_threads inside #pragma omp parallel) and
        // HINT: let rows_blocked stream through it: each thread then reads one sequential
        // HINT: run of memory, which the hardware prefetcher follows. Every row, the last
        // HINT: partial pass included, must be computed by exactly one thread.
        const int64_t passes = (w.rows + kRowsPerPass - 1) / kRowsPerPass;
#pragma omp parallel
        {
            const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
            const int64_t r0 = passes * t / threads * kRowsPerPass;
            const int64_t r1 = std::min(passes * (t + 1) / threads * kRowsPerPass, w.rows);
            if (r0 < r1) rows_blocked(x, w, r0, r1, y);
        }
        return;
        // END SOLUTION
    }
#endif
    gemv_step2_threads(x, w, y);  // no AVX2 here: step 2 stands in
}

}  // namespace servelab
