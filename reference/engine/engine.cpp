// engine.cpp — see engine.h.
#include "reference/engine/engine.h"

#include <fmt/format.h>

#include <optional>

#include "reference/common/error.h"

namespace servelab {
namespace {

double ms_between(Engine::Clock::time_point from, Engine::Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

// Sample `i`'s logprobs, when the runner computed any.
const std::optional<SampledLogprobs>& logprobs_at(const StepResult& result, size_t i) {
    static const std::optional<SampledLogprobs> none;
    return i < result.logprobs.size() ? result.logprobs[i] : none;
}

}  // namespace

struct Engine::Live {
    Live(int64_t id, std::vector<TokenId> prompt, const SamplingParams& params, int32_t priority,
         int64_t block_size, const Tokenizer& tokenizer, TokenCallback callback,
         Clock::time_point arrival)
        : request(id, std::move(prompt), params, priority, block_size),
          sampler(request.params),
          stop(tokenizer, request.params),
          on_token(std::move(callback)),
          arrival(arrival),
          last_token(arrival) {}

    Request request;
    Sampler sampler;
    StopChecker stop;  // refers to request.params: a Live never moves (unique_ptr)
    TokenCallback on_token;
    GenerationResult result;
    Clock::time_point arrival;
    Clock::time_point last_token;
    bool scheduled_once = false;
    // Parallel sampling: the ids of the completions waiting to fork this
    // request's prompt, and whether this one is such a waiting sibling.
    std::vector<int64_t> siblings;
    bool waiting_to_fork = false;
    Drafter* drafter = nullptr;  // speculative decoding only
};

Engine::Engine(const Model& model, StepRunner& runner, const EngineConfig& config)
    : model_(model),
      runner_(runner),
      own_pool_(std::make_unique<PagedKvCache>(model.config, config.num_kv_blocks,
                                               config.block_size, runner.kv_storage())),
      own_kv_(std::make_unique<KvBlockManager>(*own_pool_, config.prefix_cache)),
      kv_(*own_kv_),
      context_length_(capped_context_length(model.config, config.scheduler.max_model_len)),
      scheduler_(kv_, config.scheduler, context_length_),
      static_batching_(config.scheduler.static_batching) {
    drafters_["ngram"] = &ngram_drafter_;
}

Engine::Engine(const Model& model, StepRunner& runner, KvBlockManager& kv,
               const SchedulerConfig& scheduler)
    : model_(model),
      runner_(runner),
      kv_(kv),
      context_length_(capped_context_length(model.config, scheduler.max_model_len)),
      scheduler_(kv_, scheduler, context_length_),
      static_batching_(scheduler.static_batching) {
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
    live->result.prompt_tokens = live->request.tokens;
    if (params.num_speculative_tokens > 0) {
        const std::string& name = params.drafter.empty() ? default_drafter_ : params.drafter;
        const auto found = drafters_.find(name);
        if (found == drafters_.end()) {
            std::string loaded;
            for (const auto& [known, drafter] : drafters_)
                loaded += (loaded.empty() ? "" : ", ") + known;
            throw Error(fmt::format("add_request: no drafter named '{}' is loaded (loaded: {})",
                                    name, loaded));
        }
        live->drafter = found->second;
    }
    return live;
}

int64_t Engine::add_request(std::vector<TokenId> prompt, const SamplingParams& params,
                            int32_t priority, TokenCallback on_token, Clock::time_point arrival) {
    std::unique_ptr<Live> live =
        make_live(next_id_, std::move(prompt), params, priority, std::move(on_token), arrival);
    scheduler_.add(live->request);  // throws for a request that could never run
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
                                                  std::vector<TokenCallback> on_tokens) {
    if (num_completions < 1) {
        throw Error(fmt::format("generate: n = {} completions, need at least 1", num_completions));
    }
    on_tokens.resize(size_t(num_completions));
    const int64_t first = add_request(prompt, params, 0, std::move(on_tokens[0]));
    std::vector<int64_t> ids = {first};
    Live& parent = *requests_.at(first);
    for (int i = 1; i < num_completions; ++i) {
        const SamplingParams own = completion_params(params, i);
        std::unique_ptr<Live> sibling =
            make_live(next_id_++, prompt, own, 0, std::move(on_tokens[size_t(i)]), parent.arrival);
        sibling->waiting_to_fork = true;
        const int64_t id = sibling->request.id;
        parent.siblings.push_back(id);
        requests_[id] = std::move(sibling);
        ids.push_back(id);
    }
    return ids;
}

// One iteration of continuous batching, in three phases: the scheduler's
// chunks become a batch (build_batch), the runner computes it (one forward
// pass), and each chunk's outcome goes back to its request (apply_results).
StepOutput Engine::step(const StepScheduledCallback& on_scheduled) {
    const auto step_start = Clock::now();
    StepOutput out;
    out.started = step_start;
    out.finished = std::move(cancelled_);
    cancelled_.clear();
    // Speculation (Lab 6) drafts first: how many drafts each request has
    // decides how many slots the scheduler reserves for them.
    std::map<int64_t, Draft> drafts_ready = propose_drafts(out);
    const SchedulerOutput scheduled = scheduler_.schedule();
    if (on_scheduled) {
        on_scheduled({scheduler_.num_running(), scheduler_.num_waiting(),
                      kv_.cache().num_blocks() - kv_.num_available_blocks()});
    }
    out.num_batched_tokens = scheduled.num_batched_tokens;
    out.num_preempted = int64_t(scheduled.preempted.size());
    for (Request* r : scheduled.preempted) {
        Live& live = *requests_.at(r->id);
        if (live.drafter != nullptr) live.drafter->release(r->id);  // recomputed later
    }
    const std::vector<Draft> drafts = drafts_for_chunks(scheduled, drafts_ready);

    const StepBatchPlan plan = build_batch(scheduled, drafts, out);
    const std::vector<BlockCopy> copies = kv_.take_block_copies();
    StepResult result;
    if (!plan.chunks.empty()) {
        result =
            runner_.run_step({plan.chunks, copies, plan.samples, plan.verifications}, kv_.cache());
    }
    apply_results(scheduled, drafts, plan, result, step_start, out);

    if (static_batching_) release_padding();
    out.num_running = scheduler_.num_running();
    out.num_waiting = scheduler_.num_waiting();
    out.num_kv_blocks_used = kv_.cache().num_blocks() - kv_.num_available_blocks();
    return out;
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
            plan.samples.push_back({row, &sibling.sampler, sibling.request.tokens});
        }
        plan.samples.push_back({row, &live.sampler, r.tokens});
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
    plan.verifications.push_back({row, &live.sampler, r.tokens, draft.tokens, draft.probs});
    out.num_drafted_tokens += int64_t(draft.tokens.size());
    plan.first_sample.push_back(-1);
}

void Engine::apply_results(const SchedulerOutput& scheduled, std::span<const Draft> drafts,
                           const StepBatchPlan& plan, const StepResult& result,
                           Clock::time_point step_start, StepOutput& out) {
    const auto now = Clock::now();
    size_t next_verification = 0;
    for (size_t i = 0; i < scheduled.chunks.size(); ++i) {
        Request& r = *scheduled.chunks[i].request;
        if (r.padding) {
            kv_.commit(r.kv, r.tokens);
            compute_padding_row(r);
            continue;
        }
        Live& live = *requests_.at(r.id);
        if (!drafts[i].tokens.empty()) {
            accept_verified(live, drafts[i].tokens, result.verified[next_verification++], now, out);
            continue;
        }
        if (!live.scheduled_once) {
            live.scheduled_once = true;
            live.result.timings.queue_ms = ms_between(live.arrival, step_start);
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

int64_t Engine::draft_room(const Live& live) const {
    const Request& r = live.request;
    if (live.drafter == nullptr || live.waiting_to_fork || r.padding ||
        r.status != RequestStatus::kRunning || !r.is_decoding()) {
        return 0;
    }
    // A pass emits the accepted drafts plus one token of the target's own:
    // no draft is worth proposing past max_tokens or past the context.
    const int64_t useful = int64_t(r.params.max_tokens) - r.num_generated() - 1;
    const int64_t room = context_length_ - int64_t(r.tokens.size());
    return std::min({int64_t(r.params.num_speculative_tokens), useful, room});
}

std::map<int64_t, Draft> Engine::propose_drafts(StepOutput& out) {
    std::map<int64_t, Draft> ready;
    const auto start = Clock::now();
    const size_t vocab = size_t(model_.config.vocab_size);
    for (const auto& [name, drafter] : drafters_) {
        std::vector<DraftRequest> asks;
        for (auto& [id, live] : requests_) {
            const int64_t room = draft_room(*live);
            if (live->drafter == drafter && room > 0) {
                asks.push_back({id, live->request.tokens, room, &live->sampler});
            }
        }
        if (asks.empty()) continue;
        std::vector<Draft> proposed = drafter->propose(asks);
        if (proposed.size() != asks.size()) {
            throw Error(fmt::format("drafter '{}' returned {} drafts for {} requests", name,
                                    proposed.size(), asks.size()));
        }
        for (size_t j = 0; j < asks.size(); ++j) {
            Draft& draft = proposed[j];
            if (int64_t(draft.tokens.size()) > asks[j].max_drafts ||
                (!draft.probs.empty() && draft.probs.size() != draft.tokens.size() * vocab)) {
                throw Error(fmt::format("drafter '{}' returned a malformed draft", name));
            }
            if (draft.tokens.empty()) continue;
            requests_.at(asks[j].request_id)->request.num_drafts_ready =
                int64_t(draft.tokens.size());
            ready[asks[j].request_id] = std::move(draft);
        }
    }
    out.draft_ms = ms_between(start, Clock::now());
    return ready;
}

std::vector<Draft> Engine::drafts_for_chunks(const SchedulerOutput& scheduled,
                                             std::map<int64_t, Draft>& drafts_ready) {
    // The scheduler has read the counts; the next step proposes anew.
    for (const auto& [id, draft] : drafts_ready) requests_.at(id)->request.num_drafts_ready = 0;
    std::vector<Draft> drafts(scheduled.chunks.size());
    const size_t vocab = size_t(model_.config.vocab_size);
    for (size_t i = 0; i < scheduled.chunks.size(); ++i) {
        const ScheduledChunk& c = scheduled.chunks[i];
        if (c.num_draft_slots == 0) continue;
        auto found = drafts_ready.find(c.request->id);
        if (found == drafts_ready.end() ||
            int64_t(found->second.tokens.size()) < c.num_draft_slots) {
            throw Error(
                fmt::format("the scheduler reserved {} draft slots for request {}, which "
                            "has {} drafts (Request::num_drafts_ready)",
                            c.num_draft_slots, c.request->id,
                            found == drafts_ready.end() ? 0 : found->second.tokens.size()));
        }
        Draft& draft = found->second;
        // The budget may have left fewer slots than drafts: verify the first ones.
        draft.tokens.resize(size_t(c.num_draft_slots));
        if (!draft.probs.empty()) draft.probs.resize(size_t(c.num_draft_slots) * vocab);
        drafts[i] = std::move(draft);
        drafts_ready.erase(found);
    }
    // Drafted, but given no slot this step (the budget or the pool ran out):
    // the drafter forgets those drafts. (A preempted request's drafter state
    // is already released.)
    for (const auto& [id, unused] : drafts_ready) {
        Live& live = *requests_.at(id);
        if (live.request.status == RequestStatus::kRunning) {
            live.drafter->rollback(id, int64_t(live.request.tokens.size()));
        }
    }
    return drafts;
}

void Engine::accept_verified(Live& live, std::span<const TokenId> drafts,
                             const Verification& verdict, Clock::time_point now, StepOutput& out) {
    Request& r = live.request;
    // The pass wrote keys and values for the last token and every draft;
    // keep them up to the last accepted draft. The target's own next token
    // is not computed yet: the next step computes it (and drafts after it).
    const auto kept = drafts.first(size_t(verdict.num_accepted));
    const int64_t num_kept = int64_t(r.tokens.size()) + verdict.num_accepted;
    kv_.rollback(r.kv, num_kept);
    std::vector<TokenId> kept_sequence = r.tokens;
    kept_sequence.insert(kept_sequence.end(), kept.begin(), kept.end());
    kv_.commit(r.kv, kept_sequence);
    live.drafter->rollback(r.id, num_kept);

    SpeculativeStats& stats = live.result.speculative;
    ++stats.verify_passes;
    stats.drafted_tokens += int64_t(drafts.size());
    stats.accepted_tokens += verdict.num_accepted;
    if (verdict.num_accepted < int64_t(drafts.size())) ++stats.rejections;
    out.num_accepted_tokens += verdict.num_accepted;

    std::vector<TokenId> emitted(kept.begin(), kept.end());
    emitted.push_back(verdict.next_token);
    for (TokenId token : emitted) {
        if (accept_token(live, token, std::nullopt, now, out)) {
            return;  // finished: the rest is dropped
        }
    }
}

void Engine::fork_siblings(Live& parent, const StepResult& result, size_t first,
                           Clock::time_point now, StepOutput& out) {
    for (size_t i = 0; i < parent.siblings.size(); ++i) {
        Live& sibling = *requests_.at(parent.siblings[i]);
        sibling.waiting_to_fork = false;
        sibling.scheduled_once = true;
        sibling.result.timings.queue_ms = parent.result.timings.queue_ms;
        sibling.result.cached_prompt_tokens = parent.result.cached_prompt_tokens;
        sibling.request.kv = kv_.fork(parent.request.kv);
        scheduler_.add_running(sibling.request);
        accept_token(sibling, result.sampled[first + i], logprobs_at(result, first + i), now, out);
    }
    parent.siblings.clear();
}

bool Engine::accept_token(Live& live, TokenId token, const std::optional<SampledLogprobs>& logprobs,
                          Clock::time_point now, StepOutput& out) {
    Request& r = live.request;
    r.tokens.push_back(token);
    live.result.tokens.push_back(token);
    if (logprobs) live.result.logprobs.push_back(*logprobs);
    if (live.result.tokens.size() == 1)
        live.result.timings.first_step_ms = ms_between(live.arrival, now);
    live.result.timings.step_latency_ms.push_back(ms_between(live.last_token, now));
    live.last_token = now;

    std::string piece;
    std::optional<FinishReason> finished = live.stop.push(token, piece);
    // The sequence is full: no position is left for another token.
    if (!finished && int64_t(r.tokens.size()) >= context_length_) {
        piece += live.stop.finish();
        finished = FinishReason::kLength;
    }
    if (live.on_token) live.on_token(token, piece);
    out.tokens.push_back({r.id, token, std::move(piece), logprobs});
    if (finished) finish(live, *finished, out.finished);
    return finished.has_value();
}

void Engine::finish(Live& live, FinishReason reason, std::vector<FinishedRequest>& finished) {
    const int64_t id = live.request.id;
    // Siblings still waiting for this prompt compute it themselves instead.
    for (int64_t sibling : live.siblings) {
        Live& orphan = *requests_.at(sibling);
        orphan.waiting_to_fork = false;
        scheduler_.add(orphan.request);
    }
    if (live.waiting_to_fork) {
        for (auto& [other_id, other] : requests_) std::erase(other->siblings, id);
    }
    live.result.finish_reason = reason;
    live.result.text = live.stop.text();
    live.result.num_preemptions = live.request.num_preemptions;
    live.result.timings.total_ms = ms_between(live.arrival, Clock::now());
    finished.push_back({id, std::move(live.result)});
    if (live.drafter != nullptr) live.drafter->release(id);

    // A static batch keeps its shape: the finished request stays as a
    // padding row until the batch ends (release_padding).
    if (static_batching_ && reason != FinishReason::kCancelled &&
        live.request.status == RequestStatus::kRunning) {
        live.request.padding = true;
        padding_[id] = std::move(requests_.at(id));
        requests_.erase(id);
        return;
    }
    if (!live.waiting_to_fork) scheduler_.finish(live.request);  // its blocks go back now
    requests_.erase(id);
}

void Engine::compute_padding_row(Request& row) {
    // Any token will do (it is discarded); the last one again keeps the row
    // as costly as a real decode token at its position.
    if (int64_t(row.tokens.size()) < context_length_) {
        row.tokens.push_back(row.tokens.back());
        return;
    }
    scheduler_.finish(row);  // no position left: the row leaves early
    padding_.erase(row.id);
}

void Engine::release_padding() {
    // Rows the scheduler dropped to free blocks are gone already.
    std::erase_if(padding_, [](const auto& entry) {
        return entry.second->request.status == RequestStatus::kFinished;
    });
    if (scheduler_.num_running() > int64_t(padding_.size())) return;  // the batch goes on
    for (auto& [id, row] : padding_) scheduler_.finish(row->request);
    padding_.clear();
}

bool Engine::cancel(int64_t request_id) {
    const auto found = requests_.find(request_id);
    if (found == requests_.end()) return false;
    finish(*found->second, FinishReason::kCancelled, cancelled_);
    return true;
}

std::vector<GenerationResult> Engine::run_until_done(const std::vector<int64_t>& ids) {
    std::map<int64_t, GenerationResult> done;
    try {
        while (done.size() < ids.size()) {
            StepOutput out = step();
            for (FinishedRequest& f : out.finished) done[f.request_id] = std::move(f.result);
        }
    } catch (...) {
        for (int64_t id : ids) cancel(id);  // give every block back before reporting
        cancelled_.clear();
        throw;
    }
    std::vector<GenerationResult> results;
    for (int64_t id : ids) results.push_back(std::move(done.at(id)));
    return results;
}

std::vector<GenerationResult> Engine::generate(const std::vector<std::vector<TokenId>>& prompts,
                                               const SamplingParams& params) {
    if (has_unfinished()) throw Error("generate: the engine already has requests in flight");
    std::vector<int64_t> ids;
    try {
        for (const std::vector<TokenId>& prompt : prompts)
            ids.push_back(add_request(prompt, params));
    } catch (...) {
        for (int64_t id : ids) cancel(id);
        cancelled_.clear();
        throw;
    }
    return run_until_done(ids);
}

std::vector<GenerationResult> Engine::generate_parallel(std::span<const TokenId> prompt,
                                                        const SamplingParams& params,
                                                        int num_completions,
                                                        const TokenCallback& on_token) {
    if (has_unfinished()) throw Error("generate: the engine already has requests in flight");
    return run_until_done(
        add_parallel_request({prompt.begin(), prompt.end()}, params, num_completions, on_token));
}

}  // namespace servelab
