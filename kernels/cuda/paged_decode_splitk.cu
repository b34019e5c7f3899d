// paged_decode_splitk.cu — the fast decode attention of paged_decode_attention.h: split-K,
// GQA-aware.
//
// Part of the CUDA backend (issue 7; chapter 11.4, PagedAttention, and
// flash-decoding, Dao et al. 2023). Two kernels:
//
//   1. partial: grid (sequences, KV heads, splits). Block (s, g, p) takes
//      piece p of sequence s's context (max(ceil(len / splits), the minimum
//      piece) tokens, worked out from context_lens at run time; splits past
//      the last piece have nothing to do) and all query heads that share KV
//      head g. Keys and values stream through shared memory kKeyTile at a time,
//      so each row is read from the pool once for the whole GQA group. Per
//      query head it keeps a running max and sum (online softmax) and an
//      unnormalized output, and writes those three to the workspace.
//   2. merge: grid (sequences, query heads). Rescales each piece's partial
//      output by exp(piece max − overall max), adds them, divides by the
//      likewise rescaled sum of sums and rounds to bf16 once.
//
// Neither grid depends on the context lengths, so a CUDA graph can capture
// the pair once and replay it while the contexts grow.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_decode_attention.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 128;  // partial kernel: 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kKeyTile = 32;  // = the warp size: in the softmax step lane j owns key j
constexpr int kMergeThreads = 128;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int64_t kMaxGridYZ = 65535;               // gridDim.y and gridDim.z limits
constexpr int64_t kDefaultSharedBytes = 48 * 1024;  // more needs an opt-in per kernel
// paged_decode_num_splits aims at this many partial-kernel blocks per SM
// (more than fit at once: the rest queue up as earlier ones finish). Each
// block walks its piece one tile at a time, waiting on each tile's loads,
// so it is many short pieces in flight, not a few long ones, that keep the
// memory busy. Chosen from `cuda_kernel_bench --splitk-sweep` on an H200
// (docs/perf.md): with SmolLM2's heads, 4 splits at batch 64 and 4096
// tokens took 384 us against 357 at 32, and 3 splits at batch 256 took
// 1,454 us against 1,302 at 8.
constexpr int64_t kBlocksPerSm = 64;
static_assert(kDecodeMinPieceTokens % kKeyTile == 0, "a minimum piece is whole key tiles");

// Piece `split` of a context: keys [begin, end); empty when begin >= end.
// Both kernels call this, so they agree on which pieces exist.
struct Piece {
    int64_t begin = 0;
    int64_t end = 0;
};

// A piece's length: the context shared evenly among the splits, but never
// under min_piece_tokens. The grid's split count is fixed when a graph is
// captured, sized for the longest context the model allows; the floor is
// what stops a 160-token context from becoming 64 pieces of 3 keys.
__device__ int64_t piece_len_of(int64_t context_len, int64_t num_splits, int64_t min_piece_tokens) {
    return max((context_len + num_splits - 1) / num_splits, min_piece_tokens);
}

__device__ Piece piece_of(int64_t context_len, int64_t num_splits, int64_t min_piece_tokens,
                          int64_t split) {
    const int64_t piece_len = piece_len_of(context_len, num_splits, min_piece_tokens);
    const int64_t begin = split * piece_len;
    return {begin, min(context_len, begin + piece_len)};
}

// The non-empty pieces are splits 0 .. num_pieces − 1: piece p has keys iff
// p · piece_len < len, i.e. p < ceil(len / piece_len) (<= num_splits). For a
// context of 10 keys, 4 splits and no floor (1): pieces of 3, 3, 3 and 1
// keys; for 10 keys and 8 splits: pieces of 2 keys, splits 5..7 empty; for
// 160 keys, 64 splits and a floor of 32: five pieces of 32, splits 5..63 empty.
__device__ int64_t num_pieces_of(int64_t context_len, int64_t num_splits,
                                 int64_t min_piece_tokens) {
    if (context_len <= 0) return 0;
    const int64_t piece_len = piece_len_of(context_len, num_splits, min_piece_tokens);
    return (context_len + piece_len - 1) / piece_len;
}

