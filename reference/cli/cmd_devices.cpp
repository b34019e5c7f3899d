// cmd_devices.cpp — `servelab devices`: the compute devices servelab can use.
//
// Part of the CLI (all labs). Always lists the CPU (threads OpenMP will use);
// lists CUDA GPUs when servelab was built with nvcc and a GPU is usable, and
// says why not otherwise.
#include <omp.h>

#include <cstdio>

#include "reference/cli/commands.h"
#ifdef SERVELAB_HAVE_CUDA
#include "kernels/cuda/device_info.h"
#endif

namespace servelab::cli {
namespace {

// devices takes no flags, so run_devices takes no options.
void run_devices() {
    std::printf("cpu: %d OpenMP threads\n", omp_get_max_threads());
#ifdef SERVELAB_HAVE_CUDA
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        std::printf("cuda: no usable GPU (%s)\n",
                    query.error.empty() ? "no devices" : query.error.c_str());
    }
    for (const cuda::DeviceInfo& d : query.devices) {
        std::printf("cuda:%d %s, sm_%d%d, %.1f GiB, %d SMs\n", d.index, d.name.c_str(),
                    d.compute_capability_major, d.compute_capability_minor,
                    double(d.total_memory_bytes) / double(1ull << 30), d.multiprocessors);
    }
#else
    std::printf("cuda: not compiled in (nvcc was not found at build time)\n");
#endif
}

}  // namespace

void add_devices(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("devices", "list the CPU and any CUDA GPUs");
    cmd->callback([] { run_devices(); });
}

}  // namespace servelab::cli
