// engine_output.cpp — what a request does with the tokens a step gives it: accept them, stream
// them, finish; a computed prompt's waiting siblings fork it.
//
// Part of the engine (Lab 5, chapter 11.5, continuous batching; parallel
// sampling's forks, Lab 4; a verification's tokens, Lab 6). See engine.h.
#include <utility>

#include "reference/engine/engine.h"
#include "reference/engine/engine_live.h"

namespace servelab {

bool Engine::accept_token(Live& live, TokenId token, const std::optional<SampledLogprobs>& logprobs,
                          Clock::time_point now, StepOutput& out) {
    Request& r = *live.request;
    r.tokens.push_back(token);
    live.result.tokens.push_back(token);
    if (logprobs) live.result.logprobs.push_back(*logprobs);
    if (live.result.tokens.size() == 1)
        live.result.timings.first_step_ms = ms_between(live.arrival, now);
    live.result.timings.step_latency_ms.push_back(ms_between(live.last_token, now));
    live.last_token = now;

    std::string piece;
    std::optional<FinishReason> finished = live.stop.push(token, piece);
    // A constrained request's output is a whole sentence that nothing may
    // extend: it stops there, as it would at an end-of-generation token.
    if (grammar_finished(live, token) && !finished) {
        piece += live.stop.finish();
        finished = FinishReason::kStop;
    }
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

void Engine::emit_verified(Live& live, std::span<const TokenId> drafts, const Verification& verdict,
                           Clock::time_point now, StepOutput& out) {
    const std::vector<TokenId> emitted =
        accept_verified(*live.request, *live.drafter, kv_, drafts, verdict);

    SpeculativeStats& stats = live.result.speculative;
    ++stats.verify_passes;
    stats.drafted_tokens += int64_t(drafts.size());
    stats.accepted_tokens += verdict.num_accepted;
    if (verdict.num_accepted < int64_t(drafts.size())) ++stats.rejections;
    out.num_accepted_tokens += verdict.num_accepted;

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
        sibling.request->kv = kv_.fork(parent.request->kv);
        scheduler_.add_running(*sibling.request);
        accept_token(sibling, result.sampled[first + i], logprobs_at(result, first + i), now, out);
    }
    parent.siblings.clear();
}

void Engine::finish(Live& live, FinishReason reason, std::vector<FinishedRequest>& finished) {
    const int64_t id = live.request->id;
    // Siblings still waiting for this prompt compute it themselves instead.
    for (int64_t sibling : live.siblings) {
        Live& orphan = *requests_.at(sibling);
        orphan.waiting_to_fork = false;
        scheduler_.add(*orphan.request);
    }
    if (live.waiting_to_fork) {
        for (auto& [other_id, other] : requests_) std::erase(other->siblings, id);
    }
    live.result.finish_reason = reason;
    live.result.text = live.stop.text();
    live.result.num_preemptions = live.request->num_preemptions;
    live.result.timings.total_ms = ms_between(live.arrival, Clock::now());
    finished.push_back({id, std::move(live.result)});
    if (live.drafter != nullptr) live.drafter->release(id);

    // A static batch keeps its shape: the finished request's row stays in
    // it as a padding row until the batch ends.
    if (padding_.keeps(*live.request, reason == FinishReason::kCancelled)) {
        padding_.keep(std::move(live.request));
    } else if (!live.waiting_to_fork) {
        scheduler_.finish(*live.request);  // its blocks go back now
    }
    requests_.erase(id);
}

bool Engine::cancel(int64_t request_id) {
    const auto found = requests_.find(request_id);
    if (found == requests_.end()) return false;
    finish(*found->second, FinishReason::kCancelled, cancelled_);
    return true;
}

}  // namespace servelab
