// membw_probe.cpp — how fast can this machine's cores read memory?
//
// Issue 11 (CPU performance). Batch-1 decode reads every weight once per
// token, so its ceiling is (memory read bandwidth) / (weight bytes per
// token). This probe measures that bandwidth the way decode uses it: N
// threads (OpenMP) each stream their share of one large buffer, far larger
// than the caches, summing it so the loads cannot be skipped. Prints one
// JSON object: the buffer, the threads, and the median and best GB/s of
// --passes passes (GB = 1e9 bytes).
//
//   build/release/membw_probe --threads 2 --mib 1024 --passes 7
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
    int threads = 0;  // 0 = OpenMP's default
    int64_t mib = 1024;
    int passes = 7;
};

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "membw_probe: %s needs a value\n", flag.c_str());
            std::exit(2);
        }
        const long long value = std::atoll(argv[++i]);
        if (flag == "--threads" && value >= 0) {
            options.threads = int(value);
        } else if (flag == "--mib" && value >= 16) {
            options.mib = value;
        } else if (flag == "--passes" && value >= 1) {
            options.passes = int(value);
        } else {
            std::fprintf(stderr,
                         "membw_probe: unknown flag or bad value: %s (flags: --threads N >= 0, "
                         "--mib N >= 16, --passes N >= 1)\n",
                         flag.c_str());
            std::exit(2);
        }
    }
    return options;
}

// Sums the buffer with 8 independent accumulators per thread, so the adds
// never wait on each other and the loads are the bottleneck; the compiler
// vectorizes the inner loop.
double sum_buffer(const float* data, int64_t count) {
    double total = 0.0;
#pragma omp parallel reduction(+ : total)
    {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma omp for schedule(static)
        for (int64_t i = 0; i < count; i += 8) {
            for (int j = 0; j < 8; ++j) acc[j] += data[i + j];
        }
        for (float a : acc) total += a;
    }
    return total;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse(argc, argv);
    if (options.threads > 0) omp_set_num_threads(options.threads);
    const int64_t count = options.mib * (1 << 20) / int64_t(sizeof(float));
    std::vector<float> buffer(static_cast<size_t>(count));
    // Touch every page from the threads that will read it (first touch).
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) buffer[size_t(i)] = float(i % 7) * 0.5f;

    std::vector<double> gbps;
    double checksum = 0.0;
    for (int pass = 0; pass < options.passes; ++pass) {
        const auto start = std::chrono::steady_clock::now();
        checksum += sum_buffer(buffer.data(), count);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        gbps.push_back(double(count) * sizeof(float) / seconds / 1e9);
    }
    std::vector<double> sorted = gbps;
    std::sort(sorted.begin(), sorted.end());
    std::printf(
        "{\"buffer_mib\": %lld, \"threads\": %d, \"passes\": %d, \"median_gb_per_s\": %.3f, "
        "\"best_gb_per_s\": %.3f, \"checksum\": %.1f}\n",
        (long long)options.mib, omp_get_max_threads(), options.passes, sorted[sorted.size() / 2],
        sorted.back(), checksum);
    return 0;
}
