// gpu_weights.h — which form the GPU keeps the projections in (`--gpu-weights bf16|native`).
//
// Part of the CUDA backend (issue 48). No CUDA here, so the CLI and
// CudaRunnerOptions can name it; what each kind holds is
// reference/device/cuda_weights.h's.
#pragma once

#include <string>

#include "kernels/common/error.h"

namespace servelab {

enum class GpuWeights {
    kBf16,    // every weight rounded to bf16; cuBLAS for every projection
    kNative,  // Q4_0/Q4_1/Q8_0 projections keep the file's blocks (the default)
};

inline GpuWeights parse_gpu_weights(const std::string& name) {
    if (name == "bf16") return GpuWeights::kBf16;
    if (name == "native") return GpuWeights::kNative;
    throw Error("--gpu-weights " + name + ": expected bf16 or native");
}

inline const char* gpu_weights_name(GpuWeights kind) {
    return kind == GpuWeights::kBf16 ? "bf16" : "native";
}

}  // namespace servelab
