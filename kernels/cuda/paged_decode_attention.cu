// paged_decode_attention.cu — see paged_decode_attention.h.
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_decode_attention.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kSharedBytes = 48 * 1024;  // available to any block without opting in

// The maximum (take_max) or the sum of `value` over the block, returned to
// every thread; `scratch` holds one float per warp. ([[maybe_unused]]:
// Lab 4's GPU skeleton leaves paged_decode_kernel, its caller, empty.)
[[maybe_unused]] __device__ float block_reduce(float value, float* scratch, bool take_max) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, value, offset);
        value = take_max ? fmaxf(value, other) : value + other;
    }
    const int warp = int(threadIdx.x) / 32;
    if (threadIdx.x % 32 == 0) scratch[warp] = value;
    __syncthreads();
    float result = scratch[0];
    for (int w = 1; w < int(blockDim.x) / 32; ++w) {
        result = take_max ? fmaxf(result, scratch[w]) : result + scratch[w];
    }
    __syncthreads();  // scratch is reused by the next reduction
    return result;
}

// Dynamic shared memory: q (head_dim floats), then the scores (context floats).
__global__ void paged_decode_kernel(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                    const __nv_bfloat16* value_pool, const int32_t* block_tables,
                                    const int32_t* context_lens, __nv_bfloat16* out,
                                    PagedDecodeShape shape, float scale) {
    // BEGIN SOLUTION lab04
    // HINT: block = (query head blockIdx.x, sequence blockIdx.y); its KV head is
    // HINT: head / (num_heads / num_kv_heads). Token j of the sequence is pool row
    // HINT: table[j / block_size] * block_size + j % block_size (table: the sequence's).
    // HINT: scores q.k * scale into shared memory, max and sum with block_reduce,
    // HINT: then out[d] = sum_j p_j v_j[d] / sum, one dimension d per thread.
    extern __shared__ float shared[];
    __shared__ float scratch[kThreads / 32];
    const int64_t head = blockIdx.x;
    const int64_t seq = blockIdx.y;
    const int64_t kv_head = head / (shape.num_heads / shape.num_kv_heads);
    const int64_t len = context_lens[seq];
    const int32_t* table = block_tables + seq * shape.max_blocks_per_seq;
    const int64_t row_stride = shape.num_kv_heads * shape.head_dim;  // one token's row in a pool
    float* q_s = shared;
    float* scores = shared + shape.head_dim;

    const __nv_bfloat16* q_head = q + (seq * shape.num_heads + head) * shape.head_dim;
    for (int64_t d = threadIdx.x; d < shape.head_dim; d += blockDim.x) {
        q_s[d] = __bfloat162float(q_head[d]);
    }
    __syncthreads();

    // Scores: one key per thread at a time, its row found through the table.
    float local_max = -INFINITY;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const int64_t row =
            int64_t(table[j / shape.block_size]) * shape.block_size + j % shape.block_size;
        const __nv_bfloat16* k = key_pool + row * row_stride + kv_head * shape.head_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < shape.head_dim; ++d) dot += q_s[d] * __bfloat162float(k[d]);
        scores[j] = dot * scale;
        local_max = fmaxf(local_max, scores[j]);
    }
    const float max_score = block_reduce(local_max, scratch, true);

    // Softmax in fp32: subtract the max so exp never overflows.
    float local_sum = 0.0f;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        scores[j] = __expf(scores[j] - max_score);
        local_sum += scores[j];
    }
    const float inv_sum = 1.0f / block_reduce(local_sum, scratch, false);  // also a barrier

    // out[d] = sum_j p_j v_j[d]: one output dimension per thread; adjacent
    // threads read adjacent elements of each value row.
    for (int64_t d = threadIdx.x; d < shape.head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < len; ++j) {
            const int64_t row =
                int64_t(table[j / shape.block_size]) * shape.block_size + j % shape.block_size;
            acc += scores[j] *
                   __bfloat162float(value_pool[row * row_stride + kv_head * shape.head_dim + d]);
        }
        out[(seq * shape.num_heads + head) * shape.head_dim + d] = __float2bfloat16(acc * inv_sum);
    }
    // END SOLUTION
}

}  // namespace

int64_t paged_decode_max_context(int64_t head_dim) {
    // The static reduction scratch shares the 48 KB: leave it 1 KB.
    return (kSharedBytes - 1024) / int64_t(sizeof(float)) - head_dim;
}

void paged_decode_attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                 const __nv_bfloat16* value_pool, const int32_t* block_tables,
                                 const int32_t* context_lens, __nv_bfloat16* out,
                                 const PagedDecodeShape& shape, cudaStream_t stream) {
    if (shape.num_seqs == 0) return;
    if (shape.max_context_len > paged_decode_max_context(shape.head_dim)) {
        throw Error("paged_decode_attention: a context of " +
                    std::to_string(shape.max_context_len) + " tokens exceeds the plain kernel's " +
                    std::to_string(paged_decode_max_context(shape.head_dim)));
    }
    if (shape.num_kv_heads < 1 || shape.num_heads % shape.num_kv_heads != 0) {
        throw Error("paged_decode_attention: num_kv_heads must divide num_heads");
    }
    const dim3 grid(unsigned(shape.num_heads), unsigned(shape.num_seqs));
    const size_t shared_bytes = size_t(shape.head_dim + shape.max_context_len) * sizeof(float);
    const float scale = 1.0f / std::sqrt(float(shape.head_dim));
    paged_decode_kernel<<<grid, kThreads, shared_bytes, stream>>>(
        q, key_pool, value_pool, block_tables, context_lens, out, shape, scale);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
