// engine.h — the many-request engine: add requests, step, stream, cancel.
//
// Lab 5 (chapter 11.5, continuous batching) — groundwork: the API every
// front end is meant to share (the CLI's generate/chat/bench still use
// generate() and generate_paged() today). One step is one iteration:
//   Scheduler::schedule   which requests compute which tokens (prefill
//                         chunks and decode tokens, under a token budget)
//   ModelRunner::forward_batch   one pass over all of them
//   per request: commit the computed tokens; a request whose tokens are all
//                computed samples its next one, streams it, and may finish
//                (its blocks go back at once; a waiting request can take
//                its place at the next step).
// Each request owns its Sampler, so its tokens depend only on its own
// parameters and seed — never on what else shares the batch. The tests hold
// it to that: every request's output equals its output run alone.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/model/model.h"
#include "reference/sampling/sampler.h"
#include "reference/scheduler/scheduler.h"

namespace servelab {

struct EngineConfig {
    SchedulerConfig scheduler;
    int64_t num_kv_blocks = 1024;  // the paged pool (PagedKvCache::blocks_for_budget sizes it)
    int64_t block_size = 16;
    bool prefix_caching = true;
};

// A token a request produced this step, with the text now safe to show.
struct TokenEvent {
    int64_t request_id = 0;
    TokenId token = 0;
    std::string text;
};

struct FinishedRequest {
    int64_t request_id = 0;
    GenerationResult result;
};

struct StepOutput {
    std::vector<TokenEvent> tokens;
    std::vector<FinishedRequest> finished;
    int64_t num_batched_tokens = 0;  // computed this step, all requests together
    int64_t num_preempted = 0;
};

class Engine {
  public:
    // `model` and `runner` must outlive the engine. Throws servelab::Error
    // for an MLA model (the paged cache does not hold latents yet).
    Engine(const Model& model, ModelRunner& runner, const EngineConfig& config);
    ~Engine();  // defined where Live is complete

    // Queues a request; returns its id. `on_token` (optional) is called for
    // each of its tokens from within step(). Throws servelab::Error (and
    // queues nothing) for bad parameters or a request that could never run.
    int64_t add_request(std::vector<TokenId> prompt, const SamplingParams& params,
                        int32_t priority = 0, TokenCallback on_token = {});
    // One iteration. Returns the tokens produced and the requests finished.
    StepOutput step();
    // Ends a request now (finish reason "cancelled"), returning its blocks;
    // the next step() reports it among the finished. Returns false for an
    // unknown or already finished id.
    bool cancel(int64_t request_id);
    bool has_unfinished() const { return !requests_.empty(); }

    // Blocking helper: runs the prompts together, each with `params`, until
    // all finish; results in the order given. The engine must be idle.
    std::vector<GenerationResult> generate(const std::vector<std::vector<TokenId>>& prompts,
                                           const SamplingParams& params);

    KvBlockManager& kv() { return kv_; }

  private:
    struct Live;  // one request in flight: scheduler state, sampler, stop checker, result
    // Ends `live` (which is then destroyed) and appends its result to `finished`.
    void finish(Live& live, FinishReason reason, std::vector<FinishedRequest>& finished);

    const Model& model_;
    ModelRunner& runner_;
    PagedKvCache pool_;
    KvBlockManager kv_;
    Scheduler scheduler_;
    int64_t next_id_ = 0;
    std::map<int64_t, std::unique_ptr<Live>> requests_;
    std::vector<FinishedRequest> cancelled_;  // reported by the next step()
};

}  // namespace servelab
