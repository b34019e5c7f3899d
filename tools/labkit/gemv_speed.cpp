// gemv_speed.cpp — Lab 8's throughput case: step 4 against quant_matmul.
//
// The kernels lab (issue 11) grades the student's gemv_step4_blocked by its
// speed as a ratio to the production kernel quant_matmul, both timed here,
// in one process, on the same streamed weights (tests/bench/streamed_q4_1.h)
// and threads (OMP_NUM_THREADS), interleaved trial by trial (A B, B A, ...),
// so that a busy moment of the machine slows both. A trial is one GEMV after
// another on the buffer's next matrices until 64 MiB were read (from memory:
// the buffer is twice the last-level cache). Shapes: SmolLM2's gate
// projection (1536x576) and LM head (49152x576), one decode token. Prints
// one JSON object: per shape the median GB/s (weight bytes, 1e9) of each
// kernel, and their geometric means over the shapes, which tools/labkit/grade.py
// reads ("step4_gb_per_s" against "baseline_gb_per_s").
//
// --baseline=step4 times step 4 against itself instead (both sides the same
// kernel): the grader's self-test, which must find a ratio near 1 whatever
// the machine, where step 4 against quant_matmul is a property of the CPU.
//
// Built once per engine (labs/labs.cmake): labNN_throughput with the lab's
// student files, labNN_throughput_reference with the reference ones.
//   OMP_NUM_THREADS=1 build/release/lab08_throughput --trials 7
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kernels/cpu/gemv_steps.h"
#include "tests/bench/streamed_q4_1.h"

namespace servelab {
namespace {

using Kernel = void (*)(const float*, const QuantMatrix&, float*);

void quant_matmul_one_token(const float* x, const QuantMatrix& w, float* y) {
    quant_matmul(x, w, y, 1);
}

constexpr int64_t kTrialBytes = int64_t(64) << 20;

// GB/s of `kernel` over the next matrices of `stream`, kTrialBytes of them.
double trial_gb_per_s(Kernel kernel, StreamedQ4_1& stream, int64_t rows, int64_t cols,
                      const float* x, float* y) {
    const int64_t matrix_bytes = rows * row_size_bytes(GgmlType::kQ4_1, cols);
    const int64_t calls = (kTrialBytes + matrix_bytes - 1) / matrix_bytes;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < calls; ++i) kernel(x, stream.next(rows, cols), y);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return double(calls * matrix_bytes) / seconds / 1e9;
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int run(int trials, Kernel baseline, const char* baseline_name) {
    struct Shape {
        int64_t rows, cols;
    };
    const Shape shapes[] = {{1536, 576}, {49152, 576}};
    double log_step4 = 0, log_reference = 0;
    std::string per_shape;
    StreamedQ4_1 stream;
    for (const Shape& shape : shapes) {
        std::vector<float> x(size_t(shape.cols)), y(size_t(shape.rows));
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 7) - 3) * 0.25f;
        auto trial = [&](Kernel kernel) {
            return trial_gb_per_s(kernel, stream, shape.rows, shape.cols, x.data(), y.data());
        };
        trial(gemv_step4_blocked), trial(baseline);  // warm-up: threads, code
        std::vector<double> step4, reference;
        for (int t = 0; t < trials; ++t) {  // A B, then B A: neither always goes first
            if (t % 2 == 0) {
                step4.push_back(trial(gemv_step4_blocked));
                reference.push_back(trial(baseline));
            } else {
                reference.push_back(trial(baseline));
                step4.push_back(trial(gemv_step4_blocked));
            }
        }
        const double step4_median = median(step4), reference_median = median(reference);
        log_step4 += std::log(step4_median) / std::size(shapes);
        log_reference += std::log(reference_median) / std::size(shapes);
        char line[256];
        std::snprintf(line, sizeof line,
                      "%s{\"rows\": %lld, \"cols\": %lld, \"step4_gb_per_s\": %.4g, "
                      "\"baseline_gb_per_s\": %.4g}",
                      per_shape.empty() ? "" : ", ", (long long)shape.rows, (long long)shape.cols,
                      step4_median, reference_median);
        per_shape += line;
    }
    std::printf(
        "{\"threads\": %d, \"trials\": %d, \"baseline\": \"%s\", \"shapes\": [%s],\n"
        " \"step4_gb_per_s\": %.4g, \"baseline_gb_per_s\": %.4g, \"ratio\": %.4f}\n",
        omp_get_max_threads(), trials, baseline_name, per_shape.c_str(), std::exp(log_step4),
        std::exp(log_reference), std::exp(log_step4 - log_reference));
    return 0;
}

}  // namespace
}  // namespace servelab

int main(int argc, char** argv) {
    int trials = 7;
    std::string baseline = "quant_matmul";
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--trials" && i + 1 < argc && std::atoi(argv[i + 1]) >= 1) {
            trials = std::atoi(argv[++i]);
        } else if (flag.rfind("--baseline=", 0) == 0 &&
                   (flag.substr(11) == "quant_matmul" || flag.substr(11) == "step4")) {
            baseline = flag.substr(11);
        } else {
            std::fprintf(stderr,
                         "usage: %s [--trials N] [--baseline=quant_matmul|step4]   (N >= 1, "
                         "default 7; baseline: the kernel step 4 is timed against)\n",
                         argv[0]);
            return 2;
        }
    }
    try {
        const servelab::Kernel kernel = baseline == "step4" ? servelab::gemv_step4_blocked
                                                            : servelab::quant_matmul_one_token;
        return servelab::run(trials, kernel, baseline.c_str());
    } catch (const std::exception& error) {  // e.g. "not implemented: lab08: ..."
        std::fprintf(stderr, "gemv_speed: %s\n", error.what());
        return 1;
    }
}
