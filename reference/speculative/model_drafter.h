// model_drafter.h — a small model guesses the next K tokens: a draft model, or the target's first
// layers.
//
// Lab 6 (chapter 11.6; Leviathan et al. 2023 for draft models; early exit as
// in LayerSkip, Elhoushi et al. 2024, and Draft & Verify, Zhang et al. 2023).
// Drafting is ordinary decoding on a cheaper model: K passes, each one token
// per speculating request, batched across requests. The drafter keeps its
// own paged KV cache (its own layers, its own pool), one sequence per
// request:
//   the first pass catches the cache up with every token it has not seen —
//     the whole prompt the first time, later the drafts the target accepted
//     and its own next token;
//   each pass picks a token as the request's Sampler would (argmax when
//     greedy; otherwise drawn from its filtered distribution q, which
//     verification needs);
//   after verification the engine rolls the cache back to what the target
//     kept (rollback), exactly as it rolls back the target's.
// Self-speculative early exit runs the target's first `num_layers` layers and
// then its final norm and output head: no second model, and the same
// weights (nothing is copied) — the runner simply stops early.
// The drafter needs only logits from its model: it depends on that
// interface (reference/engine/batch_forward.h), not on the runner itself.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "reference/engine/batch_forward.h"
#include "reference/engine/runner_options.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/model/model.h"
#include "reference/speculative/drafter.h"

namespace servelab {

class ModelDrafter : public Drafter {
  public:
    // A separate draft model. Throws servelab::Error unless its vocabulary
    // is the target's, token for token (drafts are token ids), or for MLA.
    // `runner` is how the drafter's own runner is built (the command's
    // --no-fused-kernels, as for the target's).
    static std::unique_ptr<ModelDrafter> draft_model(const Model& draft, const Model& target,
                                                     int64_t num_kv_blocks, int64_t block_size = 16,
                                                     const RunnerOptions& runner = {});
    // The target's first `num_layers` layers, its final norm and its head.
    // Throws servelab::Error unless 1 <= num_layers < the target's layers.
    static std::unique_ptr<ModelDrafter> early_exit(const Model& target, int64_t num_layers,
                                                    int64_t num_kv_blocks, int64_t block_size = 16,
                                                    const RunnerOptions& runner = {});

    // `weights` (at least config.num_layers layers) must outlive the drafter.
    ModelDrafter(const ModelConfig& config, const ModelWeights& weights, int64_t num_kv_blocks,
                 int64_t block_size, const RunnerOptions& runner = {});
    ModelDrafter(const ModelDrafter&) = delete;  // the runner refers to config_
    ModelDrafter& operator=(const ModelDrafter&) = delete;

    std::vector<Draft> propose(std::span<const DraftRequest> requests) override;
    void rollback(int64_t request_id, int64_t num_tokens) override;
    void release(int64_t request_id) override;

    const ModelConfig& config() const { return config_; }
    // Tokens of the request whose keys and values the draft cache holds (0
    // for an unknown request), and the draft pool's blocks in use: for
    // tests of rollback and release.
    int64_t num_cached_tokens(int64_t request_id) const;
    int64_t num_blocks_in_use() const { return pool_.num_blocks() - pool_.allocator().num_free(); }
    int64_t num_tokens_computed() const { return runner_->num_tokens_computed(); }

  private:
    ModelConfig config_;
    std::unique_ptr<BatchForward> runner_;  // the CPU runner over config_
    PagedKvCache pool_;
    KvBlockManager kv_;
    std::map<int64_t, PagedSequence> sequences_;
};

}  // namespace servelab
