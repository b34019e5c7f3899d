// cmd_bench_allreduce.cpp — `servelab bench allreduce`: what one all-reduce costs on a back end.
//
// Part of the CLI (Lab 7, chapter 11.7). A split model does 2·layers + 1
// all-reduces per step, each of tokens × dim floats, so its communication
// time is a latency term (per call) plus a bandwidth term (per byte). This
// measures both on the chosen back end: for each message size, the median
// time of one all-reduce over the ranks (every call starts after a barrier,
// so no rank's head start hides in the figure), reported as
//   algorithm bandwidth  bytes / time;
//   bus bandwidth        bytes · 2(N−1)/N / time: what each rank moves over
//                        its link in a ring all-reduce, the figure to compare
//                        with a link's (or memory's) speed, whatever N is.
// The notebook fits latency + bytes / bandwidth to these points.
// Under MPI: `mpirun -np N servelab bench allreduce --tp N`.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/tensor_parallel_ranks.h"
#include "reference/experiments/serving_metrics.h"

namespace servelab::cli {
namespace {

struct AllReduceOptions {
    TensorParallelOptions tp;
    std::vector<int64_t> sizes_bytes = {4, 2304, 65536, 1 << 20, 16 << 20};
    RepeatOptions repeat{.repeats = 30};
    OutputOptions output;
};

struct SizeResult {
    int64_t bytes = 0;
    double median_us = 0;
    double p90_us = 0;
};

// Times on every rank; rank 0's figures are reported (after a barrier each
// call starts together, and the ring ends everyone within a step).
std::vector<SizeResult> measure_all_reduce(Communicator& comm, const AllReduceOptions& options) {
    std::vector<SizeResult> results;
    std::mt19937 rng(uint32_t(1234 + comm.rank()));
    std::normal_distribution<float> normal;
    for (int64_t bytes : options.sizes_bytes) {
        std::vector<float> data(size_t(std::max<int64_t>(1, bytes / 4)));
        for (float& value : data) value = normal(rng);
        std::vector<double> times_us;
        for (int i = 0; i < options.repeat.repeats + 3; ++i) {
            comm.barrier();
            const auto start = std::chrono::steady_clock::now();
            comm.all_reduce_sum(data);
            const auto end = std::chrono::steady_clock::now();
            // Keep the values bounded across repeats: divide by N again.
            for (float& value : data) value /= float(comm.size());
            if (i >= 3) {  // the first calls warm caches and connections
                times_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
            }
        }
        results.push_back(
            {int64_t(data.size() * 4), percentile(times_us, 50), percentile(times_us, 90)});
    }
    return results;
}

void report_all_reduce(const AllReduceOptions& options, const std::string& backend, int num_ranks,
                       const std::vector<SizeResult>& results) {
    const double bus_factor = num_ranks > 1 ? 2.0 * (num_ranks - 1) / num_ranks : 0.0;
    nlohmann::json rows = nlohmann::json::array();
    for (const SizeResult& r : results) {
        const double algorithm_gbps = r.bytes / (r.median_us * 1e3);
        rows.push_back({{"bytes", r.bytes},
                        {"median_us", r.median_us},
                        {"p90_us", r.p90_us},
                        {"algorithm_gb_per_s", algorithm_gbps},
                        {"bus_gb_per_s", algorithm_gbps * bus_factor}});
    }
    if (options.output.json) {
        print_json({{"backend", backend},
                    {"num_ranks", num_ranks},
                    {"repeats", options.repeat.repeats},
                    {"sizes", rows}});
        return;
    }
    std::printf("all-reduce (sum, fp32) over %d ranks, %s back end, median of %d calls\n",
                num_ranks, backend.c_str(), options.repeat.repeats);
    std::printf("%12s %12s %12s %14s %12s\n", "bytes", "median us", "p90 us", "algbw GB/s",
                "busbw GB/s");
    for (const auto& row : rows) {
        std::printf("%12lld %12.1f %12.1f %14.3f %12.3f\n", (long long)row["bytes"].get<int64_t>(),
                    row["median_us"].get<double>(), row["p90_us"].get<double>(),
                    row["algorithm_gb_per_s"].get<double>(), row["bus_gb_per_s"].get<double>());
    }
}

void run_bench_allreduce(const AllReduceOptions& opts) {
    run_on_communicators(opts.tp, [&opts](Communicator& comm) {
        const std::vector<SizeResult> results = measure_all_reduce(comm, opts);
        if (comm.rank() == 0) report_all_reduce(opts, comm.backend(), comm.size(), results);
    });
}

}  // namespace

void add_bench_allreduce(CLI::App& bench) {
    auto opts = std::make_shared<AllReduceOptions>();
    opts->tp.size = 2;
    CLI::App* cmd = bench.add_subcommand(
        "allreduce",
        "latency and bandwidth of one all-reduce on a tensor-parallel back end (Lab 7)");
    opts->tp.add_to(*cmd);
    cmd->add_option("--sizes", opts->sizes_bytes, "message sizes in bytes")
        ->check(CLI::Range(int64_t(4), int64_t(1) << 30))
        ->capture_default_str();
    opts->repeat.add_to(*cmd, "timed calls per size", 100000);
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_bench_allreduce(*opts); });
}

}  // namespace servelab::cli
