// kv_append.cu — see kv_append.h. Writing a step's keys and values into the paged pool.
//
// Part of the CUDA backend (issue 7; chapter 11.4, PagedAttention). Both
// kernels are pure copies, one thread per bf16 element: consecutive threads
// touch consecutive elements of a row, so every warp reads and writes
// contiguous memory. The only arithmetic is the row address.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_append.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 256;
// gridDim.y and gridDim.z stop at 65535; the copy kernel loops when it needs more.
constexpr int64_t kMaxGridY = 65535;

// Element i of the flattened (num_tokens, kv_dim) step goes to row
// slot_mapping[i / kv_dim] of both pools. A negative slot writes nothing: the
// unused rows of a CUDA graph's fixed-size batch must leave the pool alone.
__global__ void kv_append_kernel(const __nv_bfloat16* k, const __nv_bfloat16* v,
                                 const int32_t* slot_mapping, __nv_bfloat16* key_pool,
                                 __nv_bfloat16* value_pool, int64_t num_tokens, int64_t kv_dim) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= num_tokens * kv_dim) return;
    const int64_t token = i / kv_dim;
    const int64_t column = i % kv_dim;
    const int64_t slot = slot_mapping[token];
    if (slot < 0) return;
    key_pool[slot * kv_dim + column] = k[i];
    value_pool[slot * kv_dim + column] = v[i];
}

// blockIdx.x picks the (from, to) pair; blockIdx.y and a stride loop walk the
// block_size · kv_dim elements of the block (a block's rows are contiguous in
// the pool: rows block · block_size .. block · block_size + block_size - 1).
// The pairs run in parallel, so no pair's `to` may be another pair's `from`
// (copy-on-write always copies into a freshly allocated block, so it never is).
__global__ void kv_copy_blocks_kernel(__nv_bfloat16* pool, const int32_t* pairs,
                                      int64_t elements_per_block) {
    const int64_t from = pairs[2 * int64_t(blockIdx.x)];
    const int64_t to = pairs[2 * int64_t(blockIdx.x) + 1];
    const __nv_bfloat16* source = pool + from * elements_per_block;
    __nv_bfloat16* destination = pool + to * elements_per_block;
    const int64_t stride = int64_t(gridDim.y) * blockDim.x;
    for (int64_t e = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; e < elements_per_block;
         e += stride) {
        destination[e] = source[e];
    }
}

}  // namespace

void kv_append_bf16(const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* slot_mapping,
                    __nv_bfloat16* key_pool, __nv_bfloat16* value_pool, int64_t num_tokens,
                    int64_t kv_dim, cudaStream_t stream) {
    if (num_tokens == 0 || kv_dim == 0) return;
    const int64_t elements = num_tokens * kv_dim;
    const auto blocks = unsigned((elements + kThreads - 1) / kThreads);
    kv_append_kernel<<<blocks, kThreads, 0, stream>>>(k, v, slot_mapping, key_pool, value_pool,
                                                      num_tokens, kv_dim);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

void kv_copy_blocks_bf16(__nv_bfloat16* pool, const int32_t* pairs, int64_t num_copies,
                         int64_t block_size, int64_t kv_dim, cudaStream_t stream) {
    if (num_copies == 0 || block_size == 0 || kv_dim == 0) return;
    const int64_t elements_per_block = block_size * kv_dim;
    int64_t chunks = (elements_per_block + kThreads - 1) / kThreads;
    if (chunks > kMaxGridY) chunks = kMaxGridY;  // the kernel's stride loop covers the rest
    const dim3 grid(static_cast<unsigned>(num_copies), static_cast<unsigned>(chunks));
    kv_copy_blocks_kernel<<<grid, kThreads, 0, stream>>>(pool, pairs, elements_per_block);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
