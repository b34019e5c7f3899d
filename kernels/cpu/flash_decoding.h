// flash_decoding.h — attention for a decode step: each group's keys split into ranges that
// run on different threads, their partial softmaxes merged exactly.
//
// Part of the kernels (Lab 9, FlashAttention; chapter 11.7). A decode step
// has one query token per sequence (a speculative verification K + 1), and
// a GQA model has few KV heads: SmolLM2 has 3. A work item per (query
// token, KV head), as prefill has, would be 3 items for 2 threads — one
// idle a third of the time — and each item one long serial walk over the
// context. Flash-decoding (Dao et al., 2023) splits the keys instead: every
// (group, key range) is its own work item, each computes a partial
// (max, sum, output) over its range with the tile loop of
// flash_attention.h, and the partials are merged with the online softmax's
// merge (online_softmax.h) — exactly, not approximately. With
// keys_per_range = kKeysPerRange the ranges and their merge order are
// flash_attention_prefill's, so the result has the same bits.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/flash_attention.h"

namespace servelab {

// Every group's attention over the keys its rows may see, in ranges of
// keys_per_range keys (a multiple of kKeyTile); writes each group's out.
// keys_per_range >= the context runs each group unsplit (one range).
void flash_decoding(std::span<const AttentionGroup> groups, int64_t keys_per_range);

}  // namespace servelab
