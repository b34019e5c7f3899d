// engine.cpp — see engine.h. Lab 5 (chapter 11.5, continuous batching): the
// engine's requests and its step, move by move.
#include "reference/engine/engine.h"

#include <fmt/format.h>

#include "kernels/common/error.h"
#include "reference/engine/engine_live.h"

namespace servelab {

Engine::Engine(const Model& model, StepRunner& runner, const EngineConfig& config)
    : model_(model),
      runner_(runner),
      own_pool_(std::make_unique<PagedKvCache>(model.config, config.num_kv_blocks,
                                               config.block_size, runner.kv_storage())),
      own_kv_(std::make_unique<KvBlockManager>(*own_pool_, config.prefix_cache)),
      kv_(*own_kv_),
      context_length_(capped_context_length(model.config, config.scheduler.max_model_len)),
      scheduler_(kv_, config.scheduler, context_length_),
      padding_(scheduler_, kv_, context_length_, config.scheduler.static_batching) {
    drafters_["ngram"] = &ngram_drafter_;
}

Engine::Engine(const Model& model, StepRunner& runner, KvBlockManager& kv,
               const SchedulerConfig& scheduler)
    : model_(model),
      runner_(runner),
      kv_(kv),
      context_length_(capped_context_length(model.config, scheduler.max_model_len)),
      scheduler_(kv_, scheduler, context_length_),
      padding_(scheduler_, kv_, context_length_, scheduler.static_batching) {
    drafters_["ngram"] = &ngram_drafter_;
}

Engine::~Engine() = default;

void Engine::add_drafter(const std::string& name, Drafter& drafter, bool make_default) {
    if (name.empty()) throw Error("add_drafter: a drafter needs a name");
    drafters_[name] = &drafter;
    if (make_default) default_drafter_ = name;
}

std::unique_ptr<Engine::Live> Engine::make_live(int64_t id, std::vector<TokenId> prompt,
                                                const SamplingParams& params, int32_t priority,
                                                TokenCallback on_token, Clock::time_point arrival) {
    params.validate();
    runner_.check_sampling(params);
    for (TokenId id : prompt) {
        if (id < 0 || id >= model_.config.vocab_size) {
            throw Error("add_request: a prompt token id is outside the vocabulary");
        }
    }
    for (const auto& [id, bias] : params.logit_bias) {
        if (id >= model_.config.vocab_size) {
            throw Error(
                fmt::format("add_request: logit_bias token id {} is outside the "
                            "vocabulary of {}",
                            id, model_.config.vocab_size));
        }
    }
    auto live =
        std::make_unique<Live>(id, std::move(prompt), params, priority, kv_.cache().block_size(),
                               model_.tokenizer, std::move(on_token), arrival);
    live->result.prompt_tokens = live->request->tokens;
    if (params.num_speculative_tokens > 0) live->drafter = find_drafter(params);
    return live;
}

Drafter* Engine::find_drafter(const SamplingParams& params) const {
    const std::string& name = params.drafter.empty() ? default_drafter_ : params.drafter;
    const auto found = drafters_.find(name);
    if (found != drafters_.end()) return found->second;
    std::string loaded;
    for (const auto& [known, drafter] : drafters_) loaded += (loaded.empty() ? "" : ", ") + known;
    throw Error(
        fmt::format("add_request: no drafter named '{}' is loaded (loaded: {})", name, loaded));
}

int64_t Engine::add_request(std::vector<TokenId> prompt, const SamplingParams& params,
                            int32_t priority, TokenCallback on_token, Clock::time_point arrival) {
    std::unique_ptr<Live> live =
        make_live(next_id_, std::move(prompt), params, priority, std::move(on_token), arrival);
    scheduler_.add(*live->request);  // throws for a request that could never run
    const int64_t id = next_id_++;
    requests_[id] = std::move(live);
    return id;
}

std::vector<int64_t> Engine::add_parallel_request(std::vector<TokenId> prompt,
                                                  const SamplingParams& params, int num_completions,
                                                  TokenCallback on_token) {
    std::vector<TokenCallback> on_tokens(size_t(std::max(num_completions, 1)));
    on_tokens[0] = std::move(on_token);
    return add_parallel_request(std::move(prompt), params, num_completions, std::move(on_tokens));
}

std::vector<int64_t> Engine::add_parallel_request(std::vector<TokenId> prompt,
                                                  const SamplingParams& params, int num_completions,
                                                  std::vector<TokenCallback> on_tokens,
                                                  int32_t priority) {
    if (num_completions < 1) {
        throw Error(fmt::format("generate: n = {} completions, need at least 1", num_completions));
    }
    on_tokens.resize(size_t(num_completions));
    const int64_t first = add_request(prompt, params, priority, std::move(on_tokens[0]));
    std::vector<int64_t> ids = {first};
    Live& parent = *requests_.at(first);
    for (int i = 1; i < num_completions; ++i) {
        const SamplingParams own = completion_params(params, i);
        std::unique_ptr<Live> sibling = make_live(next_id_++, prompt, own, priority,
                                                  std::move(on_tokens[size_t(i)]), parent.arrival);
        sibling->waiting_to_fork = true;
        const int64_t id = sibling->request->id;
        parent.siblings.push_back(id);
        requests_[id] = std::move(sibling);
        ids.push_back(id);
    }
    return ids;
}

// One iteration of continuous batching: drafts → schedule → batch → run →
// apply. Drafts come first (Lab 6): how many drafts a request holds decides
// how many slots the scheduler reserves for them.
StepOutput Engine::step(const StepScheduledCallback& on_scheduled) {
    StepOutput out = begin_step();
    DraftRound round = propose_drafts(out);
    const SchedulerOutput scheduled = schedule(on_scheduled, out);
    const std::vector<Draft> drafts = round.fit_to_slots(scheduled);
    const StepBatchPlan plan = build_batch(scheduled, drafts, out);
    const StepResult result = run(plan);
    apply_results(scheduled, drafts, plan, result, out);
    end_step(out);
    return out;
}

StepOutput Engine::begin_step() {
    StepOutput out;
    out.started = Clock::now();
    out.finished = std::move(cancelled_);
    cancelled_.clear();
    return out;
}

DraftRound Engine::propose_drafts(StepOutput& out) {
    std::vector<DraftCandidate> candidates;
    for (auto& [id, live] : requests_) {
        // A sibling waiting to fork has no sequence of its own to draft after yet.
        if (live->drafter != nullptr && !live->waiting_to_fork) {
            candidates.push_back({live->request.get(), live->drafter, &live->sampler,
                                  live->grammar ? &*live->grammar : nullptr});
        }
    }
    DraftRound round(model_.config.vocab_size, context_length_);
    round.propose(drafters_, candidates);
    out.draft_ms = round.draft_ms();
    return round;
}

SchedulerOutput Engine::schedule(const StepScheduledCallback& on_scheduled, StepOutput& out) {
    SchedulerOutput scheduled = scheduler_.schedule();
    if (on_scheduled) {
        on_scheduled({scheduler_.num_running(), scheduler_.num_waiting(), num_kv_blocks_used()});
    }
    out.num_batched_tokens = scheduled.num_batched_tokens;
    out.num_preempted = int64_t(scheduled.preempted.size());
    return scheduled;
}

Engine::StepBatchPlan Engine::build_batch(const SchedulerOutput& scheduled,
                                          std::span<const Draft> drafts, StepOutput& out) {
    StepBatchPlan plan;
    plan.draft_chunks.resize(scheduled.chunks.size());
    for (size_t i = 0; i < scheduled.chunks.size(); ++i) {
        const ScheduledChunk& c = scheduled.chunks[i];
        Request& r = *c.request;
        const int64_t row = int64_t(plan.chunks.size());
        const Draft& draft = drafts[i];  // exactly num_draft_slots tokens
        if (!draft.tokens.empty()) {
            add_verification(r, draft, row, plan.draft_chunks[i], plan, out);
            continue;
        }
        const int64_t num_tokens = c.num_tokens - c.num_draft_slots;
        const auto tokens =
            std::span(r.tokens).subspan(size_t(r.kv.num_computed_tokens), size_t(num_tokens));
        plan.chunks.push_back({StepInput{tokens, r.kv.num_computed_tokens}, &r.kv.table});
        if (!r.is_decoding()) out.num_prefill_tokens += num_tokens;

        const bool completes = r.num_uncomputed() == num_tokens;
        if (r.padding || !completes) {
            plan.first_sample.push_back(-1);
            continue;
        }
        plan.first_sample.push_back(int64_t(plan.samples.size()));
        Live& live = *requests_.at(r.id);
        // The prompt's last logits also give each waiting sibling its first token.
        for (int64_t id : live.siblings) {
            Live& sibling = *requests_.at(id);
            plan.samples.push_back(
                {row, &sibling.sampler, sibling.request->tokens, next_token_mask(sibling, out)});
        }
        plan.samples.push_back({row, &live.sampler, r.tokens, next_token_mask(live, out)});
    }
    return plan;
}

void Engine::add_verification(Request& r, const Draft& draft, int64_t row,
                              std::vector<TokenId>& chunk_tokens, StepBatchPlan& plan,
                              StepOutput& out) {
    // The chunk is [last token, d_1..d_K], with logits for every position.
    chunk_tokens = {r.tokens.back()};
    chunk_tokens.insert(chunk_tokens.end(), draft.tokens.begin(), draft.tokens.end());
    plan.chunks.push_back(
        {StepInput{chunk_tokens, r.kv.num_computed_tokens, LogitsFor::kAllTokens}, &r.kv.table});
    Live& live = *requests_.at(r.id);
    plan.verifications.push_back({row, &live.sampler, r.tokens, draft.tokens, draft.probs,
                                  draft_masks(live, draft.tokens, out)});
    out.num_drafted_tokens += int64_t(draft.tokens.size());
    plan.first_sample.push_back(-1);
}

StepResult Engine::run(const StepBatchPlan& plan) {
    // Copy-on-write copies made since the last step travel with the batch
    // (a device pool replays them); taken even when nothing runs.
    const std::vector<BlockCopy> copies = kv_.take_block_copies();
    if (plan.chunks.empty()) return {};
    return runner_.run_step({plan.chunks, copies, plan.samples, plan.verifications}, kv_.cache());
}

void Engine::apply_results(const SchedulerOutput& scheduled, std::span<const Draft> drafts,
                           const StepBatchPlan& plan, const StepResult& result, StepOutput& out) {
    const auto now = Clock::now();
    size_t next_verification = 0;
    for (size_t i = 0; i < scheduled.chunks.size(); ++i) {
        Request& r = *scheduled.chunks[i].request;
        if (r.padding) {
            padding_.advance(r);
            continue;
        }
        Live& live = *requests_.at(r.id);
        if (!drafts[i].tokens.empty()) {
            emit_verified(live, drafts[i].tokens, result.verified[next_verification++], now, out);
            continue;
        }
        if (!live.scheduled_once) {
            live.scheduled_once = true;
            live.result.timings.queue_ms = ms_between(live.arrival, out.started);
            live.result.cached_prompt_tokens = r.kv.num_cached_prompt_tokens;
        }
        kv_.commit(r.kv, r.tokens);
        if (plan.first_sample[i] < 0) continue;  // mid-prompt: no token this step
        const size_t first = size_t(plan.first_sample[i]);
        const size_t own = first + live.siblings.size();
        if (!live.siblings.empty()) fork_siblings(live, result, first, now, out);
        accept_token(live, result.sampled[own], logprobs_at(result, own), now, out);
    }
}

void Engine::end_step(StepOutput& out) {
    padding_.end_step();
    out.num_running = scheduler_.num_running();
    out.num_waiting = scheduler_.num_waiting();
    out.num_kv_blocks_used = num_kv_blocks_used();
}

}  // namespace servelab
