// softmax_kernels.h — a numerically stable softmax over each row, on the GPU.
//
// Part of the CUDA backend (issue 7) and Lab 1's GPU track (chapter 11.2:
// the attention scores and the sampler's probabilities are both a softmax).
// The plain version kept for teaching: one thread block per row, fp32 in
// and out. It keeps the contract of kernels/cpu/softmax.h, row by row:
// subtract the row's maximum before exponentiating (mathematically a no-op;
// it keeps exp() from overflowing), then divide by the sum. Pointers are
// device pointers; `stream` may be 0. Launch errors throw servelab::Error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::cuda {

// out[r, :] = softmax(x[r, :]) for r < rows, each row n >= 1 values long.
// out may equal x (in place, as the CPU softmax works).
void softmax_rows_f32(const float* x, float* out, int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace servelab::cuda