// How the partial kernel's dynamic shared memory is cut up (byte offsets).
// The 8-byte key offsets come first so they are aligned; the bf16 tiles last.
struct SharedLayout {
    int64_t key_offsets = 0;  // kKeyTile int64: each key's row in the pools, −1 = none
    int64_t q = 0;            // group · head_dim floats: the group's queries, pre-scaled
    int64_t acc = 0;          // group · head_dim floats: unnormalized outputs
    int64_t probs = 0;        // group · kKeyTile floats: the tile's scores, then weights
    int64_t stats = 0;        // 3 · group floats: running max, running sum, rescale
    int64_t keys = 0;         // kKeyTile · key_stride bf16
    int64_t values = 0;       // kKeyTile · key_stride bf16
    int64_t bytes = 0;
};

// Rows of the key and value tiles are padded by one 32-bit word (2 bf16): in
// the score step lane j reads dimension d of key j, and with an odd number of
// words per row the 32 lanes fall into 32 different banks.
__host__ __device__ int64_t key_stride_of(int64_t head_dim) {
    return head_dim + 2;
}

__host__ __device__ SharedLayout shared_layout(int64_t group, int64_t head_dim) {
    SharedLayout layout;
    const int64_t f = int64_t(sizeof(float));
    const int64_t tile_bytes = kKeyTile * key_stride_of(head_dim) * int64_t(sizeof(__nv_bfloat16));
    layout.key_offsets = 0;
    layout.q = kKeyTile * int64_t(sizeof(int64_t));
    layout.acc = layout.q + group * head_dim * f;
    layout.probs = layout.acc + group * head_dim * f;
    layout.stats = layout.probs + group * kKeyTile * f;
    layout.keys = layout.stats + 3 * group * f;
    layout.values = layout.keys + tile_bytes;
    layout.bytes = layout.values + tile_bytes;
    return layout;
}

__device__ float warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, offset));
    return value;
}

__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullWarp, value, offset);
    return value;
}

// Where the partial results live in the workspace: per (sequence, query
// head, split) head_dim floats of output, then one max, then one sum.
struct Workspace {
    float* out;  // (num_seqs, num_heads, num_splits, head_dim)
    float* max;  // (num_seqs, num_heads, num_splits)
    float* sum;  // (num_seqs, num_heads, num_splits)
};

Workspace workspace_of(float* workspace, const PagedDecodeShape& shape, int64_t num_splits) {
    const int64_t rows = shape.num_seqs * shape.num_heads * num_splits;
    return {workspace, workspace + rows * shape.head_dim, workspace + rows * (shape.head_dim + 1)};
}

