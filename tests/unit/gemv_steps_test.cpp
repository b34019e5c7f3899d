// gemv_steps_test.cpp — Lab 8: every GEMV step against quant_matmul_plain.
//
// Fresh random Q4_1 matrices each run (random fp16 d and m, random codes),
// odd row counts (a last pass of fewer than four rows, thread chunks that do
// not divide evenly), outputs poisoned with NaN so that a row nobody writes
// fails. Tolerance: |y - y_plain| ≤ 1e-4 · Σ_c |w_rc · x_c| per row, a bound
// that summation order can not reach and a wrong weight always does.
#include "kernels/cpu/gemv_steps.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "tests/unit/quant_test_util.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using GemvStep = void (*)(const float*, const QuantMatrix&, float*);

using test::random_q4_1;
using test::RandomQ4_1;

// Σ_c |w_rc · x_c| for each row: the scale of that row's rounding error.
std::vector<double> magnitudes(const QuantMatrix& w, const std::vector<float>& x) {
    std::vector<double> out(size_t(w.rows));
    std::vector<float> row(size_t(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(w.type, w.data + r * w.row_bytes, row.data(), w.cols);
        for (int64_t c = 0; c < w.cols; ++c)
            out[size_t(r)] += std::abs(double(row[size_t(c)]) * x[size_t(c)]);
    }
    return out;
}

float fp16_at(const uint8_t* bytes) {
    return fp16_to_float(uint16_t(bytes[0] | bytes[1] << 8));
}

// A GEMV that reads the codes another way: code_low(block, j) and
// code_high(block, j) multiply x at index_low(j) and index_high(j). With the
// right reading (low nibble of byte j: x[j]; high nibble: x[j + 16]) it is
// the plain GEMV; the others are what common mistakes compute.
struct CodeReading {
    int (*code_low)(const uint8_t* codes, int j);
    int (*code_high)(const uint8_t* codes, int j);
    int (*index_low)(int j);
    int (*index_high)(int j);
};

std::vector<float> gemv_reading(const QuantMatrix& w, const std::vector<float>& x,
                                const CodeReading& reading) {
    std::vector<float> y(size_t(w.rows));
    for (int64_t r = 0; r < w.rows; ++r) {
        double acc = 0;
        for (int64_t b = 0; b < w.cols / 32; ++b) {
            const uint8_t* block = w.data + r * w.row_bytes + b * 20;
            const float* xb = x.data() + b * 32;
            double qx = 0, sum_x = 0;
            for (int j = 0; j < 16; ++j) {
                qx += reading.code_low(block + 4, j) * double(xb[reading.index_low(j)]) +
                      reading.code_high(block + 4, j) * double(xb[reading.index_high(j)]);
                sum_x += double(xb[j]) + xb[j + 16];
            }
            acc += fp16_at(block) * qx + fp16_at(block + 2) * sum_x;
        }
        y[size_t(r)] = float(acc);
    }
    return y;
}

int low_nibble(const uint8_t* q, int j) {
    return q[j] & 0x0F;
}
int high_nibble(const uint8_t* q, int j) {
    return q[j] >> 4;
}
// _mm_srli_epi16 shifts 16-bit lanes: without a mask, the byte 2k keeps the
// low nibble of byte 2k + 1 in its upper four bits.
int high_nibble_unmasked(const uint8_t* q, int j) {
    return j % 2 == 0 ? (q[j] >> 4) | ((q[j + 1] & 0x0F) << 4) : q[j] >> 4;
}
int same_index(int j) {
    return j;
}
int plus_16(int j) {
    return j + 16;
}
int even_index(int j) {
    return 2 * j;
}
int odd_index(int j) {
    return 2 * j + 1;
}

// Which of the usual mistakes `y` matches, if one does.
std::string diagnose(const QuantMatrix& w, const std::vector<float>& x, const std::vector<float>& y,
                     const std::vector<double>& scale) {
    const auto matches = [&](const std::vector<float>& alternative) {
        for (size_t r = 0; r < y.size(); ++r) {
            if (!(std::abs(double(y[r]) - alternative[r]) <= 1e-4 * scale[r] + 1e-6)) return false;
        }
        return true;
    };
    if (matches(gemv_reading(w, x, {low_nibble, high_nibble, even_index, odd_index}))) {
        return "code j's nibbles were paired with x[2j] and x[2j+1]; in Q4_1 byte j holds code j "
               "(its low nibble) and code j + 16 (its high nibble), which multiply x[j] and "
               "x[j + 16]";
    }
    if (matches(gemv_reading(w, x, {low_nibble, high_nibble_unmasked, same_index, plus_16}))) {
        return "the high codes of the even bytes carry the next byte's low nibble: "
               "_mm_srli_epi16 shifts 16-bit lanes, so mask the shifted bytes with 0x0F";
    }
    std::vector<int64_t> unwritten;
    for (size_t r = 0; r < y.size(); ++r) {
        if (std::isnan(y[r])) unwritten.push_back(int64_t(r));
    }
    const int64_t rows = int64_t(y.size()), full = rows / 4 * 4;
    if (!unwritten.empty() && full < rows && unwritten.front() == full &&
        unwritten.size() == size_t(rows - full)) {
        return "rows " + std::to_string(full) + ".." + std::to_string(rows - 1) + " of " +
               std::to_string(rows) +
               ", the last partial pass (fewer than 4 rows), were never "
               "written: there are ceil(rows / kRowsPerPass) passes, and the last one ends at rows";
    }
    if (!unwritten.empty()) {
        return std::to_string(unwritten.size()) +
               " rows were never written (still NaN), the "
               "first " +
               std::to_string(unwritten.front()) +
               ": every row must be computed by "
               "exactly one pass";
    }
    return "";
}

// `step` against quant_matmul_plain on random matrices of these shapes.
void expect_matches_plain(GemvStep step, const std::vector<int64_t>& row_counts,
                          const std::vector<int64_t>& col_counts, uint64_t salt) {
    test::RandomSource random(salt);
    SCOPED_TRACE(random.trace());
    for (int64_t rows : row_counts) {
        for (int64_t cols : col_counts) {
            SCOPED_TRACE("rows " + std::to_string(rows) + ", cols " + std::to_string(cols));
            const RandomQ4_1 w = random_q4_1(random, rows, cols, 1e-3f);
            const std::vector<float> x = random.normal(size_t(cols));
            std::vector<float> expected(static_cast<size_t>(rows));
            quant_matmul_plain(x.data(), w.view, expected.data(), 1);
            std::vector<float> y(size_t(rows), std::numeric_limits<float>::quiet_NaN());
            step(x.data(), w.view, y.data());
            const std::vector<double> scale = magnitudes(w.view, x);
            int reported = 0;
            for (int64_t r = 0; r < rows; ++r) {
                const double error = std::abs(double(y[size_t(r)]) - expected[size_t(r)]);
                const bool ok = error <= 1e-4 * scale[size_t(r)] + 1e-6;  // false for NaN
                if (!ok && reported++ < 5) {
                    ADD_FAILURE() << "row " << r << ": got " << y[size_t(r)] << ", expected "
                                  << expected[size_t(r)] << " (Σ|w·x| = " << scale[size_t(r)]
                                  << ")";
                }
            }
            if (reported > 0) {  // one failing shape tells enough
                const std::string why = diagnose(w.view, x, y, scale);
                if (!why.empty()) ADD_FAILURE() << why;
                return;
            }
        }
    }
}

// x, the matrix and y end at an inaccessible page: a loop that reads a row
// (or a block, or an x element) too many, or writes y[rows], stops the test
// with SIGSEGV. 7 rows: a last pass of 3.
void expect_stays_inside_its_arrays(GemvStep step, int threads) {
    test::RandomSource random(7);
    SCOPED_TRACE(random.trace());
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const int64_t rows = 7, cols = 64;
    const RandomQ4_1 w = random_q4_1(random, rows, cols, 1e-3f);
    test::GuardedArray<uint8_t> bytes(w.bytes);
    const QuantMatrix view{GgmlType::kQ4_1, bytes.data(), rows, cols, w.view.row_bytes};
    test::GuardedArray<float> x(random.normal(size_t(cols))), y(static_cast<size_t>(rows));
    step(x.data(), view, y.data());
    std::vector<float> expected(static_cast<size_t>(rows));
    quant_matmul_plain(x.data(), view, expected.data(), 1);
    const std::vector<double> scale = magnitudes(view, x.to_vector());
    for (int64_t r = 0; r < rows; ++r) {
        EXPECT_LE(std::abs(double(y[size_t(r)]) - expected[size_t(r)]),
                  1e-4 * scale[size_t(r)] + 1e-6)
            << "row " << r;
    }
    omp_set_num_threads(saved);
}

const std::vector<int64_t> kRowCounts = {1, 3, 17, 577};
const std::vector<int64_t> kColCounts = {32, 64, 576, 1536, 2048};

// Each thread count in turn (tests run with OMP_NUM_THREADS=1 otherwise).
void expect_matches_plain_threaded(GemvStep step, uint64_t salt) {
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2, 3, 4, 7}) {
        SCOPED_TRACE(std::to_string(threads) + " threads");
        omp_set_num_threads(threads);
        expect_matches_plain(step, {1, 3, 5, 17, 30, 577}, {32, 576}, salt + uint64_t(threads));
    }
    omp_set_num_threads(saved);
}

