// paged_prefill_attention_mma.cu — see paged_prefill_attention_mma.h. FlashAttention-2 on
// mma.sync over the paged pool.
//
// Part of the CUDA backend (issue 48; chapter 11.5; Lab 9's GPU track: the
// kernel's tile loop is the student's). The design, after FlashAttention-2
// (Dao 2023):
//
//   grid:   (query tiles of 64 rows, query heads, sequences), x reversed so
//           the last tiles of the chunks — the ones with the most keys under
//           the causal diagonal — start first and the short ones fill in.
//   block:  4 warps; warp w owns query rows 16w..16w+15 of the tile. Its q
//           rows live in registers as mma A fragments for the whole kernel.
//   keys:   64-key tiles of K and V stream through shared memory with
//           cp.async, one buffer each: V(t) loads while the warps compute
//           the scores of tile t, K(t+1) while they do its softmax and p·v.
//   scores: S = q·kᵀ, a 16×64 fp32 tile per warp in 32 registers per lane
//           (8 mma n-tiles of 16×8), from 16×16 q fragments and k fragments
//           that ldmatrix reads straight from the shared K tile.
//   softmax: each lane holds two rows (group, group + 8) of S; the row's
//           other columns sit in the 3 lanes of its quad, so the running max
//           takes two xor-shuffles and never touches shared memory. The
//           running sum stays a per-lane partial (every lane of a quad
//           rescales by the same factor) until one quad sum at the end.
//   p·v:    the fp32 score registers, exponentiated and rounded to bf16, ARE
//           the A fragments of P (the C layout of two 16×8 tiles is the A
//           layout of one 16×16 tile), so P never leaves registers; V's
//           fragments come from ldmatrix.trans.
//   causal: the block needs keys 0..(position of its last row) only; tiles
//           past that are never loaded nor computed (on a fresh prompt that
//           halves the work: about S²/2 of the S² (query, key) pairs). Inside
//           the block, a warp whose rows all precede a tile skips its
//           products, and only tiles that cross a warp's diagonal are masked.
//
// Registers per lane (head_dim 128): q 32, the accumulator 64, the scores 32.
// Shared memory per block: K and V tiles, 64 × (head_dim + 8) bf16 each (the
// 16-byte pad puts the 8 rows an ldmatrix reads in different banks): 34 KB
// at 128.
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_prefill_attention_mma.h"
#include "kernels/cuda/tensor_core_ptx.cuh"

namespace servelab::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kQueryTile = int(kMmaPrefillQueryTile);  // 16 rows per warp
constexpr int kKeyTile = int(kMmaPrefillKeyTile);
constexpr int kScoreTiles = kKeyTile / 8;  // the 16×8 mma tiles of one warp's scores
constexpr int kPadElements = 8;            // 16 bytes per shared row: see the header comment
constexpr unsigned kFullWarp = 0xffffffffu;

// Elements from one key's row to the next in a shared tile.
template <int kDim>
constexpr int kRowStride = kDim + kPadElements;

// The maximum / sum over the 4 lanes of a quad (the lanes that hold one row).
[[maybe_unused]] __device__ float quad_max(float value) {
    value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, 1));
    return fmaxf(value, __shfl_xor_sync(kFullWarp, value, 2));
}

[[maybe_unused]] __device__ float quad_sum(float value) {
    value += __shfl_xor_sync(kFullWarp, value, 1);
    return value + __shfl_xor_sync(kFullWarp, value, 2);
}

