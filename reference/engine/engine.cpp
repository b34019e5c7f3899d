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
};

Engine::Engine(const Model& model, StepRunner& runner, const EngineConfig& config)
    : model_(model),
      runner_(runner),
      own_pool_(std::make_unique<PagedKvCache>(model.config, config.num_kv_blocks,
                                               config.block_size, runner.kv_storage())),
      own_kv_(std::make_unique<KvBlockManager>(*own_pool_, config.prefix_caching)),
      kv_(*own_kv_),
      scheduler_(kv_, config.scheduler, model.config.context_length),
      static_batching_(config.scheduler.static_batching) {}

Engine::Engine(const Model& model, StepRunner& runner, KvBlockManager& kv,
               const SchedulerConfig& scheduler)
    : model_(model),
      runner_(runner),
      kv_(kv),
      scheduler_(kv_, scheduler, model.config.context_length),
      static_batching_(scheduler.static_batching) {}

Engine::~Engine() = default;

std::unique_ptr<Engine::Live> Engine::make_live(int64_t id, std::vector<TokenId> prompt,
                                                const SamplingParams& params, int32_t priority,
                                                TokenCallback on_token, Clock::time_point arrival) {
    params.validate();
    for (TokenId id : prompt) {
        if (id < 0 || id >= model_.config.vocab_size) {
            throw Error("add_request: a prompt token id is outside the vocabulary");
        }
    }
    auto live =
        std::make_unique<Live>(id, std::move(prompt), params, priority, kv_.cache().block_size(),
                               model_.tokenizer, std::move(on_token), arrival);
    live->result.prompt_tokens = live->request.tokens;
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

int64_t Engine::add_text_request(std::string_view prompt, const SamplingParams& params,
                                 bool parse_special, int32_t priority, TokenCallback on_token) {
    std::vector<TokenId> ids = model_.tokenizer.encode(prompt, parse_special);
    if (model_.tokenizer.add_bos() && model_.tokenizer.bos_id() >= 0) {
        ids.insert(ids.begin(), model_.tokenizer.bos_id());
    }
    return add_request(std::move(ids), params, priority, std::move(on_token));
}

std::vector<int64_t> Engine::add_parallel_request(std::vector<TokenId> prompt,
                                                  const SamplingParams& params, int num_completions,
                                                  TokenCallback on_token) {
    if (num_completions < 1) {
        throw Error(fmt::format("generate: n = {} completions, need at least 1", num_completions));
    }
    const int64_t first = add_request(prompt, params, 0, std::move(on_token));
    std::vector<int64_t> ids = {first};
    Live& parent = *requests_.at(first);
    for (int i = 1; i < num_completions; ++i) {
        SamplingParams own = params;
        own.seed = params.seed + uint64_t(i);
        std::unique_ptr<Live> sibling = make_live(next_id_++, prompt, own, 0, {}, parent.arrival);
        sibling->waiting_to_fork = true;
        const int64_t id = sibling->request.id;
        parent.siblings.push_back(id);
        requests_[id] = std::move(sibling);
        ids.push_back(id);
    }
    return ids;
}

StepOutput Engine::step() {
    const auto step_start = Clock::now();
    StepOutput out;
    out.finished = std::move(cancelled_);
    cancelled_.clear();
    const SchedulerOutput scheduled = scheduler_.schedule();
    out.num_batched_tokens = scheduled.num_batched_tokens;
    out.num_preempted = int64_t(scheduled.preempted.size());

    std::vector<SequenceChunk> chunks;
    // The samples this step draws, and for each chunk the index of its first
    // (its waiting siblings' samples, then its own), or -1 when its request
    // draws nothing this step (mid-prompt, or a padding row).
    std::vector<SampleRequest> samples;
    std::vector<int64_t> first_sample;
    for (const ScheduledChunk& c : scheduled.chunks) {
        Request& r = *c.request;
        const auto tokens =
            std::span(r.tokens).subspan(size_t(r.kv.num_computed_tokens), size_t(c.num_tokens));
        const int64_t row = int64_t(chunks.size());
        chunks.push_back({StepInput{tokens, r.kv.num_computed_tokens}, &r.kv.table});
        // A decode token is a running request's one newest token; anything
        // else (a prompt chunk, a preempted request's recompute) is prefill.
        const bool decode = r.num_generated() > 0 && r.num_uncomputed() == 1;
        if (!decode) out.num_prefill_tokens += c.num_tokens;

        const bool completes = r.num_uncomputed() == c.num_tokens;
        if (r.padding || !completes) {
            first_sample.push_back(-1);
            continue;
        }
        first_sample.push_back(int64_t(samples.size()));
        Live& live = *requests_.at(r.id);
        for (int64_t id : live.siblings) {
            Live& sibling = *requests_.at(id);
            samples.push_back({row, &sibling.sampler, sibling.request.tokens});
        }
        samples.push_back({row, &live.sampler, r.tokens});
    }
    const std::vector<BlockCopy> copies = kv_.take_block_copies();
    std::vector<TokenId> sampled;
    if (!chunks.empty()) sampled = runner_.run_step({chunks, copies, samples}, kv_.cache());
    const auto now = Clock::now();

    for (size_t i = 0; i < scheduled.chunks.size(); ++i) {
        Request& r = *scheduled.chunks[i].request;
        if (r.padding) {
            kv_.commit(r.kv, r.tokens);
            compute_padding_row(r);
            continue;
        }
        Live& live = *requests_.at(r.id);
        if (!live.scheduled_once) {
            live.scheduled_once = true;
            live.result.timings.queue_ms = ms_between(live.arrival, step_start);
            live.result.cached_prompt_tokens = r.kv.num_cached_prompt_tokens;
        }
        kv_.commit(r.kv, r.tokens);
        if (first_sample[i] < 0) continue;  // mid-prompt: no token this step
        const auto mine = std::span(sampled).subspan(size_t(first_sample[i]));
        const size_t num_siblings = live.siblings.size();
        if (num_siblings > 0) fork_siblings(live, mine.first(num_siblings), now, out);
        accept_token(live, mine[num_siblings], now, out);
    }
    if (static_batching_) release_padding();
    out.num_running = scheduler_.num_running();
    out.num_waiting = scheduler_.num_waiting();
    out.num_kv_blocks_used = kv_.cache().num_blocks() - kv_.num_available_blocks();
    return out;
}

void Engine::fork_siblings(Live& parent, std::span<const TokenId> first_tokens,
                           Clock::time_point now, StepOutput& out) {
    for (size_t i = 0; i < parent.siblings.size(); ++i) {
        Live& sibling = *requests_.at(parent.siblings[i]);
        sibling.waiting_to_fork = false;
        sibling.scheduled_once = true;
        sibling.result.timings.queue_ms = parent.result.timings.queue_ms;
        sibling.result.cached_prompt_tokens = parent.result.cached_prompt_tokens;
        sibling.request.kv = kv_.fork(parent.request.kv);
        scheduler_.add_running(sibling.request);
        accept_token(sibling, first_tokens[i], now, out);
    }
    parent.siblings.clear();
}

void Engine::accept_token(Live& live, TokenId token, Clock::time_point now, StepOutput& out) {
    Request& r = live.request;
    r.tokens.push_back(token);
    live.result.tokens.push_back(token);
    if (live.result.tokens.size() == 1)
        live.result.timings.first_step_ms = ms_between(live.arrival, now);
    live.result.timings.step_latency_ms.push_back(ms_between(live.last_token, now));
    live.last_token = now;

    std::string piece;
    std::optional<FinishReason> finished = live.stop.push(token, piece);
    // The sequence is full: no position is left for another token.
    if (!finished && int64_t(r.tokens.size()) >= model_.config.context_length) {
        piece += live.stop.finish();
        finished = FinishReason::kLength;
    }
    if (live.on_token) live.on_token(token, piece);
    out.tokens.push_back({r.id, token, piece});
    if (finished) finish(live, *finished, out.finished);
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
    if (int64_t(row.tokens.size()) < model_.config.context_length) {
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
