// KNOWN-WRONG implementation for the grader self-test (tests/labs/README.md): the softmax
// exponentiates without subtracting the row maximum, so large inputs overflow. softmax_kernels.cu —
// see softmax_kernels.h.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax_kernels.h"

namespace servelab::cuda {
namespace {

constexpr int kRowThreads = 256;  // threads per row (a multiple of 32)

// The maximum (take_max) or the sum of `value` over the block, returned to
// every thread. Warps reduce with shuffles; warp leaders meet in shared memory.
// ([[maybe_unused]]: Lab 1's GPU skeleton leaves its one caller empty.)
[[maybe_unused]] __device__ float block_reduce(float value, bool take_max) {
    __shared__ float warp_results[kRowThreads / 32];
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, value, offset);
        value = take_max ? fmaxf(value, other) : value + other;
    }
    if (threadIdx.x % 32 == 0) warp_results[threadIdx.x / 32] = value;
    __syncthreads();
    float result = warp_results[0];
    for (int w = 1; w < int(blockDim.x) / 32; ++w) {
        result = take_max ? fmaxf(result, warp_results[w]) : result + warp_results[w];
    }
    __syncthreads();  // warp_results is reused by the next reduction
    return result;
}

// One block per row, three passes over it: the maximum, the sum of
// exp(x - max), and the normalized values. The row is read three times and
// written once; at a few thousand floats per row it stays in L2 between
// passes, so the kernel is bound by one read and one write of the row.
__global__ void softmax_rows_kernel(const float* x, float* out, int64_t n) {
    const float* in = x + int64_t(blockIdx.x) * n;
    float* row_out = out + int64_t(blockIdx.x) * n;

    float local_sum = 0.0f;
    // WRONG: expf(in[i]) without "- max_value" overflows to inf for inputs above ~88.
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) local_sum += expf(in[i]);
    const float inv_sum = 1.0f / block_reduce(local_sum, false);

    // In place (out == x) is safe: every read of the row happened before the
    // second reduction's barrier, and each thread writes only what it reads.
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        row_out[i] = expf(in[i]) * inv_sum;
    }
}

}  // namespace

void softmax_rows_f32(const float* x, float* out, int64_t rows, int64_t n, cudaStream_t stream) {
    if (rows == 0) return;
    if (n < 1) throw Error("softmax_rows_f32: rows must hold at least one value");
    softmax_rows_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(x, out, n);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
