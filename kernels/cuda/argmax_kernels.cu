// argmax_kernels.cu — see argmax_kernels.h.
#include "kernels/cuda/argmax_kernels.h"
#include "kernels/cuda/cuda_check.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 256;

// Whether (value a, index ia) beats (value b, index ib): larger value, then
// smaller index. NaN never wins (the comparisons are false).
__device__ bool better(float a, int64_t ia, float b, int64_t ib) {
    return a > b || (a == b && ia < ib);
}

// One block per row: each thread scans a strided slice, then the block
// reduces the (value, index) pairs in shared memory.
__global__ void argmax_kernel(const float* logits, int32_t* out, int64_t vocab_size) {
    __shared__ float best_value[kThreads];
    __shared__ int64_t best_index[kThreads];
    const float* row = logits + int64_t(blockIdx.x) * vocab_size;
    float value = -INFINITY;
    int64_t index = vocab_size;  // "none yet": loses every tie
    for (int64_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
        if (better(row[i], i, value, index)) {
            value = row[i];
            index = i;
        }
    }
    best_value[threadIdx.x] = value;
    best_index[threadIdx.x] = index;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (int(threadIdx.x) < stride) {
            const int other = int(threadIdx.x) + stride;
            if (better(best_value[other], best_index[other], best_value[threadIdx.x],
                       best_index[threadIdx.x])) {
                best_value[threadIdx.x] = best_value[other];
                best_index[threadIdx.x] = best_index[other];
            }
        }
        __syncthreads();
    }
    // A row of NaN or -inf only: index 0, as std::max_element would give.
    if (threadIdx.x == 0) out[blockIdx.x] = int32_t(best_index[0] < vocab_size ? best_index[0] : 0);
}

}  // namespace

void argmax_rows_f32(const float* logits, int32_t* out, int64_t rows, int64_t vocab_size,
                     cudaStream_t stream) {
    if (rows == 0) return;
    argmax_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, out, vocab_size);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
