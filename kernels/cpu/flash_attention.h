// flash_attention.h — FlashAttention's tile loop on the CPU: a tile of query rows against its
// keys one tile at a time, in fixed ranges merged exactly; the prefill schedule.
//
// Part of the kernels (Lab 9, FlashAttention; chapter 11.7). Plain attention
// (paged_attention.h) holds every score of a query before it normalizes: a
// context of T keys is T floats per query row, and a prefill of T queries
// reads all T keys and values once per query, from wherever they are in
// the memory hierarchy. Here a tile of query rows (a few query tokens × the
// heads of one GQA group) walks its keys kKeyTile at a time: a tile of
// scores, the online softmax update of each row (online_softmax.h), the
// tile's values added to each row's output. A key and value row is read
// once per tile of queries instead of once per query, and at most one
// tile of scores exists at a time: memory O(tile² + T·d), never O(T²).
// Tiles wholly above the causal diagonal are never computed.
//
// The keys are walked in fixed ranges of kKeysPerRange keys (0–127,
// 128–255, ...); each range is its own online softmax, merged into the
// running one at its end. Decode (flash_decoding.h) computes the same
// ranges on different threads and merges them in the same order, so a
// query's attention has the same bits in a prefill as in a decode step.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention_tiles.h"

namespace servelab {

// Keys per range: a multiple of the key tile. 8 ranges at a 1k context.
inline constexpr int64_t kKeysPerRange = 128;
static_assert(kKeysPerRange % kKeyTile == 0);

// One KV head's share of a call: its query rows, its keys and values, and
// where the finished rows (the attention outputs, normalized) go.
struct AttentionGroup {
    QueryRows rows;
    KvRows kv;
    float* out;  // rows.num_rows × kv.head_dim
};

// Folds keys [begin, end) into `state` (num_rows rows), kKeyTile keys at a
// time; row r takes only the keys it may see (j < rows.visible[r]). Tiles no
// row may see are skipped.
void attend_key_range(const QueryRows& rows, const KvRows& kv, int64_t begin, int64_t end,
                      SoftmaxRows& state);

// Attention of one group over all the keys its rows may see: the ranges one
// after another, each merged into the running softmax; writes o / l into
// group.out.
void flash_attention_prefill(const AttentionGroup& group);

// out[r] = state's row r divided by its sum (the rows' final outputs).
void write_normalized(const SoftmaxRows& state, int64_t num_rows, int64_t head_dim, float* out);

}  // namespace servelab
