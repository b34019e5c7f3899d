// engine.cpp — see engine.h.
#include "reference/engine/engine.h"

#include <chrono>
#include <optional>

#include "reference/common/error.h"

namespace servelab {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

struct Engine::Live {
    Live(int64_t id, std::vector<TokenId> prompt, const SamplingParams& params, int32_t priority,
         int64_t block_size, const Tokenizer& tokenizer, TokenCallback callback)
        : request(id, std::move(prompt), params, priority, block_size),
          sampler(request.params),
          stop(tokenizer, request.params),
          on_token(std::move(callback)),
          added(Clock::now()),
          last_token(added) {}

    Request request;
    Sampler sampler;
    StopChecker stop;  // refers to request.params: a Live never moves (unique_ptr)
    TokenCallback on_token;
    GenerationResult result;
    Clock::time_point added;
    Clock::time_point last_token;
};

Engine::Engine(const Model& model, ModelRunner& runner, const EngineConfig& config)
    : model_(model),
      runner_(runner),
      pool_(model.config, config.num_kv_blocks, config.block_size),
      kv_(pool_, config.prefix_caching),
      scheduler_(kv_, config.scheduler, model.config.context_length) {}

Engine::~Engine() = default;

int64_t Engine::add_request(std::vector<TokenId> prompt, const SamplingParams& params,
                            int32_t priority, TokenCallback on_token) {
    params.validate();
    for (TokenId id : prompt) {
        if (id < 0 || id >= model_.config.vocab_size) {
            throw Error("add_request: a prompt token id is outside the vocabulary");
        }
    }
    const int64_t id = next_id_;
    auto live = std::make_unique<Live>(id, std::move(prompt), params, priority, pool_.block_size(),
                                       model_.tokenizer, std::move(on_token));
    live->result.prompt_tokens = live->request.tokens;
    scheduler_.add(live->request);  // throws for a request that could never run
    requests_[id] = std::move(live);
    ++next_id_;
    return id;
}

StepOutput Engine::step() {
    StepOutput out;
    out.finished = std::move(cancelled_);
    cancelled_.clear();
    const SchedulerOutput scheduled = scheduler_.schedule();
    out.num_batched_tokens = scheduled.num_batched_tokens;
    out.num_preempted = int64_t(scheduled.preempted.size());
    if (scheduled.chunks.empty()) return out;

    std::vector<SequenceChunk> chunks;
    for (const ScheduledChunk& c : scheduled.chunks) {
        const Request& r = *c.request;
        const auto tokens =
            std::span(r.tokens).subspan(size_t(r.kv.num_computed_tokens), size_t(c.num_tokens));
        chunks.push_back({StepInput{tokens, r.kv.num_computed_tokens}, &r.kv.table});
    }
    std::vector<float> logits = runner_.forward_batch(chunks, pool_);
    const auto now = Clock::now();
    const size_t vocab_size = size_t(model_.config.vocab_size);

    for (size_t i = 0; i < scheduled.chunks.size(); ++i) {
        Request& r = *scheduled.chunks[i].request;
        kv_.commit(r.kv, r.tokens);
        if (r.num_uncomputed() > 0) continue;  // mid-prompt: no token this step
        Live& live = *requests_.at(r.id);
        const TokenId token =
            live.sampler.sample(std::span(logits).subspan(i * vocab_size, vocab_size), r.tokens);
        r.tokens.push_back(token);
        live.result.tokens.push_back(token);
        if (live.result.tokens.size() == 1)
            live.result.timings.first_step_ms = ms_between(live.added, now);
        live.result.timings.step_latency_ms.push_back(ms_between(live.last_token, now));
        live.last_token = now;

        std::string piece;
        std::optional<FinishReason> finished = live.stop.push(token, piece);
        if (!finished && int64_t(r.tokens.size()) >= model_.config.context_length) {
            piece += live.stop.finish();
            finished = FinishReason::kLength;
        }
        if (live.on_token) live.on_token(token, piece);
        out.tokens.push_back({r.id, token, piece});
        if (finished) finish(live, *finished, out.finished);
    }
    return out;
}

void Engine::finish(Live& live, FinishReason reason, std::vector<FinishedRequest>& finished) {
    const int64_t id = live.request.id;
    scheduler_.finish(live.request);  // its blocks go back now
    live.result.finish_reason = reason;
    live.result.text = live.stop.text();
    live.result.timings.total_ms = ms_between(live.added, Clock::now());
    finished.push_back({id, std::move(live.result)});
    requests_.erase(id);
}

bool Engine::cancel(int64_t request_id) {
    const auto found = requests_.find(request_id);
    if (found == requests_.end()) return false;
    finish(*found->second, FinishReason::kCancelled, cancelled_);
    return true;
}

std::vector<GenerationResult> Engine::generate(const std::vector<std::vector<TokenId>>& prompts,
                                               const SamplingParams& params) {
    if (has_unfinished()) throw Error("generate: the engine already has requests in flight");
    std::vector<int64_t> ids;
    for (const std::vector<TokenId>& prompt : prompts) ids.push_back(add_request(prompt, params));
    std::map<int64_t, GenerationResult> done;
    while (done.size() < ids.size()) {
        StepOutput out = step();
        for (FinishedRequest& f : out.finished) done[f.request_id] = std::move(f.result);
    }
    std::vector<GenerationResult> results;
    for (int64_t id : ids) results.push_back(std::move(done.at(id)));
    return results;
}

}  // namespace servelab
