// paged_generator.h — generation over the paged KV cache: n completions of one prompt.
//
// Lab 4 (chapter 11.4, PagedAttention; "parallel sampling" in Kwon et al.,
// 2023 §4.4). The same loop as generate() (generator.h), but the keys and
// values live in blocks of a shared pool (KvBlockManager):
//   - the prompt's leading blocks may come from the prefix cache, and only
//     the rest of the prompt is computed;
//   - for n > 1 completions the prompt is computed ONCE and its blocks are
//     shared by n block tables (fork); each completion's first write into
//     the shared, partly filled last block copies it (copy-on-write);
//   - each completion takes blocks only as it grows, and gives them back
//     when it finishes (full blocks stay in the prefix cache).
// Each decode round computes one token of every unfinished completion in
// ONE batched forward pass (ModelRunner::forward_batch): the n completions
// share the weights' memory traffic as well as the prompt's blocks. Mixing
// many requests, arriving and leaving at any step, is continuous batching
// (Lab 5).
#pragma once

#include <span>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/kv/kv_block_manager.h"

namespace servelab {

// Completion i samples with seed params.seed + i, so completion 0 equals
// generate() with the same parameters. `on_token` streams completion 0 only.
// Throws servelab::Error on an empty prompt, bad parameters, num_completions
// < 1, a prompt that does not fit the context or a prompt the block pool
// cannot hold. A completion that runs out of blocks later ends with reason
// "length" and out_of_kv_blocks set.
std::vector<GenerationResult> generate_paged(ModelRunner& runner, const ModelConfig& config,
                                             const Tokenizer& tokenizer,
                                             std::span<const TokenId> prompt_tokens,
                                             const SamplingParams& params, int num_completions,
                                             KvBlockManager& kv,
                                             const TokenCallback& on_token = {});

}  // namespace servelab