// Also the random cols a multiple of 32 in [32, 2048].
std::vector<int64_t> with_random_cols(uint64_t salt) {
    test::RandomSource random(salt);
    std::vector<int64_t> cols = kColCounts;
    cols.push_back(32 * random.integer(1, 64));
    return cols;
}

// Step 0 is given: it checks the harness (not graded).
TEST(GemvStep0Scalar, MatchesPlain) {
    expect_matches_plain(gemv_step0_scalar, kRowCounts, with_random_cols(100), 0);
}

TEST(GemvStepsShape, RejectsOtherTypes) {
    std::vector<uint8_t> bytes(34 * 2);
    const QuantMatrix q8{GgmlType::kQ8_0, bytes.data(), 1, 64, 68};
    std::vector<float> x(64), y(1);
    for (GemvStep step : {gemv_step0_scalar, gemv_step1_unrolled, gemv_step2_threads,
                          gemv_step3_simd, gemv_step4_blocked}) {
        EXPECT_THROW(step(x.data(), q8, y.data()), Error);
    }
}

TEST(GemvStep1Unrolled, MatchesPlain) {
    expect_matches_plain(gemv_step1_unrolled, kRowCounts, with_random_cols(101), 1);
}

TEST(GemvStep1Unrolled, StaysInsideItsArrays) {
    expect_stays_inside_its_arrays(gemv_step1_unrolled, 1);
}