// Starts the copy of keys tile_start..tile_start+63 of one KV head into a
// shared tile (K or V: the pools share the layout). Each key's row goes
// through the block table; keys at or past num_keys become zero rows, so
// that p = 0 never meets a garbage value (0 · NaN = NaN). Consecutive
// threads copy consecutive 16-byte pieces of a row; the caller commits.
template <int kDim>
[[maybe_unused]] __device__ void load_tile_async(bf16* tile, const bf16* pool, const int32_t* table,
                                                 int64_t tile_start, int64_t num_keys,
                                                 const PagedPrefillShape& shape, int64_t kv_head) {
    constexpr int kPiecesPerRow = kDim / 8;  // 16-byte pieces of one key's row
    constexpr int kRowsPerPass = kThreads / kPiecesPerRow;
    const int column = (int(threadIdx.x) % kPiecesPerRow) * 8;
    // 32-bit index arithmetic: a 64-bit division costs about as many issue
    // slots as this warp's mma work on the tile. Keys and pool rows fit
    // (the runner keeps num_blocks · block_size < 2^31).
    const auto block_size = uint32_t(shape.block_size);
    for (int row = int(threadIdx.x) / kPiecesPerRow; row < kKeyTile; row += kRowsPerPass) {
        const auto key = uint32_t(tile_start + row);
        const bool present = key < num_keys;
        const bf16* source = pool;  // a valid address for the zero-fill form
        if (present) {
            const uint32_t pool_row =
                uint32_t(table[key / block_size]) * block_size + key % block_size;
            source = pool + (int64_t(pool_row) * shape.num_kv_heads + kv_head) * kDim + column;
        }
        cp_async_16_bytes(tile + row * kRowStride<kDim> + column, source, present);
    }
}

// This lane's A fragments of the warp's 16 query rows, one per 16 dimensions.
// Rows past the chunk are zeros (their scores are computed and never stored).
template <int kDim>
[[maybe_unused]] __device__ void load_q_fragments(uint32_t (&q_frag)[kDim / 16][4], const bf16* q,
                                                  int64_t q_begin, int64_t q_len, int64_t row0,
                                                  int64_t head, int64_t num_heads) {
    const int group = int(threadIdx.x % 32) / 4;
    const int pair = 2 * (int(threadIdx.x) % 4);
    const int64_t rows[2] = {row0 + group, row0 + group + 8};
    for (int half = 0; half < 2; ++half) {
        const bool valid = rows[half] < q_len;
        const bf16* row = q + ((q_begin + rows[half]) * num_heads + head) * kDim;
#pragma unroll
        for (int k = 0; k < kDim / 16; ++k) {
            // A registers: a0/a1 columns 16k + pair, a2/a3 columns 16k + 8 + pair.
            q_frag[k][half] = valid ? *reinterpret_cast<const uint32_t*>(row + 16 * k + pair) : 0u;
            q_frag[k][half + 2] =
                valid ? *reinterpret_cast<const uint32_t*>(row + 16 * k + 8 + pair) : 0u;
        }
    }
}

// scores = q · kᵀ for the warp's 16 rows and the tile's 64 keys (unscaled).
// One ldmatrix.x4 reads the k fragments of 8 keys × 32 dimensions: the B
// registers of two consecutive 16-dimension steps.
template <int kDim>
[[maybe_unused]] __device__ void warp_scores(float (&scores)[kScoreTiles][4],
                                             const uint32_t (&q_frag)[kDim / 16][4],
                                             const bf16* keys) {
    const int lane = int(threadIdx.x % 32);
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) scores[n][e] = 0.0f;
#pragma unroll
        for (int k = 0; k < kDim / 16; k += 2) {
            uint32_t b[4];
            ldmatrix_x4(b, keys + (8 * n + lane % 8) * kRowStride<kDim> + 16 * k + 8 * (lane / 8));
            mma_bf16_16x8x16(scores[n], q_frag[k], b[0], b[1]);
            mma_bf16_16x8x16(scores[n], q_frag[k + 1], b[2], b[3]);
        }
    }
}

