// membw_probe.cpp — how fast can this machine's cores read a working set of a given size?
//
// The roofline's memory side, chapter 11 decode (issue 11, CPU performance).
// Batch-1 decode reads every weight once per token, so its ceiling is (read
// bandwidth) / (weight bytes per token) — the bandwidth of the level the
// weights live in. A working set larger than the last-level cache comes from
// DRAM every token; one that fits (SmolLM2-135M's 97 MB on a CPU with a
// 300 MiB L3) comes from L3, several times faster. So the probe reads a
// buffer of --mib MiB the way decode reads weights: N threads (OpenMP) each
// sum the same share of it, again and again, so the loads cannot be skipped.
//   - The buffer is written first and swept once untimed, so a buffer that
//     fits in a cache is in it before the clock starts.
//   - Each timed pass sweeps the buffer as many times as it takes to read at
//     least 1 GiB, so a small buffer's pass is long enough to time.
// --mib 1024 (the default) is far beyond any cache: DRAM. Prints one JSON
// object: the buffer, the threads, the sweeps per pass, and the median and
// best GB/s of --passes passes (GB = 1e9 bytes).
//
//   build/release/membw_probe --threads 2 --mib 1024 --passes 7   # DRAM
//   build/release/membw_probe --threads 2 --mib 24 --passes 7     # in a 32 MiB L3
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int64_t kBytesPerMib = int64_t(1) << 20;
constexpr int64_t kMinBytesPerPass = int64_t(1) << 30;  // a timed pass reads at least 1 GiB
// Running sums per thread: four 512-bit registers' worth, so that no add
// waits on the one before it and only the loads set the pace (a cache
// delivers 32-64 bytes per cycle per core; one chain of adds would not keep up).
constexpr int64_t kLanes = 64;

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
        } else if (flag == "--mib" && value >= 1 && value <= (1 << 20)) {
            options.mib = value;
        } else if (flag == "--passes" && value >= 1) {
            options.passes = int(value);
        } else {
            std::fprintf(stderr,
                         "membw_probe: unknown flag or bad value: %s (flags: --threads N >= 0, "
                         "--mib 1..1048576, --passes N >= 1)\n",
                         flag.c_str());
            std::exit(2);
        }
    }
    return options;
}

// The part of a `count`-float buffer that thread `thread` of `threads`
// reads, in whole groups of kLanes: the same part on every sweep, as each
// thread takes the same weight rows on every decode step.
struct Share {
    int64_t begin = 0;
    int64_t count = 0;
};

Share share_of(int64_t count, int thread, int threads) {
    const int64_t groups = count / kLanes;
    const int64_t first = groups * thread / threads;
    const int64_t last = groups * (thread + 1) / threads;
    return {first * kLanes, (last - first) * kLanes};
}

// Sums `count` floats (a multiple of kLanes) into kLanes independent sums.
// Built for AVX-512, AVX2 and baseline x86-64 and chosen at run time: a
// cache's read rate is only reached with wide loads.
__attribute__((target_clones("avx512f", "avx2", "default"))) float sum_share(const float* data,
                                                                             int64_t count) {
    float acc[kLanes] = {};
    for (int64_t i = 0; i < count; i += kLanes) {
        for (int64_t j = 0; j < kLanes; ++j) acc[j] += data[i + j];
    }
    float total = 0.0f;
    for (float a : acc) total += a;
    return total;
}

// Every thread sums its share `sweeps` times; returns the total (a checksum,
// printed, so the compiler cannot drop the loads).
double sweep(const float* buffer, int64_t count, int64_t sweeps) {
    double total = 0.0;
#pragma omp parallel reduction(+ : total)
    {
        const Share share = share_of(count, omp_get_thread_num(), omp_get_num_threads());
        for (int64_t s = 0; s < sweeps; ++s) {
            total += sum_share(buffer + share.begin, share.count);
        }
    }
    return total;
}

// Writes the buffer from the threads that will read it (new float[] leaves
// the pages untouched, so this first touch puts each page near its reader),
// then sweeps it once untimed to warm the caches.
std::unique_ptr<float[]> make_warm_buffer(int64_t count, double& checksum) {
    std::unique_ptr<float[]> buffer(new float[size_t(count)]);
#pragma omp parallel
    {
        const Share share = share_of(count, omp_get_thread_num(), omp_get_num_threads());
        for (int64_t i = share.begin; i < share.begin + share.count; ++i) {
            buffer[size_t(i)] = float(i % 7) * 0.5f;
        }
    }
    checksum += sweep(buffer.get(), count, 1);
    return buffer;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse(argc, argv);
    if (options.threads > 0) omp_set_num_threads(options.threads);
    double checksum = 0.0;
    const int64_t count = options.mib * kBytesPerMib / int64_t(sizeof(float));
    const std::unique_ptr<float[]> buffer = make_warm_buffer(count, checksum);
    const int64_t buffer_bytes = count * int64_t(sizeof(float));
    const int64_t sweeps =
        std::max<int64_t>(1, (kMinBytesPerPass + buffer_bytes - 1) / buffer_bytes);

    std::vector<double> gb_per_s;
    for (int pass = 0; pass < options.passes; ++pass) {
        const auto start = std::chrono::steady_clock::now();
        checksum += sweep(buffer.get(), count, sweeps);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        gb_per_s.push_back(double(buffer_bytes) * double(sweeps) / seconds / 1e9);
    }
    std::sort(gb_per_s.begin(), gb_per_s.end());
    std::printf(
        "{\"buffer_mib\": %lld, \"threads\": %d, \"passes\": %d, \"sweeps_per_pass\": %lld, "
        "\"median_gb_per_s\": %.3f, \"best_gb_per_s\": %.3f, \"checksum\": %.1f}\n",
        (long long)options.mib, omp_get_max_threads(), options.passes, (long long)sweeps,
        gb_per_s[gb_per_s.size() / 2], gb_per_s.back(), checksum);
    return 0;
}
