// draft_round.h — one step's speculation around the target's pass: propose drafts, fit them to
// the scheduled slots, keep what the target verified.
//
// Lab 6 (chapter 11.6, speculative decoding). The engine runs one round per
// step, in three moves:
//   propose       before the step is scheduled, every decoding request that
//                 speculates asks its drafter for up to K drafts (all of a
//                 drafter's requests in one call) and records how many it
//                 got (Request::num_drafts_ready), so the scheduler reserves
//                 a slot only for a draft that exists;
//   fit_to_slots  once the scheduler has given draft slots out of the token
//                 budget, each draft is cut to its slots; a draft left
//                 without one is rolled back in its drafter;
//   accept_verified  after the target's pass, the request's pool and its
//                 drafter keep the sequence up to the last accepted draft,
//                 and the kept drafts plus the target's token are emitted.
// The verification itself (the target's distribution as the request's
// Sampler would draw, then the rejection sampler) runs inside the step
// runner: verify_drafts.h.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "reference/constrained/grammar_matcher.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/sampling/sampler.h"
#include "reference/scheduler/request.h"
#include "reference/scheduler/scheduler.h"
#include "reference/speculative/drafter.h"
#include "reference/speculative/rejection_sampler.h"

namespace servelab {

// A request that speculates (SamplingParams::num_speculative_tokens > 0),
// with the drafter it named, its own Sampler (its random stream draws a
// model drafter's drafts) and, when it is constrained (Lab 12), its grammar
// matcher. All must outlive the round.
struct DraftCandidate {
    Request* request = nullptr;
    Drafter* drafter = nullptr;
    Sampler* sampler = nullptr;
    GrammarMatcher* grammar = nullptr;
};

// How many drafts `request` could use this step: 0 unless it is running and
// decoding (not a padding row); at most K, and none past max_tokens or past
// `context_length` (a pass emits the accepted drafts plus one token of the
// target's own).
int64_t draft_room(const Request& request, int64_t context_length);

class DraftRound {
  public:
    // `vocab_size` sizes a drawn draft's probabilities; `context_length`
    // caps every request (draft_room).
    DraftRound(int64_t vocab_size, int64_t context_length)
        : vocab_size_(vocab_size), context_length_(context_length) {}

    // Before scheduling: each drafter of `drafters` (in name order) is asked
    // once for the drafts of its candidates with draft room, in order; each
    // request's num_drafts_ready says how many it got. Throws
    // servelab::Error naming the drafter when one returns the wrong number
    // of drafts, too many tokens, or probabilities of the wrong size. A
    // constrained request's draft is cut before its first token the grammar
    // refuses (checked on its matcher, then rolled back): a slot for a token
    // the target can never sample would be wasted.
    void propose(const std::map<std::string, Drafter*>& drafters,
                 std::span<const DraftCandidate> candidates);
    // The drafters' time in propose().
    double draft_ms() const { return draft_ms_; }

    // After scheduling, once: one draft per scheduled chunk, cut to the
    // chunk's draft slots (empty for a chunk with none). The requests'
    // num_drafts_ready go back to 0; drafts given no slot are rolled back in
    // their drafter, and a preempted request's drafter state is released
    // (it recomputes its tokens later). Throws servelab::Error when the
    // scheduler reserved more slots than a request has drafts.
    std::vector<Draft> fit_to_slots(const SchedulerOutput& scheduled);

  private:
    struct Proposed {
        Draft draft;
        Request* request = nullptr;
        Drafter* drafter = nullptr;
    };
    // The longest prefix of `draft` that `grammar` accepts after the
    // request's tokens; the matcher is left as it was.
    void cut_to_grammar(Draft& draft, GrammarMatcher& grammar) const;
    // Throws unless `proposed` is one well-formed draft per ask.
    void check_drafts(const std::string& drafter_name, std::span<const DraftRequest> asks,
                      std::span<const Draft> proposed) const;
    // The draft for `chunk`, cut to its num_draft_slots.
    Draft cut_to_slots(const ScheduledChunk& chunk);

    int64_t vocab_size_;
    int64_t context_length_;
    std::map<int64_t, Drafter*> drafter_of_;  // every candidate's, by request id
    std::map<int64_t, Proposed> ready_;       // the non-empty drafts, by request id
    double draft_ms_ = 0.0;
};

// A verification pass over `drafts` is back for `request`: the pass wrote
// keys and values for its last token and every draft; the pool (`kv`) and
// `drafter` keep them up to the last accepted draft and forget the rest,
// rolling back before committing, so a rejected draft's block is never
// named in the prefix cache. The target's own next token is not computed
// yet: the next step computes it (and drafts after it). Returns the tokens
// the request emits, in order: the accepted drafts, then the target's token.
std::vector<TokenId> accept_verified(Request& request, Drafter& drafter, KvBlockManager& kv,
                                     std::span<const TokenId> drafts, const Verification& verdict);

}  // namespace servelab