__global__ void __launch_bounds__(kThreads)
    splitk_partial_kernel(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                          const __nv_bfloat16* value_pool, const int32_t* block_tables,
                          const int32_t* context_lens, PagedDecodeShape shape,
                          int64_t min_piece_tokens, float scale, Workspace workspace) {
    extern __shared__ __align__(16) unsigned char shared[];
    const int64_t seq = blockIdx.x;
    const int64_t kv_head = blockIdx.y;
    const int64_t split = blockIdx.z;
    const int64_t num_splits = gridDim.z;
    const Piece piece = piece_of(context_lens[seq], num_splits, min_piece_tokens, split);
    // No keys for this piece (a short or empty context): nothing to do, and
    // the merge does not read this piece. Uniform over the block.
    if (piece.begin >= piece.end) return;

    const int64_t head_dim = shape.head_dim;
    const int64_t group = shape.num_heads / shape.num_kv_heads;  // query heads per KV head
    const int64_t first_head = kv_head * group;                  // the group's heads are adjacent
    const int64_t key_stride = key_stride_of(head_dim);
    const SharedLayout layout = shared_layout(group, head_dim);
    auto* key_offsets = reinterpret_cast<int64_t*>(shared + layout.key_offsets);
    auto* q_s = reinterpret_cast<float*>(shared + layout.q);
    auto* acc = reinterpret_cast<float*>(shared + layout.acc);
    auto* probs = reinterpret_cast<float*>(shared + layout.probs);
    auto* running_max = reinterpret_cast<float*>(shared + layout.stats);
    float* running_sum = running_max + group;
    float* rescale = running_max + 2 * group;
    auto* keys = reinterpret_cast<__nv_bfloat16*>(shared + layout.keys);
    auto* values = reinterpret_cast<__nv_bfloat16*>(shared + layout.values);
    const int tid = int(threadIdx.x);
    const int warp = tid / 32;
    const int lane = tid % 32;

    // The group's query rows are consecutive in q: (seq, first_head .. + group).
    const __nv_bfloat16* q_group = q + (seq * shape.num_heads + first_head) * head_dim;
    for (int64_t i = tid; i < group * head_dim; i += kThreads) {
        q_s[i] = __bfloat162float(q_group[i]) * scale;  // scaled once, not every score
        acc[i] = 0.0f;
    }
    for (int64_t g = tid; g < group; g += kThreads) {
        running_max[g] = -INFINITY;
        running_sum[g] = 0.0f;
    }
    // (the barrier at the top of the first tile publishes these)

    const int32_t* table = block_tables + seq * shape.max_blocks_per_seq;
    const int64_t pool_row_stride = shape.num_kv_heads * head_dim;
    for (int64_t tile_start = piece.begin; tile_start < piece.end; tile_start += kKeyTile) {
        __syncthreads();  // the previous tile is no longer read
        if (tid < kKeyTile) {
            const int64_t key = tile_start + tid;
            int64_t offset = -1;
            if (key < piece.end) {
                const int64_t pool_row = int64_t(table[key / shape.block_size]) * shape.block_size +
                                         key % shape.block_size;
                offset = pool_row * pool_row_stride + kv_head * head_dim;
            }
            key_offsets[tid] = offset;
        }
        __syncthreads();
        // Consecutive threads load consecutive dimensions of a row: each warp
        // reads contiguous memory. Keys past the piece become zeros.
        for (int64_t e = tid; e < kKeyTile * head_dim; e += kThreads) {
            const int64_t j = e / head_dim;
            const int64_t d = e % head_dim;
            const int64_t offset = key_offsets[j];
            keys[j * key_stride + d] = offset >= 0 ? key_pool[offset + d] : __float2bfloat16(0.0f);
            values[j * key_stride + d] =
                offset >= 0 ? value_pool[offset + d] : __float2bfloat16(0.0f);
        }
        __syncthreads();

        // Scores: thread ↔ (query head g, key j). A warp covers the 32 keys of
        // one head: q_s is a broadcast, the keys conflict-free (padded rows).
        for (int64_t i = tid; i < group * kKeyTile; i += kThreads) {
            const int64_t g = i / kKeyTile;
            const int64_t j = i % kKeyTile;
            float score = -INFINITY;  // a key past the piece weighs exp(−inf) = 0
            if (key_offsets[j] >= 0) {
                score = 0.0f;
                for (int64_t d = 0; d < head_dim; ++d) {
                    score += q_s[g * head_dim + d] * __bfloat162float(keys[j * key_stride + d]);
                }
            }
            probs[i] = score;
        }
        __syncthreads();

        // Online softmax, one warp per query head (the loop bound is the same
        // for all lanes of a warp, so the full-warp shuffles are safe). The
        // tile holds at least one key of the piece (tile_start < piece.end),
        // so new_max is finite; on the first tile old_max is −inf and the
        // rescale exp(−inf) = 0 multiplies the zero accumulator.
        for (int64_t g = warp; g < group; g += kWarps) {
            const float score = probs[g * kKeyTile + lane];
            const float old_max = running_max[g];  // read by every lane before lane 0 writes
            const float new_max = fmaxf(old_max, warp_max(score));
            const float weight = __expf(score - new_max);
            const float tile_sum = warp_sum(weight);  // its shuffles also order the read above
            probs[g * kKeyTile + lane] = weight;
            if (lane == 0) {
                const float factor = __expf(old_max - new_max);
                rescale[g] = factor;
                running_sum[g] = running_sum[g] * factor + tile_sum;
                running_max[g] = new_max;
            }
        }
        __syncthreads();

        // acc[g, d] = acc[g, d] · rescale[g] + Σ_j weight[g, j] · v[j, d]. Each
        // thread always owns the same elements (i = tid + k · kThreads), so no
        // two threads ever write one element and acc needs no extra barrier.
        for (int64_t i = tid; i < group * head_dim; i += kThreads) {
            const int64_t g = i / head_dim;
            const int64_t d = i % head_dim;
            float sum = acc[i] * rescale[g];
            for (int j = 0; j < kKeyTile; ++j) {
                sum += probs[g * kKeyTile + j] * __bfloat162float(values[j * key_stride + d]);
            }
            acc[i] = sum;
        }
    }

    // acc elements are written back by the thread that owns them; the running
    // statistics were published by the barrier before the last weighted sum.
    const int64_t first_row = (seq * shape.num_heads + first_head) * num_splits + split;
    for (int64_t i = tid; i < group * head_dim; i += kThreads) {
        const int64_t g = i / head_dim;
        const int64_t d = i % head_dim;
        workspace.out[(first_row + g * num_splits) * head_dim + d] = acc[i];
    }
    for (int64_t g = tid; g < group; g += kThreads) {
        workspace.max[first_row + g * num_splits] = running_max[g];
        workspace.sum[first_row + g * num_splits] = running_sum[g];
    }
}

