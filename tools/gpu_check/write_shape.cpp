// write_shape.cpp — a real model's shape with random weights, written where the GPU check times it.
//
// CUDA backend's checks (issue 48), run by tools/gpu_check.sh (steps
// peers-1b, peers-8b) on the GPU machine, whose build has no CLI (its
// dependencies are not there): the `servelab make-tiny-model --shape` path
// alone. The 1B and 8B files (0.8 to 16 GB) are written there, by every
// core, rather than carried.
//   write_shape SHAPE TYPE PATH [THREADS]   e.g. write_shape llama-3.1-8b q4_1 /dev/shm/8b.gguf
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "kernels/common/error.h"
#include "reference/model/model_shapes.h"
#include "reference/model/tiny_model.h"

int main(int argc, char** argv) {
    if (argc < 4 || argc > 5) {
        std::fprintf(stderr, "usage: write_shape SHAPE TYPE PATH [THREADS]\n");
        return 2;
    }
    try {
        servelab::TinyModelOptions options;
        servelab::apply_model_shape(servelab::find_model_shape(argv[1]), options);
        options.weight_type = servelab::parse_weight_type(argv[2]);
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        options.write_threads = argc == 5 ? std::atoll(argv[4]) : int64_t(cores);
        if (options.write_threads < 1) throw servelab::Error("THREADS must be at least 1");
        const auto start = std::chrono::steady_clock::now();
        servelab::write_tiny_model(options, argv[3]);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("wrote %s (%.2f GB, %.1f s, %lld threads)\n", argv[3],
                    double(std::filesystem::file_size(argv[3])) / 1e9, seconds,
                    (long long)options.write_threads);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "write_shape: %s\n", e.what());
        return 1;
    }
    return 0;
}
