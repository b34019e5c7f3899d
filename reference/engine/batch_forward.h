// batch_forward.h — logits for a batch of chunks: what a caller that samples for itself needs.
//
// Part of the engine (Lab 5's batched forward pass, chapter 11.5). The
// engine's StepRunner (step_runner.h) samples inside the step; Lab 6's model
// drafter (reference/speculative/model_drafter.h) cannot: it needs each
// row's whole distribution, so it asks for the logits themselves. It
// depends on this interface, not on the CPU runner (model_runner.h) that
// implements it, so the speculative code never reaches up into the runner.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "reference/engine/runner_options.h"
#include "reference/engine/step_input.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"

namespace servelab {

class BatchForward {
  public:
    virtual ~BatchForward() = default;
    // One forward pass over chunks of several sequences, on `cache`. Each
    // chunk must end at its table's num_tokens() (its slots reserved); no
    // two chunks may share a table. Logits: for each chunk in order, the
    // row of its last token (kLastToken) or of each of its tokens
    // (kAllTokens), (rows, vocab_size) row-major. Throws servelab::Error for
    // a malformed batch.
    virtual std::vector<float> forward_batch(std::span<const SequenceChunk> chunks,
                                             PagedKvCache& cache) = 0;
    // Tokens pushed through the layers so far, over all passes.
    virtual int64_t num_tokens_computed() const = 0;
};

// The CPU runner (model_runner.h) over a whole model. It keeps references:
// config and weights must outlive it.
std::unique_ptr<BatchForward> make_cpu_batch_forward(const ModelConfig& config,
                                                     const ModelWeights& weights,
                                                     const RunnerOptions& options);

}  // namespace servelab
