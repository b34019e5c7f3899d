// paged_prefill_attention.cu — see paged_prefill_attention.h. FlashAttention-style tiling over the
// paged pool.
//
// Part of the CUDA backend (issue 7; chapters 11.4 and 11.5). The design,
// chosen to be easy to follow rather than as fast as FlashAttention-2:
//
//   grid:   (query tiles of kRowsPerBlock rows, query heads, sequences). The
//           x extent comes from max_query_len, so a block whose tile starts
//           past its own chunk's q_len returns at once.
//   block:  kThreads threads; a "row team" of kLanesPerRow adjacent threads
//           owns one query row. Lane r of a team owns the dimensions
//           r, r + 8, r + 16, ... of that row: it keeps its slice of q and
//           of the output accumulator in registers.
//   keys:   stream through shared memory kKeyTile at a time (keys and values
//           in bf16, as in the pool, each row padded with zeros to kMaxDim so
//           the inner loops need no bounds checks). Every thread helps load.
//   scores: for each key of the tile a lane computes the dot product over its
//           own dimensions; three xor-shuffles inside the team add the eight
//           partial sums, so every lane of the team ends up holding all
//           kKeyTile scores of its row. The online softmax (running max and
//           sum, identical in the team's lanes) therefore needs no shared
//           memory and no barrier.
//   output: acc = acc · exp(m_old − m_new) + Σ_j exp(s_j − m_new) · v_j per
//           tile; after the last tile out = acc / sum, rounded to bf16 once.
//
// Causality: row i of sequence s's chunk sits at position
// context_len − q_len + i and sees keys 0..position. A block streams the keys
// up to the position of its last row; scores of keys past a row's own
// position are −inf, so they weigh exp(−inf) = 0.
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_prefill_attention.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLanesPerRow = 8;                         // a row team: 8 adjacent lanes of one warp
constexpr int kRowsPerBlock = kThreads / kLanesPerRow;  // 32 query rows per block
constexpr int kKeyTile = 32;                            // keys per shared-memory tile
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGridYZ = 65535;  // gridDim.y and gridDim.z limits
constexpr unsigned kFullWarp = 0xffffffffu;

// Sum over the 8 lanes of a row team. xor with 4, 2 and 1 only flips the low
// three lane bits, so values never cross into a neighbouring team, and each
// lane ends with the same sum (the butterfly adds the same pairs everywhere).
__device__ float row_team_sum(float value) {
    value += __shfl_xor_sync(kFullWarp, value, 4);
    value += __shfl_xor_sync(kFullWarp, value, 2);
    value += __shfl_xor_sync(kFullWarp, value, 1);
    return value;
}

// Offset (in elements) of token `key`'s row for `kv_head` in a pool: the
// block table turns the logical block key / block_size into a physical one.
__device__ int64_t pool_offset(const int32_t* table, int64_t key, const PagedPrefillShape& shape,
                               int64_t kv_head) {
    const int64_t pool_row =
        int64_t(table[key / shape.block_size]) * shape.block_size + key % shape.block_size;
    return (pool_row * shape.num_kv_heads + kv_head) * shape.head_dim;
}

