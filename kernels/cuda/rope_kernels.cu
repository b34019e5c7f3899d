// rope_kernels.cu — see rope_kernels.h.
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/rope_kernels.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (token, head, pair): pairs are independent.
__global__ void rope_kernel(__nv_bfloat16* vecs, const int32_t* positions,
                            const float* cos_sin_table, int64_t num_tokens, int64_t num_heads,
                            int64_t head_dim, int64_t num_pairs) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= num_tokens * num_heads * num_pairs) return;
    const int64_t pair = i % num_pairs;
    const int64_t head = (i / num_pairs) % num_heads;
    const int64_t token = i / (num_pairs * num_heads);
    const float* cs = cos_sin_table + (int64_t(positions[token]) * num_pairs + pair) * 2;
    __nv_bfloat16* x = vecs + (token * num_heads + head) * head_dim + 2 * pair;
    const float x0 = __bfloat162float(x[0]);
    const float x1 = __bfloat162float(x[1]);
    x[0] = __float2bfloat16(x0 * cs[0] - x1 * cs[1]);
    x[1] = __float2bfloat16(x0 * cs[1] + x1 * cs[0]);
}

}  // namespace

std::vector<float> rope_cos_sin_table(const RopeParams& params, int64_t max_positions) {
    const int64_t num_pairs = params.rope_dim / 2;
    std::vector<float> table(size_t(max_positions * num_pairs * 2));
    for (int64_t pair = 0; pair < num_pairs; ++pair) {
        const double inv_freq =
            std::pow(double(params.freq_base), -2.0 * double(pair) / double(params.rope_dim));
        for (int64_t pos = 0; pos < max_positions; ++pos) {
            const double angle = double(pos) * inv_freq;
            table[size_t((pos * num_pairs + pair) * 2)] = float(std::cos(angle));
            table[size_t((pos * num_pairs + pair) * 2 + 1)] = float(std::sin(angle));
        }
    }
    return table;
}

void rope_bf16(__nv_bfloat16* vecs, const int32_t* positions, const float* cos_sin_table,
               int64_t num_tokens, int64_t num_heads, const RopeParams& params,
               cudaStream_t stream) {
    const int64_t num_pairs = params.rope_dim / 2;
    const int64_t work = num_tokens * num_heads * num_pairs;
    if (work == 0) return;
    rope_kernel<<<unsigned((work + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        vecs, positions, cos_sin_table, num_tokens, num_heads, params.head_dim, num_pairs);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
