// device_step_plan.cpp — see device_step_plan.h.
#include "reference/device/device_step_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/error.h"

namespace servelab {
namespace {

void check_chunk(const SequenceChunk& chunk, const DeviceStepLimits& limits) {
    const StepInput& step = chunk.step;
    if (step.tokens.empty()) throw Error("device step: a chunk has no tokens");
    if (step.logits_for != LogitsFor::kLastToken) {
        throw Error("device step: the GPU runner computes logits of each chunk's last token only");
    }
    for (TokenId id : step.tokens) {
        if (id < 0 || id >= limits.vocab_size) {
            throw Error(fmt::format("device step: token id {} outside the vocabulary of {}", id,
                                    limits.vocab_size));
        }
    }
    const int64_t end = step.start_position + int64_t(step.tokens.size());
    if (step.start_position < 0 || end > limits.context_length) {
        throw Error(fmt::format("device step: positions [{}, {}) outside the context of {}",
                                step.start_position, end, limits.context_length));
    }
    if (chunk.table == nullptr || chunk.table->num_tokens() != end) {
        throw Error(
            fmt::format("device step: chunk ends at position {} but its block table has "
                        "{} slots reserved",
                        end, chunk.table == nullptr ? 0 : chunk.table->num_tokens()));
    }
    if (chunk.table->block_size() != limits.block_size) {
        throw Error("device step: a block table's block size differs from the pool's");
    }
    for (BlockId block : chunk.table->blocks()) {
        if (block < 0 || block >= limits.num_blocks) {
            throw Error(fmt::format("device step: block {} outside the pool of {} blocks", block,
                                    limits.num_blocks));
        }
    }
}

}  // namespace

DeviceStepPlan plan_device_step(std::span<const SequenceChunk> chunks,
                                const DeviceStepLimits& limits, int64_t pad_to_seqs,
                                int64_t min_blocks_per_seq) {
    if (chunks.empty()) throw Error("device step: a batch needs at least one sequence");
    DeviceStepPlan plan;
    plan.decode_only = true;
    plan.max_blocks_per_seq = min_blocks_per_seq;
    int64_t real_tokens = 0;
    for (const SequenceChunk& chunk : chunks) {
        check_chunk(chunk, limits);
        const int64_t q_len = int64_t(chunk.step.tokens.size());
        real_tokens += q_len;
        plan.decode_only = plan.decode_only && q_len == 1;
        plan.max_query_len = std::max(plan.max_query_len, q_len);
        plan.max_context_len = std::max(plan.max_context_len, chunk.table->num_tokens());
        plan.max_blocks_per_seq =
            std::max(plan.max_blocks_per_seq, int64_t(chunk.table->blocks().size()));
    }
    const int64_t real_seqs = int64_t(chunks.size());
    if (pad_to_seqs > 0 && (!plan.decode_only || pad_to_seqs < real_seqs)) {
        throw Error("device step: only a decode batch can be padded, and not below its size");
    }
    const int64_t padding = pad_to_seqs > 0 ? pad_to_seqs - real_seqs : 0;
    plan.num_seqs = real_seqs + padding;
    plan.num_tokens = real_tokens + padding;  // one token per padding sequence
    plan.data.assign(size_t(plan.size()), 0);

    int32_t* token_ids = plan.data.data() + plan.token_ids();
    int32_t* positions = plan.data.data() + plan.positions();
    int32_t* slots = plan.data.data() + plan.slot_mapping();
    int32_t* last_rows = plan.data.data() + plan.last_rows();
    int32_t* query_start = plan.data.data() + plan.query_start();
    int32_t* context_lens = plan.data.data() + plan.context_lens();
    int32_t* tables = plan.data.data() + plan.block_tables();

    int64_t row = 0;
    for (int64_t s = 0; s < plan.num_seqs; ++s) {
        query_start[s] = int32_t(row);
        if (s >= real_seqs) {  // a padding sequence: writes nothing, attends to nothing
            slots[row] = -1;
            last_rows[s] = int32_t(row);
            ++row;
            continue;
        }
        const SequenceChunk& chunk = chunks[size_t(s)];
        const BlockTable& table = *chunk.table;
        for (size_t t = 0; t < chunk.step.tokens.size(); ++t, ++row) {
            const int64_t position = chunk.step.start_position + int64_t(t);
            const KvSlot slot = table.slot(position);
            token_ids[row] = chunk.step.tokens[t];
            positions[row] = int32_t(position);
            slots[row] = int32_t(int64_t(slot.block) * limits.block_size + slot.offset);
        }
        last_rows[s] = int32_t(row - 1);
        context_lens[s] = int32_t(table.num_tokens());
        std::copy(table.blocks().begin(), table.blocks().end(),
                  tables + s * plan.max_blocks_per_seq);
    }
    query_start[plan.num_seqs] = int32_t(row);
    return plan;
}

}  // namespace servelab