// acc += P · V for the tile. p_frag[j]: the A fragment of P's keys
// 16j..16j+15. One ldmatrix.x4.trans reads the v fragments of 16 keys × 16
// dimensions: the B registers of two 8-dimension output tiles.
template <int kDim>
[[maybe_unused]] __device__ void warp_accumulate_pv(float (&acc)[kDim / 8][4],
                                                    const uint32_t (&p_frag)[kKeyTile / 16][4],
                                                    const bf16* values) {
    const int lane = int(threadIdx.x % 32);
#pragma unroll
    for (int j = 0; j < kKeyTile / 16; ++j) {
#pragma unroll
        for (int n = 0; n < kDim / 8; n += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, values +
                                     (16 * j + lane % 8 + 8 * ((lane / 8) % 2)) * kRowStride<kDim> +
                                     8 * n + 8 * (lane / 16));
            mma_bf16_16x8x16(acc[n], p_frag[j], b[0], b[1]);
            mma_bf16_16x8x16(acc[n + 1], p_frag[j], b[2], b[3]);
        }
    }
}

// The exponentiated scores of two 16×8 C tiles as one 16×16 A fragment of P.
[[maybe_unused]] __device__ void scores_to_p_fragments(const float (&p)[kScoreTiles][4],
                                                       uint32_t (&p_frag)[kKeyTile / 16][4]) {
#pragma unroll
    for (int j = 0; j < kKeyTile / 16; ++j) {
        p_frag[j][0] = pack_bf16x2(p[2 * j][0], p[2 * j][1]);          // row group, keys 0..7
        p_frag[j][1] = pack_bf16x2(p[2 * j][2], p[2 * j][3]);          // row group + 8
        p_frag[j][2] = pack_bf16x2(p[2 * j + 1][0], p[2 * j + 1][1]);  // row group, keys 8..15
        p_frag[j][3] = pack_bf16x2(p[2 * j + 1][2], p[2 * j + 1][3]);
    }
}

// out = acc / sum for this lane's two rows, rounded to bf16 once.
template <int kDim>
[[maybe_unused]] __device__ void store_output(bf16* out, const float (&acc)[kDim / 8][4],
                                              const float (&row_sum)[2], int64_t q_begin,
                                              int64_t q_len, int64_t row0, int64_t head,
                                              int64_t num_heads) {
    const int group = int(threadIdx.x % 32) / 4;
    const int pair = 2 * (int(threadIdx.x) % 4);
    for (int half = 0; half < 2; ++half) {
        const int64_t row = row0 + group + 8 * half;
        if (row >= q_len) continue;
        const float inv_sum = 1.0f / row_sum[half];  // key 0 is always seen: sum >= 1
        bf16* out_row = out + ((q_begin + row) * num_heads + head) * kDim;
#pragma unroll
        for (int n = 0; n < kDim / 8; ++n) {
            *reinterpret_cast<__nv_bfloat162*>(out_row + 8 * n + pair) =
                __floats2bfloat162_rn(acc[n][2 * half] * inv_sum, acc[n][2 * half + 1] * inv_sum);
        }
    }
}

