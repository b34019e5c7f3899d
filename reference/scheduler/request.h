// request.h — one request as the scheduler sees it: its tokens, its KV blocks, its state.
//
// Lab 5 (chapter 11.5, continuous batching). A request waits, runs (a prefill
// chunk or one decode token per step), may be preempted back to waiting
// (its blocks freed, its tokens kept, recomputed later), and finishes.
// Its target is always "every token so far is computed": the prompt at
// first, then each newly sampled token. Chunked prefill, prefix-cache hits
// and preemption only change how far num_computed_tokens is from that target.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/kv/kv_block_manager.h"
#include "reference/sampling/sampling_params.h"

namespace servelab {

enum class RequestStatus { kWaiting, kRunning, kFinished };

struct Request {
    Request(int64_t id, std::vector<TokenId> prompt, SamplingParams params, int32_t priority,
            int64_t block_size)
        : id(id),
          params(std::move(params)),
          priority(priority),
          num_prompt_tokens(int64_t(prompt.size())),
          tokens(std::move(prompt)),
          kv(block_size) {}

    int64_t id;
    SamplingParams params;
    int32_t priority;  // smaller runs first under the priority policy
    int64_t num_prompt_tokens;
    std::vector<TokenId> tokens;  // prompt + generated so far
    PagedSequence kv;             // its blocks; kv.num_computed_tokens is its progress
    RequestStatus status = RequestStatus::kWaiting;
    int64_t num_preemptions = 0;
    // The longest-prefix-match policy only: how many requests behind this
    // one in the queue were admitted before it (its starvation count).
    int64_t num_overtaken = 0;
    // Static batching only: the request has finished (its result is out) but
    // its row stays in the batch, computed and discarded, until the batch ends.
    bool padding = false;
    // Speculative decoding (Lab 6): the drafted tokens the engine holds for
    // this request's next decode step, proposed before the step is
    // scheduled. The scheduler reserves at most this many draft slots, so
    // no slot is reserved for a draft that does not exist.
    int64_t num_drafts_ready = 0;

    int64_t num_generated() const { return int64_t(tokens.size()) - num_prompt_tokens; }
    // Tokens not computed yet: the rest of the prompt, or the newest token.
    int64_t num_uncomputed() const { return int64_t(tokens.size()) - kv.num_computed_tokens; }
    // Whether its next step is a decode step: a running request's one newest
    // token. Anything else (a prompt chunk, a preempted request's recompute)
    // is prefill. The one definition the scheduler and the engine share.
    bool is_decoding() const { return num_generated() > 0 && num_uncomputed() == 1; }
};

}  // namespace servelab
