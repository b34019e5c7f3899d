// device_step_plan.h — one batched step flattened into the plain integer arrays a GPU kernel reads.
//
// Part of the CUDA backend (issue 7; chapters 11.4-11.5 on a GPU). The
// engine's step is a list of chunks, each with a BlockTable object; GPU
// kernels want flat arrays and sizes. This host-side "plan step" (vLLM's
// prepare-inputs) computes them once per step, so every kernel takes plain
// pointers, and a CUDA graph can replay a decode step whose arrays change but
// whose sizes do not. Everything is int32 and lives in ONE array so a step
// costs one host-to-device copy:
//
//   token_ids     (num_tokens)   the step's tokens, chunk after chunk
//   positions     (num_tokens)   each token's position in its sequence
//   slot_mapping  (num_tokens)   each token's pool row: block · block_size + offset, or -1
//   last_rows     (num_seqs)     the row of each chunk's last token (its logits)
//   query_start   (num_seqs + 1) prefix sums of the chunks' lengths
//   context_lens  (num_seqs)     tokens each sequence attends over after the step
//   block_tables  (num_seqs, max_blocks_per_seq)  physical block ids, 0-padded
//
// Padding to a fixed batch (a CUDA graph's bucket) adds sequences with one
// token each: token 0 at position 0, slot -1 (nothing written) and context
// length 0 (attention writes zeros), whose logits are never sampled.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/engine/step_input.h"

namespace servelab {

struct DeviceStepPlan {
    int64_t num_tokens = 0;
    int64_t num_seqs = 0;  // including padding sequences
    int64_t max_blocks_per_seq = 0;
    int64_t max_query_len = 0;
    int64_t max_context_len = 0;
    bool decode_only = false;  // every chunk is one token (the split-K decode kernel applies)
    std::vector<int32_t> data;

    // Offsets of each array in `data`.
    int64_t token_ids() const { return 0; }
    int64_t positions() const { return num_tokens; }
    int64_t slot_mapping() const { return 2 * num_tokens; }
    int64_t last_rows() const { return 3 * num_tokens; }
    int64_t query_start() const { return last_rows() + num_seqs; }
    int64_t context_lens() const { return query_start() + num_seqs + 1; }
    int64_t block_tables() const { return context_lens() + num_seqs; }
    int64_t size() const { return block_tables() + num_seqs * max_blocks_per_seq; }
};

struct DeviceStepLimits {
    int64_t vocab_size = 0;
    int64_t context_length = 0;
    int64_t num_blocks = 0;  // of the pool: every block id must be below it
    int64_t block_size = 0;
};

// Plans `chunks` (each must end at its table's num_tokens(), as
// ModelRunner::forward_batch requires). `pad_to_seqs` (0 = none) pads a
// decode-only batch to that many sequences; `min_blocks_per_seq` widens the
// block-table rows (a graph's fixed stride). Throws servelab::Error for an
// empty batch, a token id outside the vocabulary, a position past the
// context, a chunk that does not end at its table's end, or a block id
// outside the pool.
DeviceStepPlan plan_device_step(std::span<const SequenceChunk> chunks,
                                const DeviceStepLimits& limits, int64_t pad_to_seqs = 0,
                                int64_t min_blocks_per_seq = 0);

}  // namespace servelab