// scale_log2: log2(e) / sqrt(head_dim). Scores are kept in base-2 units, so
// every exponential is one exp2f.
template <int kDim>
__global__ void __launch_bounds__(kThreads)
    paged_prefill_mma_kernel(const bf16* q, const bf16* key_pool, const bf16* value_pool,
                             const int32_t* block_tables, const int32_t* query_start,
                             const int32_t* context_lens, bf16* out, PagedPrefillShape shape,
                             float scale_log2) {
    // BEGIN SOLUTION lab09 (paged_prefill_mma_kernel)
    // HINT: grid (query tile, head, sequence), x reversed; warp w owns rows 16w..16w+15.
    // HINT: causal skip: load only the tiles of keys 0..(position of the block's last row).
    // HINT: per tile: wait K, warp_scores, barrier, load the next K;
    // HINT: scale, mask key > position; m_new = max(m, quad_max(tile max));
    // HINT: r = exp2(m - m_new); acc *= r; sum = sum * r + sum of p;
    // HINT: scores_to_p_fragments; wait V, warp_accumulate_pv, barrier, load the next V.
    __shared__ alignas(16) bf16 keys[kKeyTile * kRowStride<kDim>];
    __shared__ alignas(16) bf16 values[kKeyTile * kRowStride<kDim>];

    const int64_t seq = blockIdx.z;
    const int64_t head = blockIdx.y;
    const int64_t first_row = int64_t(gridDim.x - 1 - blockIdx.x) * kQueryTile;
    const int64_t q_begin = query_start[seq];
    const int64_t q_len = query_start[seq + 1] - q_begin;
    // The same for the whole block, so returning before any barrier is safe.
    if (first_row >= q_len) return;

    const int64_t kv_head = head / (shape.num_heads / shape.num_kv_heads);
    const int32_t* table = block_tables + seq * shape.max_blocks_per_seq;
    const int64_t first_position = int64_t(context_lens[seq]) - q_len;  // the chunk's row 0
    // Causal tile skipping: the block's last row sees keys 0..its position;
    // the tiles after that are never loaded.
    const int64_t last_row = min(first_row + kQueryTile, q_len) - 1;
    const int64_t num_keys = first_position + last_row + 1;
    const int64_t num_tiles = (num_keys + kKeyTile - 1) / kKeyTile;

    const int warp = int(threadIdx.x) / 32;
    const int lane = int(threadIdx.x) % 32;
    const int64_t warp_row0 = first_row + 16 * warp;
    // This lane's two rows (group, group + 8) and their positions. Rows past
    // the chunk compute like the others (their q is zero) and store nothing.
    const int64_t positions[2] = {first_position + warp_row0 + lane / 4,
                                  first_position + warp_row0 + lane / 4 + 8};
    const int64_t warp_first_position = first_position + warp_row0;

    uint32_t q_frag[kDim / 16][4];
    load_q_fragments<kDim>(q_frag, q, q_begin, q_len, warp_row0, head, shape.num_heads);
    float acc[kDim / 8][4];
#pragma unroll
    for (int n = 0; n < kDim / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
    }
    float row_max[2] = {-INFINITY, -INFINITY};  // base-2 units
    float row_sum[2] = {0.0f, 0.0f};            // this lane's share of its rows' sums

    // Groups are committed K(0), V(0), K(1), V(1), ...: "wait until one is
    // still in flight" always means "the older of the two is here".
    load_tile_async<kDim>(keys, key_pool, table, 0, num_keys, shape, kv_head);
    cp_async_commit();
    load_tile_async<kDim>(values, value_pool, table, 0, num_keys, shape, kv_head);
    cp_async_commit();

    for (int64_t tile = 0; tile < num_tiles; ++tile) {
        const int64_t tile_start = tile * kKeyTile;
        // Every row of this warp precedes the tile: nothing to compute (the
        // block still loads it, for the warps below the diagonal).
        const bool warp_sees_tile = tile_start <= warp_first_position + 15;
        const bool crosses_diagonal = tile_start + kKeyTile - 1 > warp_first_position;

        cp_async_wait<1>();  // K(tile) is here (this thread's pieces)
        __syncthreads();     // ... and every other thread's
        float scores[kScoreTiles][4];
        if (warp_sees_tile) warp_scores<kDim>(scores, q_frag, keys);
        __syncthreads();  // K is read: the next tile's keys may overwrite it
        if (tile + 1 < num_tiles) {
            load_tile_async<kDim>(keys, key_pool, table, tile_start + kKeyTile, num_keys, shape,
                                  kv_head);
        }
        cp_async_commit();  // (empty on the last tile: keeps the counting uniform)

        uint32_t p_frag[kKeyTile / 16][4];
        if (warp_sees_tile) {
#pragma unroll
            for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int64_t key = tile_start + 8 * n + 2 * (lane % 4) + (e % 2);
                    const bool masked = crosses_diagonal && key > positions[e / 2];
                    scores[n][e] = masked ? -INFINITY : scores[n][e] * scale_log2;
                }
            }
            // The online softmax, row by row (half 0: row group, 1: row group + 8).
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float tile_max = -INFINITY;
#pragma unroll
                for (int n = 0; n < kScoreTiles; ++n) {
                    tile_max = fmaxf(tile_max, fmaxf(scores[n][2 * half], scores[n][2 * half + 1]));
                }
                const float new_max = fmaxf(row_max[half], quad_max(tile_max));
                // A row that has seen no key yet keeps max −inf; exp2(−inf − 0)
                // = 0 then, where −inf − (−inf) would be NaN.
                const float base = new_max == -INFINITY ? 0.0f : new_max;
                const float rescale = exp2f(row_max[half] - base);  // 0 on the first tile
                row_max[half] = new_max;
#pragma unroll
                for (int n = 0; n < kDim / 8; ++n) {
                    acc[n][2 * half] *= rescale;
                    acc[n][2 * half + 1] *= rescale;
                }
                float tile_sum = 0.0f;
#pragma unroll
                for (int n = 0; n < kScoreTiles; ++n) {
                    scores[n][2 * half] = exp2f(scores[n][2 * half] - base);
                    scores[n][2 * half + 1] = exp2f(scores[n][2 * half + 1] - base);
                    tile_sum += scores[n][2 * half] + scores[n][2 * half + 1];
                }
                row_sum[half] = row_sum[half] * rescale + tile_sum;
            }
            scores_to_p_fragments(scores, p_frag);
        }

        cp_async_wait<1>();  // V(tile) is here; K(tile + 1) may still be in flight
        __syncthreads();
        if (warp_sees_tile) warp_accumulate_pv<kDim>(acc, p_frag, values);
        __syncthreads();  // V is read
        if (tile + 1 < num_tiles) {
            load_tile_async<kDim>(values, value_pool, table, tile_start + kKeyTile, num_keys, shape,
                                  kv_head);
        }
        cp_async_commit();
    }
    cp_async_wait<0>();  // nothing may be left in flight when the block exits

    const float sums[2] = {quad_sum(row_sum[0]), quad_sum(row_sum[1])};
    store_output<kDim>(out, acc, sums, q_begin, q_len, warp_row0, head, shape.num_heads);
    // END SOLUTION
}