// kMaxDim: head_dim rounded up to 64, 128 or 256. It fixes the per-lane
// register arrays (kMaxDim / 8 floats each) and the shared tiles' row length.
template <int kMaxDim>
__global__ void __launch_bounds__(kThreads)
    paged_prefill_kernel(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                         const __nv_bfloat16* value_pool, const int32_t* block_tables,
                         const int32_t* query_start, const int32_t* context_lens,
                         __nv_bfloat16* out, PagedPrefillShape shape, float scale) {
    constexpr int kDimsPerLane = kMaxDim / kLanesPerRow;
    // Per tile: where each key's row starts in the pools (−1: past the keys
    // this block needs), then the keys and values themselves.
    __shared__ int64_t key_offsets[kKeyTile];
    __shared__ __nv_bfloat16 keys[kKeyTile * kMaxDim];
    __shared__ __nv_bfloat16 values[kKeyTile * kMaxDim];

    const int64_t seq = blockIdx.z;
    const int64_t head = blockIdx.y;
    const int64_t first_row = int64_t(blockIdx.x) * kRowsPerBlock;
    const int64_t q_begin = query_start[seq];
    const int64_t q_len = query_start[seq + 1] - q_begin;
    // The whole tile lies past this sequence's chunk. The condition is the
    // same for every thread of the block, so returning before any barrier is safe.
    if (first_row >= q_len) return;

    const int64_t head_dim = shape.head_dim;
    const int64_t kv_head = head / (shape.num_heads / shape.num_kv_heads);
    const int32_t* table = block_tables + seq * shape.max_blocks_per_seq;
    const int64_t first_position = int64_t(context_lens[seq]) - q_len;  // the chunk's row 0

    const int lane = int(threadIdx.x) % kLanesPerRow;
    const int64_t row = first_row + int64_t(threadIdx.x) / kLanesPerRow;
    // Rows past the chunk (the last tile of a chunk whose length is not a
    // multiple of 32) still run: they take part in the barriers and
    // shuffles. They compute with q = 0 at the last row's position and store nothing.
    const bool row_valid = row < q_len;
    const int64_t position = first_position + (row_valid ? row : q_len - 1);
    // Keys this block needs: 0 .. the position of its last valid row.
    const int64_t last_row = min(first_row + kRowsPerBlock, q_len) - 1;
    const int64_t num_keys = first_position + last_row + 1;

    // This lane's slice of the query row, pre-multiplied by 1/sqrt(head_dim)
    // so the scores come out scaled; and of the output accumulator.
    const int64_t q_row_offset = ((q_begin + row) * shape.num_heads + head) * head_dim;
    float q_slice[kDimsPerLane];
    float acc[kDimsPerLane];
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
        const int64_t d = lane + kLanesPerRow * i;
        q_slice[i] =
            (row_valid && d < head_dim) ? __bfloat162float(q[q_row_offset + d]) * scale : 0.0f;
        acc[i] = 0.0f;
    }
    float running_max = -INFINITY;  // fp32 statistics of this row's softmax so far
    float running_sum = 0.0f;

    for (int64_t tile_start = 0; tile_start < num_keys; tile_start += kKeyTile) {
        __syncthreads();  // every thread is done reading the previous tile
        if (threadIdx.x < kKeyTile) {
            const int64_t key = tile_start + threadIdx.x;
            key_offsets[threadIdx.x] =
                key < num_keys ? pool_offset(table, key, shape, kv_head) : -1;
        }
        __syncthreads();
        // Consecutive threads load consecutive dimensions of a key row: each
        // warp reads contiguous bf16 from the pool. Padding and missing keys
        // become zeros, never garbage (0 · NaN would poison the sums).
        for (int e = int(threadIdx.x); e < kKeyTile * kMaxDim; e += kThreads) {
            const int j = e / kMaxDim;  // kMaxDim is a power of two: a shift
            const int d = e % kMaxDim;
            const int64_t offset = key_offsets[j];
            const bool present = offset >= 0 && d < head_dim;
            keys[e] = present ? key_pool[offset + d] : __float2bfloat16(0.0f);
            values[e] = present ? value_pool[offset + d] : __float2bfloat16(0.0f);
        }
        __syncthreads();

        // Scores of this row against the tile's keys. All four teams of a warp
        // read the same key row (a broadcast); the 8 lanes of a team read 8
        // adjacent bf16, so there are no bank conflicts.
        float scores[kKeyTile];
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < kKeyTile; ++j) {
            float partial = 0.0f;
#pragma unroll
            for (int i = 0; i < kDimsPerLane; ++i) {
                partial +=
                    q_slice[i] * __bfloat162float(keys[j * kMaxDim + lane + kLanesPerRow * i]);
            }
            const float score = row_team_sum(partial);
            scores[j] = (tile_start + j <= position) ? score : -INFINITY;  // the causal mask
            tile_max = fmaxf(tile_max, scores[j]);
        }

        // Online softmax. Key 0 is visible to every row, so after the first
        // tile the max is finite; the guard keeps exp(−inf − (−inf)) = NaN out
        // should a row ever see no key at all.
        const float new_max = fmaxf(running_max, tile_max);
        const float base = new_max == -INFINITY ? 0.0f : new_max;
        const float rescale = __expf(running_max - base);  // 0 on the first tile
        float tile_sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= rescale;