// One block per (sequence, query head); threads over the output dimensions.
// Each thread recomputes the pieces' weights exp(max_p − overall max): a few
// dozen exps per dimension, cheaper than a barrier and a shared array sized
// by num_splits.
__global__ void __launch_bounds__(kMergeThreads)
    splitk_merge_kernel(const int32_t* context_lens, Workspace workspace, __nv_bfloat16* out,
                        int64_t num_heads, int64_t head_dim, int64_t num_splits,
                        int64_t min_piece_tokens) {
    const int64_t seq = blockIdx.x;
    const int64_t head = blockIdx.y;
    const int64_t context_len = context_lens[seq];
    __nv_bfloat16* out_row = out + (seq * num_heads + head) * head_dim;
    if (context_len == 0) {  // an unused row of a fixed-size batch: zeros, never stale data
        for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
            out_row[d] = __float2bfloat16(0.0f);
        }
        return;
    }
    // Only the non-empty pieces were written by the partial kernel.
    const int64_t num_pieces = num_pieces_of(context_len, num_splits, min_piece_tokens);
    const int64_t first = (seq * num_heads + head) * num_splits;  // this head's split 0
    float overall_max = -INFINITY;
    for (int64_t p = 0; p < num_pieces; ++p)
        overall_max = fmaxf(overall_max, workspace.max[first + p]);
    float total_sum = 0.0f;
    for (int64_t p = 0; p < num_pieces; ++p) {
        total_sum += workspace.sum[first + p] * __expf(workspace.max[first + p] - overall_max);
    }
    const float inv_sum = 1.0f / total_sum;  // the piece holding the max adds >= 1
    for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float value = 0.0f;
        for (int64_t p = 0; p < num_pieces; ++p) {
            const float weight = __expf(workspace.max[first + p] - overall_max);
            value += workspace.out[(first + p) * head_dim + d] * weight;
        }
        out_row[d] = __float2bfloat16(value * inv_sum);
    }
}

}  // namespace

// floor(len / kDecodeMinPieceTokens), between 1 and kDecodeMaxSplits: every
// piece of the longest context then holds at least kDecodeMinPieceTokens keys.
int64_t paged_decode_max_splits(int64_t max_context_len) {
    return std::clamp<int64_t>(max_context_len / kDecodeMinPieceTokens, 1, kDecodeMaxSplits);
}

