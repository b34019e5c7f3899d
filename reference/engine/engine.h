// engine.h — the many-request engine: add requests, step, stream, cancel.
//
// Lab 5 (chapter 11.5, continuous batching). Every front end — the CLI's
// generate, chat and bench commands, `bench throughput`, later the HTTP
// server — runs requests through this class. One step is one iteration,
// five moves (Engine::step):
//   drafts    speculating requests propose their drafts (below; Lab 6)
//   schedule  Scheduler::schedule: which requests compute which tokens
//             (prefill chunks, decode tokens and draft slots, under a token
//             budget)
//   batch     the chunks (and the drafts) become the step runner's batch,
//             with the samples and verifications it must draw
//   run       StepRunner::run_step: one forward pass over all of them, then
//             those samples (the CPU's ModelRunner, or the CUDA runner)
//   apply     per request: commit the computed tokens; a request whose
//             tokens are all computed takes its next token, streams it, and
//             may finish (its blocks go back at once; a waiting request can
//             take its place at the next step).
// The step and its moves are in engine.cpp; what a request does with a
// token (accept, finish, fork its siblings) in engine_output.cpp; the
// blocking helpers in engine_generate.cpp.
// Each request owns its Sampler, so its tokens depend only on its own
// parameters and seed — never on what else shares the batch. The tests hold
// it to that: every request's output equals its output run alone.
//
// Parallel sampling (n completions of one prompt, Lab 4): the first
// completion is an ordinary request; the other n-1 wait, holding no blocks,
// until its prompt is computed, then fork its blocks (copy-on-write) and
// sample their first tokens from the same logits. So the prompt is computed
// once. Completion i samples with seed + i. (The siblings join the running
// set without admission, so they may take it past max_num_seqs by n - 1.)
//
// Speculative decoding (Lab 6), one DraftRound per step
// (reference/speculative/draft_round.h): before each step is scheduled,
// every decoding request with num_speculative_tokens = K asks its drafter
// for up to K drafts (all of a drafter's requests in one call); the
// scheduler then reserves a slot per draft, the budget permitting, so no
// slot waits for a draft that never comes. The target computes [last token,
// d_1..d_K] with logits at every position, and the runner verifies the
// drafts as the request's Sampler would draw. The rejected drafts' slots are
// rolled back in the target's pool and in the drafter's own cache; the kept
// drafts and the target's next token are emitted together. Requests with
// and without speculation share steps.
// Greedy output never changes. A sampled request stays distributed exactly
// as without speculation, but its exact tokens for a seed can depend on how
// many draft slots the budget left it, i.e. on what shares its steps.
//
// Static batching (SchedulerConfig::static_batching, the baseline): a
// finished request's result is reported at once, but its row stays in the
// batch — a discarded token computed for it every step — until the batch's
// last request finishes, as a fixed-shape batch does
// (reference/scheduler/static_padding.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/engine/step_runner.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/model/model.h"
#include "reference/sampling/sampler.h"
#include "reference/scheduler/scheduler.h"
#include "reference/scheduler/static_padding.h"
#include "reference/speculative/draft_round.h"
#include "reference/speculative/drafter.h"
#include "reference/speculative/ngram_drafter.h"

namespace servelab {

struct EngineConfig {
    SchedulerConfig scheduler;
    int64_t num_kv_blocks = 1024;  // the paged pool (PagedKvCache::blocks_for_budget sizes it)
    int64_t block_size = 16;
    PrefixCacheKind prefix_cache = PrefixCacheKind::kHash;
};

// A token a request produced this step, with the text now safe to show.
struct TokenEvent {
    int64_t request_id = 0;
    TokenId token = 0;
    std::string text;
    std::optional<SampledLogprobs> logprobs;  // when the request asked for them
};

struct FinishedRequest {
    int64_t request_id = 0;
    GenerationResult result;
};

// The batch's shape once a step is scheduled, before its forward pass: a
// long step (a 2,000-token prefill) would otherwise leave whoever reports
// the engine's state (the server's /metrics) a step behind.
struct StepScheduled {
    int64_t num_running = 0;
    int64_t num_waiting = 0;
    int64_t num_kv_blocks_used = 0;  // allocated for this step included
};
using StepScheduledCallback = std::function<void(const StepScheduled&)>;

struct StepOutput {
    // When the step began: the instant its newly scheduled requests' queue
    // times end (GenerationTimings::queue_ms), so a step log and the
    // requests' timings agree on which step was whose.
    std::chrono::steady_clock::time_point started{};
    std::vector<TokenEvent> tokens;
    std::vector<FinishedRequest> finished;
    int64_t num_batched_tokens = 0;  // computed this step, all requests together
    int64_t num_prefill_tokens = 0;  // of those, prompt (or recomputed) tokens; the rest decode
    int64_t num_preempted = 0;
    int64_t num_running = 0;         // after the step
    int64_t num_waiting = 0;         // after the step
    int64_t num_kv_blocks_used = 0;  // held by running requests, after the step
    // Speculative decoding: drafts verified this step (counted among the
    // batched tokens), of those kept, and the drafters' time.
    int64_t num_drafted_tokens = 0;
    int64_t num_accepted_tokens = 0;
    double draft_ms = 0.0;
    // Constrained decoding (Lab 12): the time each grammar mask of this
    // step took to compute, in microseconds, one entry per mask.
    std::vector<double> grammar_mask_us;
};

class Engine {
  public:
    using Clock = std::chrono::steady_clock;

