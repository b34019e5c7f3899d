// hidden_lab08_gemv_test.cpp — Lab 8 (kernels: decode is memory-bound,
// the roofline): the instructor's hidden tests of the GEMV steps.
//
// These are the course autograder's hidden tests: they are left out of the
// student release, so never quote them in handouts. They check the contracts
// the handout states (every step computes quant_matmul_plain's y; each row
// written by exactly one pass and one thread; byte j holds codes j and j + 16)
// on inputs the public tests do not use: every row count from 1 to 13, block
// counts 3, 5 and 7, thread counts 5, 6, 8 and 16 (more threads than passes),
// one-hot activations that read each weight of a block on its own, and a
// second call on the same y (a step must overwrite y, not add to it). The
// expected y is computed here by a plain double loop over the nibbles, not by
// the engine.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../unit/quant_test_util.h"
#include "../unit/test_util.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/gemv_steps.h"

namespace servelab {
namespace {

using GemvStep = void (*)(const float*, const QuantMatrix&, float*);

struct Step {
    const char* name;
    GemvStep run;
};

const Step kSteps[] = {{"step 1 (unrolled)", gemv_step1_unrolled},
                       {"step 2 (threads)", gemv_step2_threads},
                       {"step 3 (SIMD)", gemv_step3_simd},
                       {"step 4 (blocked)", gemv_step4_blocked}};

using test::RandomQ4_1;

float fp16_at(const uint8_t* p) {
    return fp16_to_float(uint16_t(p[0] | p[1] << 8));
}

// Weight c of row r as the handout defines it: d·q_c + m, q_c the low nibble
// of code byte c (c < 16) or the high nibble of byte c - 16.
double weight(const QuantMatrix& w, int64_t r, int64_t c) {
    const uint8_t* block = w.data + r * w.row_bytes + (c / 32) * 20;
    const int j = int(c % 32);
    const int code = j < 16 ? block[4 + j] & 0x0F : block[4 + j - 16] >> 4;
    return double(fp16_at(block)) * code + fp16_at(block + 2);
}

struct Expected {
    std::vector<double> y;      // Σ_c w_rc·x_c in double
    std::vector<double> scale;  // Σ_c |w_rc·x_c|: the size of the rounding error
};

Expected plain_gemv(const QuantMatrix& w, const std::vector<float>& x) {
    Expected e{std::vector<double>(size_t(w.rows)), std::vector<double>(size_t(w.rows))};
    for (int64_t r = 0; r < w.rows; ++r) {
        for (int64_t c = 0; c < w.cols; ++c) {
            const double term = weight(w, r, c) * x[size_t(c)];
            e.y[size_t(r)] += term;
            e.scale[size_t(r)] += std::abs(term);
        }
    }
    return e;
}

// Names what is wrong with y (empty when nothing is): unwritten rows first,
// then the first few wrong ones.
std::string check_rows(const std::vector<float>& y, const Expected& e) {
    std::string unwritten, wrong;
    int wrong_count = 0;
    for (size_t r = 0; r < y.size(); ++r) {
        if (std::isnan(y[r])) {
            unwritten += " " + std::to_string(r);
        } else if (!(std::abs(y[r] - e.y[r]) <= 1e-4 * e.scale[r] + 1e-6) && wrong_count++ < 4) {
            wrong += " row " + std::to_string(r) + ": got " + std::to_string(y[r]) + ", expected " +
                     std::to_string(e.y[r]) + ";";
        }
    }
    if (!unwritten.empty()) {
        return "rows never written (still NaN):" + unwritten + " of " + std::to_string(y.size()) +
               ": every row, the last partial pass and the last thread's chunk included, must "
               "be computed by exactly one pass";
    }
    if (!wrong.empty()) return "rows that differ from Σ_c (d·q_c + m)·x_c:" + wrong;
    return "";
}

// Runs `step` on a random rows x cols matrix, y poisoned with NaN; returns
// the failure (empty when y is right).
std::string run_once(const Step& step, test::RandomSource& random, int64_t rows, int64_t cols) {
    const RandomQ4_1 w = test::random_q4_1(random, rows, cols, 2e-3f);
    const std::vector<float> x = random.normal(size_t(cols));
    std::vector<float> y(size_t(rows), std::numeric_limits<float>::quiet_NaN());
    step.run(x.data(), w.view, y.data());
    const std::string why = check_rows(y, plain_gemv(w.view, x));
    if (why.empty()) return "";
    return std::string(step.name) + ", " + std::to_string(rows) + " x " + std::to_string(cols) +
           ", " + std::to_string(omp_get_max_threads()) + " threads: " + why;
}

// Sets the OpenMP thread count for one scope and restores it after.
class ThreadCount {
  public:
    explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) {
        omp_set_num_threads(threads);
    }
    ~ThreadCount() { omp_set_num_threads(saved_); }