// Splits enough that (sequences × KV heads × splits) reaches kBlocksPerSm
// blocks per SM, capped by paged_decode_max_splits. For SmolLM2 (3 KV heads)
// on an H200 (132 SMs) with graphs sized for 8192 tokens: batch 1 and 8 get
// 64 splits, batch 64 gets 44 and batch 256 gets 11. A 1,000-token context
// at batch 1, run directly, gets 31 (the floor on piece length binds).
int64_t paged_decode_num_splits(const PagedDecodeShape& shape, int64_t num_sms) {
    const int64_t rows = std::max<int64_t>(1, shape.num_seqs * shape.num_kv_heads);
    const int64_t target_blocks = kBlocksPerSm * std::max<int64_t>(1, num_sms);
    const int64_t wanted = (target_blocks + rows - 1) / rows;
    return std::clamp<int64_t>(wanted, 1, paged_decode_max_splits(shape.max_context_len));
}

int64_t paged_decode_workspace_floats(const PagedDecodeShape& shape, int64_t num_splits) {
    return shape.num_seqs * shape.num_heads * num_splits * (shape.head_dim + 2);
}

void paged_decode_attention_splitk_bf16(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                        const __nv_bfloat16* value_pool,
                                        const int32_t* block_tables, const int32_t* context_lens,
                                        __nv_bfloat16* out, const PagedDecodeShape& shape,
                                        int64_t num_splits, int64_t min_piece_tokens,
                                        float* workspace, cudaStream_t stream) {
    if (shape.num_kv_heads < 1 || shape.num_heads % shape.num_kv_heads != 0) {
        throw Error("paged_decode_attention_splitk: num_kv_heads must divide num_heads");
    }
    if (num_splits < 1 || num_splits > kMaxGridYZ) {
        throw Error("paged_decode_attention_splitk: num_splits " + std::to_string(num_splits) +
                    " outside 1..65535");
    }
    if (min_piece_tokens < 1) {
        throw Error("paged_decode_attention_splitk: min_piece_tokens " +
                    std::to_string(min_piece_tokens) + " must be >= 1");
    }
    if (shape.head_dim < 1 || shape.block_size < 1) {
        throw Error("paged_decode_attention_splitk: head_dim and block_size must be >= 1");
    }
    if (shape.num_heads > kMaxGridYZ) {
        throw Error("paged_decode_attention_splitk: more than 65535 heads");
    }
    if (shape.num_seqs == 0 || shape.num_heads == 0) return;

    const int64_t group = shape.num_heads / shape.num_kv_heads;
    const SharedLayout layout = shared_layout(group, shape.head_dim);
    if (layout.bytes > kDefaultSharedBytes) {
        // Large groups or heads (e.g. 32 query heads on one KV head, 256
        // wide) need more than the default 48 KB; Hopper allows up to 227 KB
        // per block after this opt-in. Beyond that the call fails and throws.
        SERVELAB_CUDA_CHECK(cudaFuncSetAttribute(
            splitk_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(layout.bytes)));
    }
    const Workspace parts = workspace_of(workspace, shape, num_splits);
    const float scale = 1.0f / std::sqrt(float(shape.head_dim));

    const dim3 partial_grid(unsigned(shape.num_seqs), unsigned(shape.num_kv_heads),
                            static_cast<unsigned>(num_splits));
    splitk_partial_kernel<<<partial_grid, kThreads, size_t(layout.bytes), stream>>>(
        q, key_pool, value_pool, block_tables, context_lens, shape, min_piece_tokens, scale, parts);
    SERVELAB_CUDA_CHECK(cudaGetLastError());

    const dim3 merge_grid(unsigned(shape.num_seqs), unsigned(shape.num_heads));
    splitk_merge_kernel<<<merge_grid, kMergeThreads, 0, stream>>>(
        context_lens, parts, out, shape.num_heads, shape.head_dim, num_splits, min_piece_tokens);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