#pragma unroll
        for (int j = 0; j < kKeyTile; ++j) {
            const float weight = __expf(scores[j] - base);  // exp(−inf) = 0 for masked keys
            tile_sum += weight;
#pragma unroll
            for (int i = 0; i < kDimsPerLane; ++i) {
                acc[i] += weight * __bfloat162float(values[j * kMaxDim + lane + kLanesPerRow * i]);
            }
        }
        running_sum = running_sum * rescale + tile_sum;
        running_max = new_max;
    }

    if (!row_valid) return;                    // after the last barrier: safe
    const float inv_sum = 1.0f / running_sum;  // >= 1 term of weight 1 (the max): never 0
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
        const int64_t d = lane + kLanesPerRow * i;
        if (d < head_dim) out[q_row_offset + d] = __float2bfloat16(acc[i] * inv_sum);
    }
}

template <int kMaxDim>
void launch(const __nv_bfloat16* q, const __nv_bfloat16* key_pool, const __nv_bfloat16* value_pool,
            const int32_t* block_tables, const int32_t* query_start, const int32_t* context_lens,
            __nv_bfloat16* out, const PagedPrefillShape& shape, cudaStream_t stream) {
    const dim3 grid(unsigned((shape.max_query_len + kRowsPerBlock - 1) / kRowsPerBlock),
                    unsigned(shape.num_heads), unsigned(shape.num_seqs));
    const float scale = 1.0f / std::sqrt(float(shape.head_dim));
    paged_prefill_kernel<kMaxDim><<<grid, kThreads, 0, stream>>>(
        q, key_pool, value_pool, block_tables, query_start, context_lens, out, shape, scale);
}

}  // namespace

void check_prefill_shape(const PagedPrefillShape& shape, const std::string& kernel) {
    if (shape.num_kv_heads < 1 || shape.num_heads % shape.num_kv_heads != 0) {
        throw Error(kernel + ": num_kv_heads must divide num_heads");
    }
    if (shape.block_size < 1) throw Error(kernel + ": block_size must be >= 1");
    if (shape.num_heads > kMaxGridYZ || shape.num_seqs > kMaxGridYZ) {
        throw Error(kernel + ": more than 65535 heads or sequences in one launch");
    }
}

void paged_prefill_attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                  const __nv_bfloat16* value_pool, const int32_t* block_tables,
                                  const int32_t* query_start, const int32_t* context_lens,
                                  __nv_bfloat16* out, const PagedPrefillShape& shape,
                                  cudaStream_t stream) {
    if (shape.head_dim < 1 || shape.head_dim > kMaxHeadDim) {
        throw Error("paged_prefill_attention: head_dim " + std::to_string(shape.head_dim) +
                    " is not supported (1.." + std::to_string(kMaxHeadDim) + ")");
    }
    check_prefill_shape(shape, "paged_prefill_attention");
    if (shape.num_seqs == 0 || shape.max_query_len == 0 || shape.num_heads == 0) return;
    if (shape.head_dim <= 64) {
        launch<64>(q, key_pool, value_pool, block_tables, query_start, context_lens, out, shape,
                   stream);
    } else if (shape.head_dim <= 128) {
        launch<128>(q, key_pool, value_pool, block_tables, query_start, context_lens, out, shape,
                    stream);
    } else {
        launch<256>(q, key_pool, value_pool, block_tables, query_start, context_lens, out, shape,
                    stream);
    }
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