TEST(GemvStep2Threads, MatchesPlain) {
    expect_matches_plain(gemv_step2_threads, kRowCounts, with_random_cols(102), 2);
}

TEST(GemvStep2Threads, MatchesPlainForAnyThreadCount) {
    expect_matches_plain_threaded(gemv_step2_threads, 20);
}

TEST(GemvStep2Threads, StaysInsideItsArrays) {
    expect_stays_inside_its_arrays(gemv_step2_threads, 2);
}

TEST(GemvStep3Simd, MatchesPlain) {
    expect_matches_plain(gemv_step3_simd, kRowCounts, with_random_cols(103), 3);
}

TEST(GemvStep3Simd, StaysInsideItsArrays) {
    expect_stays_inside_its_arrays(gemv_step3_simd, 1);
}

TEST(GemvStep4Blocked, MatchesPlain) {
    expect_matches_plain(gemv_step4_blocked, kRowCounts, with_random_cols(104), 4);
}

TEST(GemvStep4Blocked, MatchesPlainForAnyThreadCount) {
    expect_matches_plain_threaded(gemv_step4_blocked, 40);
}

TEST(GemvStep4Blocked, StaysInsideItsArrays) {
    expect_stays_inside_its_arrays(gemv_step4_blocked, 2);
}

// The LM head's shape: 49152 rows (SmolLM2's vocabulary) of 576.
TEST(GemvStep4Blocked, MatchesPlainOnTheHeadShape) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    expect_matches_plain(gemv_step4_blocked, {49152}, {576}, 5);
    omp_set_num_threads(saved);
}

}  // namespace
}  // namespace servelab
