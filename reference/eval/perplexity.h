// perplexity.h — how surprised a model is by a text: exp of the mean next-token NLL over the scored
// windows.
//
// Part of Lab 10, weight quantization (chapter 11.7 GPTQ and AWQ; 11.8 what
// quantization costs). The text's tokens are cut into windows
// (perplexity_windows.h); each window runs through the model from position 0
// with nothing cached, and each scored row r adds the negative
// log-likelihood of the token that came next (log_softmax.h):
//
//   PPL = exp( (1/n) Σ_k nll_k )        over all n scored predictions
//
// A perfect model scores 1; a uniform guess over the vocabulary scores its
// size (49,152 for SmolLM2). Quantization raises it; how much is the
// chapter's question. Given a reference model (the unquantized one), every
// window also runs through it, and each scored prediction adds KL(P0 || P)
// and whether the two argmaxes agree (next_token_kl.h, kl_summary.h).
//
// BOS follows llama-perplexity, so that the numbers compare: when the model
// adds BOS (tokenizer.ggml.add_bos_token), the text's tokens start with it
// and token 0 of every window is replaced by it (the token there is context
// only, never scored); when it does not — SmolLM2 — windows start with the
// text's own token, nothing replaced.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "reference/engine/model_runner.h"
#include "reference/eval/kl_summary.h"
#include "reference/eval/perplexity_windows.h"
#include "reference/model/model.h"

namespace servelab {

// Running sums of per-prediction NLL, in nats.
struct NllSum {
    int64_t count = 0;
    double sum_nats = 0.0;
    double sum_squared_nats = 0.0;  // Σ nll², for the spread

    void add(double nll_nats);
    double mean_nats() const;  // 0 with nothing added
    double perplexity() const { return std::exp(mean_nats()); }
    // llama-perplexity's "± e": the standard error of exp(mean) by the delta
    // method, e = PPL · sd / √(n − 1), sd² = mean(nll²) − mean(nll)² (the
    // spread of the per-token NLL, treating tokens as independent, which
    // neighbouring tokens are not: read it as a lower bound on the noise).
    // 0 below two predictions.
    double perplexity_stderr() const;
};

struct PerplexityScores {
    NllSum nll;            // the model's
    NllSum reference_nll;  // the reference model's (empty without one)
    KlSummary kl;          // KL(P_reference || P_model) per prediction (empty without one)
};

// The text's tokens as llama-perplexity reads them: plain text (control-token
// text is not parsed), BOS first when the model adds one. Through the one
// front door (RequestBuilder::prompt_of), so the BOS rule lives in one place.
std::vector<TokenId> perplexity_text_tokens(const Model& model, std::string_view text);

// The token each window's token 0 is replaced by: BOS when the model adds
// BOS, else -1 (keep the text's token).
TokenId perplexity_window_bos(const Tokenizer& tokenizer);

// Window `window`'s tokens: text tokens [start, start + N), token 0 replaced
// by `window_bos` when that is ≥ 0.
std::vector<TokenId> window_tokens(std::span<const TokenId> text_tokens,
                                   const PerplexityWindow& window, int64_t context_tokens,
                                   TokenId window_bos);

// Called after each window: (windows done, windows in the plan).
using WindowDone = std::function<void(int64_t done, int64_t total)>;

// Runs every window of `plan` over `text_tokens` through `model` and, when
// `reference` is not null, through `reference` too (same tokens, same rows
// scored), and adds up the scores. Both runners must share one vocabulary.
// The sums are taken in window and row order whatever the thread count, so
// a run repeats to the bit.
PerplexityScores score_windows(ModelRunner& model, ModelRunner* reference,
                               std::span<const TokenId> text_tokens,
                               const PerplexityWindowPlan& plan, TokenId window_bos,
                               const WindowDone& on_window = {});

}  // namespace servelab
