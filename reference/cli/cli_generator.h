// cli_generator.h — one generation entry point for the CLI, over whichever KV cache the flags
// chose.
//
// Part of the CLI (Labs 1-4). generate, chat and bench decode through this:
//   paged (Labs 4-5, default where supported): the Engine over one block
//     pool for the whole command, sized from --kv-memory, shared by every
//     request it runs, with the prefix cache on (so a chat's later turns
//     reuse the conversation's blocks) and n completions sharing their
//     prompt's blocks, decoded together in one batch;
//   contiguous (Labs 2-3): a fresh cache per request, sized prompt + max_tokens;
//   none (--no-kv-cache, Lab 1): naive decoding.
// With --device cuda (issue 7) the paged engine runs on GPU 0 instead: the
// CUDA runner takes the CPU runner's place and the pool lives in GPU memory
// (reference/device/cuda_model_runner.h); the rest of the engine is the same.
// Without the paged cache, n > 1 runs the n completions one after another
// (completion i with seed + i, as the paged engine does).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reference/cli/cli_options.h"
#include "reference/engine/engine.h"
#include "reference/engine/generator.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/speculative/drafter.h"

namespace servelab::cli {

class CliGenerator {
  public:
    // Allocates the paged pool, and the Engine over it with `scheduler`, if
    // the flags choose it; logs the pool's size. The options, model and
    // runner must outlive the generator.
    // With `speculation` enabled (Lab 6) it also loads the drafter — the
    // draft model, or the early-exit view of `model` — with a draft pool of
    // as many blocks as the target's, and every request speculates. Throws
    // servelab::Error where speculation cannot run (no paged engine, GPU).
    // announce = false keeps it silent (the ranks of a split model other than 0).
    CliGenerator(const CacheOptions& options, const Model& model, ModelRunner& runner,
                 const SchedulerConfig& scheduler = {}, const SpeculationOptions& speculation = {},
                 bool announce = true);

    // `on_token` streams completion 0.
    std::vector<GenerationResult> generate(std::span<const TokenId> prompt,
                                           const SamplingParams& params, int num_completions,
                                           const TokenCallback& on_token = {});

    bool paged() const { return manager_ != nullptr; }
    // The paged engine (for a whole trace: `bench throughput`); null when not paged.
    Engine* engine() { return engine_.get(); }
    // "paged (…)", "contiguous (f32)" or "none": for logs and bench reports.
    std::string describe() const;
    // Sets the request's speculation from the flags (generate() does it itself).
    void apply_speculation(SamplingParams& params) const { speculation_.apply(params); }

  private:
    // --device cuda: the GPU runner, its device pool mirrored by pool_.
    void start_on_gpu(const SchedulerConfig& scheduler);
    void start_drafter();

    const CacheOptions& options_;
    const Model& model_;
    bool announce_ = true;
    ModelRunner& runner_;
    std::unique_ptr<StepRunner> gpu_runner_;
    int64_t gpu_pool_bytes_ = 0;
    std::unique_ptr<PagedKvCache> pool_;
    std::unique_ptr<KvBlockManager> manager_;
    SpeculationOptions speculation_;
    std::unique_ptr<Model> draft_model_;
    std::unique_ptr<Drafter> drafter_;  // outlives the engine that refers to it
    std::unique_ptr<Engine> engine_;
};

}  // namespace servelab::cli