  private:
    int saved_;
};

// Every row count from 1 to 13 (the last pass 1, 2, 3 or 4 rows long, one to
// four passes), on rows of 3, 5 and 7 blocks: no count the public tests use.
TEST(HiddenLab08Gemv, EveryStepOnEveryRowCountUpToFourPasses) {
    test::RandomSource random(801);
    SCOPED_TRACE(random.trace());
    const ThreadCount threads(1);
    for (const Step& step : kSteps) {
        for (int64_t rows = 1; rows <= 13; ++rows) {
            for (int64_t cols : {96, 160, 224}) {
                const std::string why = run_once(step, random, rows, cols);
                ASSERT_TRUE(why.empty()) << why;
            }
        }
    }
}

// x = e_c reads one weight alone: y[r] must be d·q_c + m of row r for every
// position c of a block. A code read from the wrong nibble, byte or x index
// shows up as the one position that is wrong.
TEST(HiddenLab08Gemv, OneHotActivationsReadEachWeightOfABlock) {
    test::RandomSource random(802);
    SCOPED_TRACE(random.trace());
    const ThreadCount threads(1);
    const int64_t rows = 6, cols = 64;
    const RandomQ4_1 w = test::random_q4_1(random, rows, cols, 2e-3f);
    for (const Step& step : kSteps) {
        for (int64_t c = 0; c < cols; ++c) {
            std::vector<float> x(size_t(cols), 0.0f);
            x[size_t(c)] = 1.0f + float(random.integer(0, 3));
            std::vector<float> y(size_t(rows), std::numeric_limits<float>::quiet_NaN());
            step.run(x.data(), w.view, y.data());
            for (int64_t r = 0; r < rows; ++r) {
                const double expected = weight(w.view, r, c) * x[size_t(c)];
                ASSERT_NEAR(y[size_t(r)], expected, 1e-5 * (1 + std::abs(expected)))
                    << step.name << ": row " << r << ", x one-hot at column " << c << " (position "
                    << c % 32 << " of block " << c / 32
                    << "): weight c is d·q_c + m, and code c < 16 is the low nibble of code "
                       "byte c, code c >= 16 the high nibble of byte c - 16";
            }
        }
    }
}

// Threads 5, 6, 8 and 16: chunks that do not divide the passes evenly, and
// more threads than passes (rows 2, 9: some threads get no rows at all).
TEST(HiddenLab08Gemv, ThreadedStepsOnThreadCountsThatDoNotDivideThePasses) {
    test::RandomSource random(803);
    SCOPED_TRACE(random.trace());
    for (int threads : {5, 6, 8, 16}) {
        const ThreadCount scope(threads);
        for (const Step& step : {kSteps[1], kSteps[3]}) {
            for (int64_t rows : {2, 9, 22, 41, 63, 130}) {
                const std::string why = run_once(step, random, rows, 96);
                ASSERT_TRUE(why.empty()) << why;
            }
        }
    }
}

// A step writes y; it does not add to it: y holding a finite value (last
// token's output) before the call must not change the result, and a second
// call on the same y gives the same y.
TEST(HiddenLab08Gemv, EachCallOverwritesYInsteadOfAddingToIt) {
    test::RandomSource random(804);
    SCOPED_TRACE(random.trace());
    const ThreadCount threads(3);
    const int64_t rows = 11, cols = 288;
    const RandomQ4_1 w = test::random_q4_1(random, rows, cols, 2e-3f);
    const std::vector<float> x = random.normal(size_t(cols));
    const Expected e = plain_gemv(w.view, x);
    for (const Step& step : kSteps) {
        std::vector<float> y = random.uniform(size_t(rows), 50.0f, 100.0f);  // stale values
        for (int call = 1; call <= 2; ++call) {
            step.run(x.data(), w.view, y.data());
            const std::string why = check_rows(y, e);
            ASSERT_TRUE(why.empty())
                << step.name << ", call " << call << " on a y that already held values: " << why
                << " (each row's accumulators start at 0 and the result is stored with =)";
        }
    }
}

// A long row (127 blocks, an odd count) and a tall matrix whose row count is
// one over a multiple of four times the threads: the last chunk's one row.
TEST(HiddenLab08Gemv, LongRowsAndOneRowOverTheLastFullPass) {
    test::RandomSource random(805);
    SCOPED_TRACE(random.trace());
    const ThreadCount threads(4);
    for (const Step& step : kSteps) {
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 127 * 32}, {4 * 4 * 9 + 1, 64}}) {
            const std::string why = run_once(step, random, rows, cols);
            ASSERT_TRUE(why.empty()) << why;
        }
    }
}

}  // namespace
}  // namespace servelab
