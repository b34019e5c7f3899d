// draft_round.cpp — see draft_round.h. Lab 6 (chapter 11.6, speculative decoding).
#include "reference/speculative/draft_round.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "kernels/common/error.h"

namespace servelab {

int64_t draft_room(const Request& request, int64_t context_length) {
    if (request.padding || request.status != RequestStatus::kRunning || !request.is_decoding()) {
        return 0;
    }
    // A pass emits the accepted drafts plus one token of the target's own:
    // no draft is worth proposing past max_tokens or past the context.
    const int64_t useful = int64_t(request.params.max_tokens) - request.num_generated() - 1;
    const int64_t room = context_length - int64_t(request.tokens.size());
    return std::min({int64_t(request.params.num_speculative_tokens), useful, room});
}

void DraftRound::propose(const std::map<std::string, Drafter*>& drafters,
                         std::span<const DraftCandidate> candidates) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (const DraftCandidate& c : candidates) drafter_of_[c.request->id] = c.drafter;
    for (const auto& [name, drafter] : drafters) {
        std::vector<DraftRequest> asks;
        std::vector<const DraftCandidate*> askers;  // asks[j] is askers[j]'s
        for (const DraftCandidate& c : candidates) {
            const int64_t room = draft_room(*c.request, context_length_);
            if (c.drafter == drafter && room > 0) {
                asks.push_back({c.request->id, c.request->tokens, room, c.sampler});
                askers.push_back(&c);
            }
        }
        if (asks.empty()) continue;
        std::vector<Draft> proposed = drafter->propose(asks);
        check_drafts(name, asks, proposed);
        for (size_t j = 0; j < asks.size(); ++j) {
            Request& request = *askers[j]->request;
            if (askers[j]->grammar != nullptr && !proposed[j].tokens.empty()) {
                cut_to_grammar(proposed[j], *askers[j]->grammar);
                // Nothing left to verify: the drafter forgets the whole draft.
                if (proposed[j].tokens.empty()) {
                    drafter->rollback(request.id, int64_t(request.tokens.size()));
                }
            }
            if (proposed[j].tokens.empty()) continue;
            request.num_drafts_ready = int64_t(proposed[j].tokens.size());
            ready_[request.id] = {std::move(proposed[j]), &request, drafter};
        }
    }
    draft_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void DraftRound::cut_to_grammar(Draft& draft, GrammarMatcher& grammar) const {
    int32_t num_valid = 0;
    while (size_t(num_valid) < draft.tokens.size() &&
           grammar.accept_token(draft.tokens[size_t(num_valid)])) {
        ++num_valid;
    }
    grammar.rollback(num_valid);
    draft.tokens.resize(size_t(num_valid));
    if (!draft.probs.empty()) draft.probs.resize(size_t(num_valid * vocab_size_));
}

void DraftRound::check_drafts(const std::string& drafter_name, std::span<const DraftRequest> asks,
                              std::span<const Draft> proposed) const {
    if (proposed.size() != asks.size()) {
        throw Error(fmt::format("drafter '{}' returned {} drafts for {} requests", drafter_name,
                                proposed.size(), asks.size()));
    }
    for (size_t j = 0; j < asks.size(); ++j) {
        const Draft& draft = proposed[j];
        if (int64_t(draft.tokens.size()) > asks[j].max_drafts ||
            (!draft.probs.empty() &&
             draft.probs.size() != draft.tokens.size() * size_t(vocab_size_))) {
            throw Error(fmt::format("drafter '{}' returned a malformed draft", drafter_name));
        }
    }
}

std::vector<Draft> DraftRound::fit_to_slots(const SchedulerOutput& scheduled) {
    // A preempted request recomputes its tokens later: its drafter forgets it.
    for (const Request* r : scheduled.preempted) {
        const auto found = drafter_of_.find(r->id);
        if (found != drafter_of_.end()) found->second->release(r->id);
    }
    // The scheduler has read the counts; the next step proposes anew.
    for (auto& [id, proposed] : ready_) proposed.request->num_drafts_ready = 0;
    std::vector<Draft> drafts(scheduled.chunks.size());
    for (size_t i = 0; i < scheduled.chunks.size(); ++i) {
        if (scheduled.chunks[i].num_draft_slots > 0) drafts[i] = cut_to_slots(scheduled.chunks[i]);
    }
    // Drafted, but given no slot this step (the budget or the pool ran out):
    // the drafter forgets those drafts. (A preempted request's drafter state
    // is already released.)
    for (const auto& [id, unused] : ready_) {
        if (unused.request->status == RequestStatus::kRunning) {
            unused.drafter->rollback(id, int64_t(unused.request->tokens.size()));
        }
    }
    ready_.clear();
    return drafts;
}

Draft DraftRound::cut_to_slots(const ScheduledChunk& chunk) {
    const int64_t id = chunk.request->id;
    const auto found = ready_.find(id);
    if (found == ready_.end() ||
        int64_t(found->second.draft.tokens.size()) < chunk.num_draft_slots) {
        throw Error(
            fmt::format("the scheduler reserved {} draft slots for request {}, which has {} drafts "
                        "(Request::num_drafts_ready)",
                        chunk.num_draft_slots, id,
                        found == ready_.end() ? 0 : found->second.draft.tokens.size()));
    }
    Draft draft = std::move(found->second.draft);
    ready_.erase(found);
    // The budget may have left fewer slots than drafts: verify the first ones.
    draft.tokens.resize(size_t(chunk.num_draft_slots));
    if (!draft.probs.empty()) draft.probs.resize(size_t(chunk.num_draft_slots * vocab_size_));
    return draft;
}

std::vector<TokenId> accept_verified(Request& request, Drafter& drafter, KvBlockManager& kv,
                                     std::span<const TokenId> drafts, const Verification& verdict) {
    const auto kept = drafts.first(size_t(verdict.num_accepted));
    const int64_t num_kept = int64_t(request.tokens.size()) + verdict.num_accepted;
    kv.rollback(request.kv, num_kept);
    std::vector<TokenId> kept_sequence = request.tokens;
    kept_sequence.insert(kept_sequence.end(), kept.begin(), kept.end());
    kv.commit(request.kv, kept_sequence);
    drafter.rollback(request.id, num_kept);

    std::vector<TokenId> emitted(kept.begin(), kept.end());
    emitted.push_back(verdict.next_token);
    return emitted;
}

}  // namespace servelab