    // An engine with its own block pool, sized by `config`. `model` and
    // `runner` must outlive the engine. Throws servelab::Error for an MLA
    // model (the paged cache does not hold latents yet).
    Engine(const Model& model, StepRunner& runner, const EngineConfig& config);
    // An engine over a caller's pool, which outlives it (the CLI keeps one
    // pool, and its prefix cache, for a whole chat).
    Engine(const Model& model, StepRunner& runner, KvBlockManager& kv,
           const SchedulerConfig& scheduler);
    ~Engine();  // defined where Live is complete

    // The longest request it admits, prompt and output together: the
    // model's context, or less with SchedulerConfig::max_model_len.
    int64_t context_length() const { return context_length_; }

    // Queues a request; returns its id. `on_token` (optional) is called for
    // each of its tokens from within step(). `arrival` is when the request
    // arrived (its queue time and latencies count from there; default: now).
    // Throws servelab::Error (and queues nothing) for bad parameters or a
    // request that could never run.
    int64_t add_request(std::vector<TokenId> prompt, const SamplingParams& params,
                        int32_t priority = 0, TokenCallback on_token = {},
                        Clock::time_point arrival = Clock::now());
    // n completions of one prompt, the prompt computed once; returns their
    // ids (completion i samples with params.seed + i). `on_token` streams
    // completion 0.
    std::vector<int64_t> add_parallel_request(std::vector<TokenId> prompt,
                                              const SamplingParams& params, int num_completions,
                                              TokenCallback on_token = {});
    // The same with one callback per completion (the server streams each),
    // and the scheduler's priority (the same for every completion).
    std::vector<int64_t> add_parallel_request(std::vector<TokenId> prompt,
                                              const SamplingParams& params, int num_completions,
                                              std::vector<TokenCallback> on_tokens,
                                              int32_t priority = 0);
    // One iteration. Returns the tokens produced and the requests finished.
    // `on_scheduled` (optional) is told the batch's shape before the forward pass.
    StepOutput step(const StepScheduledCallback& on_scheduled = {});
    // Ends a request now (finish reason "cancelled"), returning its blocks;
    // the next step() reports it among the finished. Returns false for an
    // unknown or already finished id.
    bool cancel(int64_t request_id);
    // Makes `drafter` (which must outlive the engine) available to requests
    // as SamplingParams::drafter = `name`. "ngram" (prompt lookup) is always
    // there; `make_default` makes `name` what an empty drafter name means.
    void add_drafter(const std::string& name, Drafter& drafter, bool make_default = false);
    bool has_unfinished() const { return !requests_.empty(); }
    int64_t num_unfinished() const { return int64_t(requests_.size()); }

    // Blocking helpers, for an idle engine (engine_generate.cpp): they run
    // their requests together until all finish, and return results in the
    // order given.
    std::vector<GenerationResult> generate(const std::vector<std::vector<TokenId>>& prompts,
                                           const SamplingParams& params);
    std::vector<GenerationResult> generate_parallel(std::span<const TokenId> prompt,
                                                    const SamplingParams& params,
                                                    int num_completions,
                                                    const TokenCallback& on_token = {});

    KvBlockManager& kv() { return kv_; }
    const Scheduler& scheduler() const { return scheduler_; }

  private:
    struct Live;  // one request in flight: Request, sampler, stop checker, result (engine_live.h)
    std::unique_ptr<Live> make_live(int64_t id, std::vector<TokenId> prompt,
                                    const SamplingParams& params, int32_t priority,
                                    TokenCallback on_token, Clock::time_point arrival);
    // The drafter `params` names (the default one when it names none).
    // Throws servelab::Error, listing the loaded ones, when none has that name.
    Drafter* find_drafter(const SamplingParams& params) const;