template <int kDim>
void launch(const bf16* q, const bf16* key_pool, const bf16* value_pool,
            const int32_t* block_tables, const int32_t* query_start, const int32_t* context_lens,
            bf16* out, const PagedPrefillShape& shape, cudaStream_t stream) {
    const dim3 grid(unsigned((shape.max_query_len + kQueryTile - 1) / kQueryTile),
                    unsigned(shape.num_heads), unsigned(shape.num_seqs));
    const float scale_log2 = 1.4426950408889634f / std::sqrt(float(kDim));  // log2(e) / sqrt(d)
    paged_prefill_mma_kernel<kDim><<<grid, kThreads, 0, stream>>>(
        q, key_pool, value_pool, block_tables, query_start, context_lens, out, shape, scale_log2);
}

}  // namespace

bool paged_prefill_mma_supports_head_dim(int64_t head_dim) {
    return head_dim == 64 || head_dim == 128;
}

void paged_prefill_attention_mma_bf16(const bf16* q, const bf16* key_pool, const bf16* value_pool,
                                      const int32_t* block_tables, const int32_t* query_start,
                                      const int32_t* context_lens, bf16* out,
                                      const PagedPrefillShape& shape, cudaStream_t stream) {
    if (!paged_prefill_mma_supports_head_dim(shape.head_dim)) {
        throw Error("paged_prefill_attention_mma: head_dim " + std::to_string(shape.head_dim) +
                    " is not supported (64 or 128; the scalar kernel takes the others)");
    }
    check_prefill_shape(shape, "paged_prefill_attention_mma");
    if (shape.num_seqs == 0 || shape.max_query_len == 0 || shape.num_heads == 0) return;
    if (shape.head_dim == 64) {
        launch<64>(q, key_pool, value_pool, block_tables, query_start, context_lens, out, shape,
                   stream);
    } else {
        launch<128>(q, key_pool, value_pool, block_tables, query_start, context_lens, out, shape,
                    stream);
    }
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
