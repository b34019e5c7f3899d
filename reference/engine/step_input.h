// step_input.h — the tokens one forward pass computes, alone or as one sequence of a batch.
//
// Part of the engine (Labs 1-5). Shared by the CPU ModelRunner and every
// StepRunner (step_runner.h).
#pragma once

#include <cstdint>
#include <span>

#include "reference/kv/block_table.h"
#include "reference/model/tokenizer.h"

namespace servelab {

// Which positions of the step need logits. Generation needs only the last
// one; the vocabulary projection is the largest matmul, so skipping the rest
// matters. Oracle tests ask for all of them.
enum class LogitsFor { kLastToken, kAllTokens };

struct StepInput {
    std::span<const TokenId> tokens;  // the tokens computed this step
    int64_t start_position = 0;       // position of tokens[0]; always 0 without a cache
    LogitsFor logits_for = LogitsFor::kLastToken;
};

// One sequence's share of a batched step (Lab 5, continuous batching): the
// tokens it computes this step (a prefill chunk, or one decode token) and
// the block table whose slots for them are already reserved.
struct SequenceChunk {
    StepInput step;
    const BlockTable* table = nullptr;
};

}  // namespace servelab