    // One step's batch, as the runner takes it.
    struct StepBatchPlan {
        std::vector<SequenceChunk> chunks;  // one per scheduled chunk, in order
        // The samples this step draws, and for each chunk the index of its
        // first (its waiting siblings' samples, then its own), or -1 when its
        // request draws nothing this step (mid-prompt, a padding row, or verifying).
        std::vector<SampleRequest> samples;
        std::vector<int64_t> first_sample;
        // Speculating chunks: [last token, drafts...] (the chunks point
        // into these), and their verifications.
        std::vector<std::vector<TokenId>> draft_chunks;
        std::vector<VerifyRequest> verifications;
    };
    // The moves of step(), in order (engine.cpp).
    // The step's output so far: its start, and the requests cancelled since the last step.
    StepOutput begin_step();
    // Drafts first: how many drafts each request has decides how many slots
    // the scheduler reserves for them. The round is fitted to the slots later.
    DraftRound propose_drafts(StepOutput& out);
    // The scheduler's chunks for this step; `on_scheduled` is told the batch's shape.
    SchedulerOutput schedule(const StepScheduledCallback& on_scheduled, StepOutput& out);
    // The scheduler's chunks (and the drafts fitted to them) become the batch.
    StepBatchPlan build_batch(const SchedulerOutput& scheduled, std::span<const Draft> drafts,
                              StepOutput& out);
    // A speculating chunk: [last token, drafts...] and its verification.
    void add_verification(Request& r, const Draft& draft, int64_t row,
                          std::vector<TokenId>& chunk_tokens, StepBatchPlan& plan, StepOutput& out);
    // The runner computes the batch (nothing, when it is empty).
    StepResult run(const StepBatchPlan& plan);
    // Each chunk's outcome goes back to its request: computed tokens
    // committed, then a verdict (speculation), forks and a first token (a
    // finished prompt), a next token (decode), or a padding row's next token.
    void apply_results(const SchedulerOutput& scheduled, std::span<const Draft> drafts,
                       const StepBatchPlan& plan, const StepResult& result, StepOutput& out);
    // Static batching's padding rows leave once their batch is done; the
    // step's counts after it.
    void end_step(StepOutput& out);
    int64_t num_kv_blocks_used() { return kv_.cache().num_blocks() - kv_.num_available_blocks(); }

    // Constrained decoding (Lab 12; engine_grammar.cpp). The mask of the
    // tokens `live`'s grammar allows next (null when unconstrained), kept in
    // live.masks for the runner to read during the step.
    const TokenBitmask* next_token_mask(Live& live, StepOutput& out);
    // The K+1 masks a verification of `drafts` draws under: after the
    // request's tokens, then after each draft (the drafts are grammar-valid:
    // DraftRound cut them). The matcher is left as it was. Empty when unconstrained.
    std::span<const TokenBitmask> draft_masks(Live& live, std::span<const TokenId> drafts,
                                              StepOutput& out);
    // After `live` accepted a token: whether its grammar is done (an end
    // token, or a sentence nothing can extend). Throws servelab::Error when
    // the token breaks the grammar (a runner that ignored the mask).
    bool grammar_finished(Live& live, TokenId token);

    // What a request does with its tokens (engine_output.cpp).
    // Appends `token` (and its logprobs, when `live` asked for them) to
    // `live`, streams it, and finishes `live` if it is done. Returns true
    // when it finished (`live` may then be destroyed).
    bool accept_token(Live& live, TokenId token, const std::optional<SampledLogprobs>& logprobs,
                      Clock::time_point now, StepOutput& out);
    // A verification pass is back: the accepted drafts are kept in the
    // target's pool and the drafter (accept_verified, draft_round.h), then
    // they and the target's token are accepted one by one (a stop string or
    // max_tokens may end the request midway; the rest is dropped).
    void emit_verified(Live& live, std::span<const TokenId> drafts, const Verification& verdict,
                       Clock::time_point now, StepOutput& out);
    // The prompt of `parent` is computed: its waiting siblings fork its
    // blocks and take their first tokens (sampled from the parent's logits).
    // Their tokens are the step's samples from `first` on, one per sibling.
    void fork_siblings(Live& parent, const StepResult& result, size_t first, Clock::time_point now,
                       StepOutput& out);
    // Ends `live` and appends its result to `finished`. `live` is then
    // destroyed; under static batching its Request may stay on as a padding
    // row (StaticPadding).
    void finish(Live& live, FinishReason reason, std::vector<FinishedRequest>& finished);

    // Runs the step loop until every request of `ids` finishes (engine_generate.cpp).
    std::vector<GenerationResult> run_until_done(const std::vector<int64_t>& ids);

    const Model& model_;
    StepRunner& runner_;
    std::unique_ptr<PagedKvCache> own_pool_;  // only when the engine owns its pool
    std::unique_ptr<KvBlockManager> own_kv_;
    KvBlockManager& kv_;
    // The longest request it admits: the model's context, or less with
    // SchedulerConfig::max_model_len. Set before the scheduler, which uses it.
    int64_t context_length_;
    Scheduler scheduler_;
    int64_t next_id_ = 0;
    std::map<int64_t, std::unique_ptr<Live>> requests_;
    StaticPadding padding_;                   // static batching's finished rows
    std::vector<FinishedRequest> cancelled_;  // reported by the next step()
    NgramDrafter ngram_drafter_;
    std::map<std::string, Drafter*> drafters_;  // by name
    std::string default_drafter_ = "ngram";
};

}  // namespace servelab
