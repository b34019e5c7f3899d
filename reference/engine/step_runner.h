// step_runner.h — what the engine asks of a device: one forward pass over a batch, then its tokens.
//
// Part of the engine (Lab 5, chapter 11.5; the CUDA backend, issue 7). The
// Engine decides WHAT to compute (the scheduler's chunks) and owns every
// request's state; a StepRunner decides WHERE: the CPU ModelRunner, or the
// CUDA runner (reference/device/cuda_model_runner.h). One call is one
// iteration of continuous batching:
//   forward pass over the chunks  →  the logits of each chunk's last token
//   → the samples the engine asks for  →  token ids
// Sampling sits inside the call so a GPU never copies vocab-sized logits
// back to the host: only the token ids travel (and, for the requests that
// ask, their log-probabilities). Each sample names its
// request's own Sampler (its parameters and random stream), so a request's
// tokens depend on its seed alone, on either device.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "reference/engine/step_input.h"
#include "reference/kv/block_table.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/sampling/sampler.h"
#include "reference/speculative/rejection_sampler.h"

namespace servelab {

// One token to draw from the logits of chunk `row`'s last token. Several
// samples may share a row (n completions of one prompt).
struct SampleRequest {
    int64_t row = 0;
    Sampler* sampler = nullptr;
    std::span<const TokenId> history;  // the request's tokens so far (repetition penalty)
    // A constrained request's grammar mask (Lab 12): the tokens its grammar
    // allows next, applied before anything else (Sampler::sample); null = all.
    const TokenBitmask* allowed = nullptr;
};

// Speculative decoding (Lab 6): chunk `row` is [last token, d_1..d_K] with
// logits for all its tokens; verify the K drafts against the target's
// distributions at its K+1 positions, as the request's Sampler would draw
// (reference/speculative/verify_drafts.h).
struct VerifyRequest {
    int64_t row = 0;
    Sampler* sampler = nullptr;
    std::span<const TokenId> history;    // the request's tokens before the drafts
    std::span<const TokenId> drafts;     // d_1..d_K
    std::span<const float> draft_probs;  // (K, vocab) the q_i they were drawn from; empty:
                                         // point masses (a deterministic drafter, or greedy)
    // A constrained request (Lab 12): the grammar's mask at each of the K+1
    // positions (after history + d_1..d_i), so p_i is exactly what the
    // request would sample from there; empty = unconstrained.
    std::span<const TokenBitmask> allowed;
};

struct StepBatch {
    std::span<const SequenceChunk> chunks;
    // Copy-on-write copies the block manager made since the last step, in
    // order. The host pool has already copied its rows; a device pool
    // replays them before writing this step's keys and values.
    std::span<const BlockCopy> block_copies;
    std::span<const SampleRequest> samples;
    std::span<const VerifyRequest> verifications;
};

struct StepResult {
    std::vector<TokenId> sampled;        // one per sample, in order
    std::vector<Verification> verified;  // one per verification, in order
    // One per sample, in order, set for the samples whose Sampler asks for
    // logprobs (SamplingParams::logprobs >= 0); empty when none asks.
    std::vector<std::optional<SampledLogprobs>> logprobs;
};

class StepRunner {
  public:
    virtual ~StepRunner() = default;
    // Runs the chunks (each ending at its table's num_tokens(), keys and
    // values written to the blocks the tables name) and returns one token
    // per sample and one verdict per verification, in order. Throws
    // servelab::Error for a malformed batch.
    virtual StepResult run_step(const StepBatch& batch, PagedKvCache& cache) = 0;
    // Tokens pushed through the layers so far, over all steps.
    virtual int64_t num_tokens_computed() const = 0;
    // Where the pool's rows must live for this runner (PagedKvCache's storage).
    virtual KvStorage kv_storage() const { return KvStorage::kHost; }
    // Throws servelab::Error naming what this runner cannot sample as
    // `params` asks; the engine asks before admitting a request, so a step
    // never fails for it. The CPU runner samples with the full Sampler.
    virtual void check_sampling(const SamplingParams& params) const { (void)params; }
};

}  // namespace servelab
