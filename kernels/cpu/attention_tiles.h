// attention_tiles.h — the inner products of tiled attention: one tile of scores Q·Kᵀ and one
// tile of the weighted sum P·V, for a tile of query rows over a paged cache.
//
// Part of the kernels (Lab 9, FlashAttention; chapter 11.7). These are the
// arithmetic the lab's exercises call, not an exercise themselves: the
// online softmax (online_softmax.h), the tile loops of prefill
// (flash_attention.h) and the key split of decode (flash_decoding.h) are
// built on them. A tile is kKeyTile keys and every query row of the caller's
// tile: a row is one query token and one query head, and all rows of a call
// read the same KV head (the heads of one GQA group, Lab 3), so each key and
// value row is fetched once per tile and serves every row while it is in L1.
//
// Each (row, key) score and each row's sum over the tile's keys are
// computed the same way whatever else is in the call, and whatever the
// number of rows: a query's attention has the same bits alone or in a tile
// (paged_flash_attention.h says why that matters). AVX-512 where the CPU has
// it and head_dim is 64 or 128, plain loops otherwise.
#pragma once

#include <cstdint>
#include <vector>

namespace servelab {

// Keys per tile: one 512-bit register of scores.
inline constexpr int64_t kKeyTile = 16;

// One KV head's keys and values in a paged pool (paged_attention.h).
struct KvRows {
    const float* keys;        // the pool's row 0, at this KV head's columns
    const float* values;      // likewise
    const int64_t* pool_row;  // logical key j's row in the pool (map_pool_rows)
    int64_t row_stride;       // floats from one pool row to the next
    int64_t num_keys;         // keys the cache holds: pool_row's length
    int64_t head_dim;
};

// A tile of query rows, all reading one KV head.
struct QueryRows {
    const float* q;          // num_rows × head_dim, already scaled by 1/sqrt(head_dim)
    const int64_t* visible;  // row r may see keys [0, visible[r]): the causal mask
    int64_t num_rows;
};

// Per row, a softmax over the keys seen so far: the running max m, the sum
// l of exp(s − m), and the output o = Σ exp(s − m)·v, not yet divided by l.
// No key seen: m = −inf, l = 0, o = 0.
struct SoftmaxRows {
    std::vector<float> max;  // num_rows
    std::vector<float> sum;  // num_rows
    std::vector<float> out;  // num_rows × head_dim

    // Every row back to "no key seen" (keeps the memory: no allocation per call).
    void reset(int64_t num_rows, int64_t head_dim);
};

// scores[r · kKeyTile + jj] = q_r · k_{first_key + jj} for jj < num_keys
// (1 <= num_keys <= kKeyTile); lanes num_keys and above are −inf. Asks the
// memory for the next tile's key rows while it works.
void tile_scores(const QueryRows& rows, const KvRows& kv, int64_t first_key, int64_t num_keys,
                 float* scores);

// out[r] += Σ_{jj < live[r]} weights[r · kKeyTile + jj] · v_{first_key + jj}, in key
// order, for every row r of the num_rows (out: num_rows × head_dim).
void tile_accumulate(const float* weights, const int64_t* live, const KvRows& kv, int64_t first_key,
                     int64_t num_rows, float* out);

// x[i] = e^x[i] in place; exactly 0 where x[i] < −87 (e^−87 is below float's
// smallest normal number), so exp(−inf) is 0. Returns Σ e^x[i], summed in a
// fixed order (the same bits for the same inputs, wherever it is called).
float exp_in_place(float* x, int64_t n);

// The largest of x[0 .. n), −inf for n = 0 or all −inf.
float max_of(const float* x, int64_t n);

}  // namespace servelab
