// model_runner.h — the engine's step on the CPU: chunks in, logits through the layers, tokens out.
//
// Part of the engine (Lab 5, chapter 11.5: one iteration of continuous
// batching). The CPU StepRunner (step_runner.h). One step:
//   check the chunks  →  the layer walk over all their rows
//   (llama_forward.h)  →  each chunk's logit rows
//   →  each sample drawn by its request's Sampler from a copy of its row
//   →  each verification's drafts checked against their rows
//      (speculative decoding; reference/speculative/verify_drafts.h)
//   →  on a split model, rank 0's tokens handed to every rank.
// Callers that sample for themselves get the logits instead: forward() for
// one sequence on any cache layout (generator.h, perplexity, the tests),
// forward_batch() for a batch on the paged cache (batch_forward.h, the
// model drafter's interface).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/engine/activation_observer.h"
#include "reference/engine/batch_forward.h"
#include "reference/engine/fusion_plan.h"
#include "reference/engine/llama_forward.h"
#include "reference/engine/runner_options.h"
#include "reference/engine/step_input.h"
#include "reference/engine/step_runner.h"
#include "reference/kv/block_table.h"
#include "reference/kv/kv_cache.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"
#include "reference/parallel/communicator.h"
#include "reference/parallel/tensor_parallel.h"

namespace servelab {

// One thread at a time: a forward pass writes the runner's activation
// buffers. Threads that compute at once need a runner each (they may share
// the config and weights, which are only read).
class ModelRunner : public StepRunner, public BatchForward {
  public:
    // The runner keeps references: config and weights must outlive it.
    ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                const RunnerOptions& options = {});
    // One rank of a split model (Lab 7): `config` is the shard's
    // local_config, `weights` its shard, `comm` the group's communicator
    // (which must outlive the runner). Logits come back whole on every rank;
    // the tokens run_step returns are rank 0's, broadcast, so every rank's
    // engine makes the same decisions. (Single-request decoding through
    // forward() — generator.h, the contiguous and no-cache layouts — samples
    // on each rank from the logits alone: identical on every rank as long
    // as the all-reduce gives every rank the same bits, which the ring does
    // by construction and MPI's reductions do in practice.)
    ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                const TensorParallelShard& shard, Communicator& comm,
                const RunnerOptions& options = {});
    ModelRunner(const ModelRunner&) = delete;  // the walk refers to shard_ and solo_
    ModelRunner& operator=(const ModelRunner&) = delete;

    // Returns logits, (rows, vocab_size) row-major with rows = 1 for
    // kLastToken and tokens.size() for kAllTokens. With a cache, the step must
    // start at cache->num_tokens() and its tokens are appended to the cache;
    // without one (naive decoding) it must hold the whole sequence from 0.
    // Throws servelab::Error on an empty step, an out-of-range token id, a
    // position past the context or a start position the cache does not match.
    std::vector<float> forward(const StepInput& step, KvCache* cache = nullptr);
    // The same over a paged cache (Lab 4). The step's slots must already be
    // reserved in `table` (the step ends at table.num_tokens()); its keys and
    // values are written to the blocks the table names.
    std::vector<float> forward(const StepInput& step, PagedKvCache& cache, const BlockTable& table);
    // One forward pass over chunks of several sequences at once (Lab 5,
    // batch_forward.h): the projections and the MLP run once over every
    // token of the step — one matmul per weight matrix for the whole batch,
    // which is what batching buys — and attention per sequence.
    std::vector<float> forward_batch(std::span<const SequenceChunk> chunks,
                                     PagedKvCache& cache) override;

    // The engine's step (step_runner.h): forward_batch, then each sample
    // drawn by its request's Sampler from a copy of its row, and each
    // verification run against its rows.
    StepResult run_step(const StepBatch& batch, PagedKvCache& cache) override;

    // Tokens pushed through the layers so far, over all steps: the prefill
    // work a prefix-cache hit saves shows up here (Lab 4).
    int64_t num_tokens_computed() const override { return layers_.num_tokens_computed(); }
    // Rows that went through the output head so far (the head's all-gather).
    int64_t num_logit_rows_computed() const { return layers_.num_logit_rows_computed(); }

    const TensorParallelShard& shard() const { return shard_; }
    // What it was built with (a drafter beside it is built the same way).
    const RunnerOptions& options() const { return options_; }
    // The fused kernels this runner uses: plan_fusions(options.fused_kernels)
    // when it was built.
    const FusionPlan& fusions() const { return layers_.fusions(); }
    // Tests and benchmarks compare the paths. A fusion whose reference
    // kernel is not linked stays off whatever is asked.
    void set_fusions(const FusionPlan& wanted);
    // From now on every forward pass shows `observer` (null: none) the inputs
    // of each layer's projections (Lab 10's calibration; llama_forward.h).
    void set_activation_observer(ActivationObserver* observer) {
        layers_.set_activation_observer(observer);
    }
    // What this rank's collectives moved so far (the cost model's counters).
    const CommStats& comm_stats() const { return comm_.stats(); }

  private:
    std::span<const float> run_batch(std::span<const SequenceChunk> chunks, PagedKvCache& cache);
    void check_step(const StepInput& step) const;
    void check_cache(const StepInput& step, const KvCache* cache) const;
    // Where each chunk's logit rows end, into row_ends_.
    void find_row_ends(std::span<const SequenceChunk> chunks);
    // Draws `sample` from a copy of its row of `logits` into `result`.
    void draw_sample(const SampleRequest& sample, const StepBatch& batch,
                     std::span<const float> logits, StepResult& result);
    Verification verify(const VerifyRequest& verify, const StepBatch& batch,
                        std::span<const float> logits) const;
    void share_rank0_tokens(StepResult& result);

    const ModelConfig& config_;
    const RunnerOptions options_;
    SoloCommunicator solo_;          // a whole model's (its collectives do nothing)
    TensorParallelShard shard_;      // this rank's part (a whole model: rank 0 of 1)
    Communicator& comm_;             // a split model's group, or solo_
    LlamaForward layers_;            // the walk through the layers
    std::vector<float> sample_row_;  // (vocab) the copy of the row a sample reads
    std::vector<size_t> row_ends_;   // where each chunk's logit rows end
};

}  // namespace servelab
