// engine_grammar.cpp — what a constrained request does at each step: its mask before the runner
// samples, its matcher after.
//
// Part of the engine; Lab 12 (chapter 11.6, constrained decoding). A request
// whose SamplingParams carry a grammar owns a GrammarMatcher (engine_live.h).
// Before the step, the engine computes the mask of the tokens the grammar
// allows next and hands it to the runner with the sample (SampleRequest::
// allowed), so the Sampler never draws a token that leaves the language.
// After the step, every token the request accepts advances its matcher.
// The matcher lives with the request, not with its KV blocks, so preemption
// by recompute (which recomputes keys and values, never tokens) leaves it as
// it is; parallel sampling's siblings each start their own at the prompt.
#include <fmt/format.h>

#include <chrono>

#include "reference/engine/engine.h"
#include "reference/engine/engine_live.h"

namespace servelab {

namespace {

// Fills `mask` from `matcher`, timed into the step's output.
void fill_mask(const GrammarMatcher& matcher, TokenBitmask& mask, StepOutput& out) {
    const auto start = std::chrono::steady_clock::now();
    matcher.fill_next_token_bitmask(mask);
    const auto end = std::chrono::steady_clock::now();
    out.grammar_mask_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
}

}  // namespace

const TokenBitmask* Engine::next_token_mask(Live& live, StepOutput& out) {
    if (!live.grammar) return nullptr;
    live.masks.resize(1, TokenBitmask(model_.config.vocab_size));
    TokenBitmask& mask = live.masks[0];
    fill_mask(*live.grammar, mask, out);
    // A language whose next byte no token spells (a vocabulary without byte
    // tokens): the request may only end, rather than sample from nothing.
    if (mask.count() == 0) {
        for (TokenId end : live.grammar->compiled().vocabulary().end_tokens) mask.set(end);
    }
    return &mask;
}

std::span<const TokenBitmask> Engine::draft_masks(Live& live, std::span<const TokenId> drafts,
                                                  StepOutput& out) {
    if (!live.grammar) return {};
    live.masks.resize(drafts.size() + 1, TokenBitmask(model_.config.vocab_size));
    int32_t num_accepted = 0;
    for (size_t i = 0; i <= drafts.size(); ++i) {
        fill_mask(*live.grammar, live.masks[i], out);
        if (i == drafts.size()) break;
        if (!live.grammar->accept_token(drafts[i])) {
            throw Error(
                fmt::format("request {}: draft token {} breaks its grammar, but drafts "
                            "were cut to the grammar",
                            live.request->id, drafts[i]));
        }
        ++num_accepted;
    }
    live.grammar->rollback(num_accepted);
    return std::span(live.masks).first(drafts.size() + 1);
}

bool Engine::grammar_finished(Live& live, TokenId token) {
    if (!live.grammar) return false;
    if (!live.grammar->accept_token(token)) {
        // The mask held only end tokens (next_token_mask): the request ends.
        if (live.request->params.grammar->vocabulary().is_end_token(token)) return true;
        throw Error(
            fmt::format("request {}: the runner sampled token {}, which its grammar "
                        "forbids (the mask was not applied)",
                        live.request->id, token));
    }
    return live.grammar->is_terminated();
}

}  // namespace servelab
