// perplexity.cpp — see perplexity.h.
#include "reference/eval/perplexity.h"

#include <cmath>

#include "reference/engine/request_builder.h"
#include "reference/eval/log_softmax.h"
#include "reference/eval/next_token_kl.h"

namespace servelab {

void NllSum::add(double nll_nats) {
    ++count;
    sum_nats += nll_nats;
    sum_squared_nats += nll_nats * nll_nats;
}

double NllSum::mean_nats() const {
    return count > 0 ? sum_nats / double(count) : 0.0;
}

double NllSum::perplexity_stderr() const {
    if (count < 2) return 0.0;
    const double mean = mean_nats();
    const double variance = sum_squared_nats / double(count) - mean * mean;
    // Rounding can take a near-zero variance below 0.
    if (variance <= 0.0) return 0.0;
    return perplexity() * std::sqrt(variance / double(count - 1));
}

std::vector<TokenId> perplexity_text_tokens(const Model& model, std::string_view text) {
    RequestSpec spec;
    spec.kind = RequestSpec::PromptKind::kText;
    spec.text = std::string(text);
    return RequestBuilder(model).prompt_of(spec);
}

TokenId perplexity_window_bos(const Tokenizer& tokenizer) {
    return tokenizer.add_bos() ? tokenizer.bos_id() : TokenId(-1);
}

std::vector<TokenId> window_tokens(std::span<const TokenId> text_tokens,
                                   const PerplexityWindow& window, int64_t context_tokens,
                                   TokenId window_bos) {
    const auto first = text_tokens.begin() + window.start_token;
    std::vector<TokenId> tokens(first, first + context_tokens);
    if (window_bos >= 0) tokens[0] = window_bos;
    return tokens;
}

namespace {

// What one scored row contributes; computed in parallel, added in row order.
struct RowScore {
    double nll_nats = 0.0;
    double reference_nll_nats = 0.0;
    double kl_nats = 0.0;
    bool same_top1 = false;
};

}  // namespace

PerplexityScores score_windows(ModelRunner& model, ModelRunner* reference,
                               std::span<const TokenId> text_tokens,
                               const PerplexityWindowPlan& plan, TokenId window_bos,
                               const WindowDone& on_window) {
    PerplexityScores scores;
    const int64_t num_windows = int64_t(plan.windows.size());
    for (int64_t w = 0; w < num_windows; ++w) {
        const PerplexityWindow& window = plan.windows[size_t(w)];
        const std::vector<TokenId> tokens =
            window_tokens(text_tokens, window, plan.context_tokens, window_bos);
        // No cache: the window starts at position 0 and sees nothing of the
        // windows before it. Logits: (N, vocab), row r predicting token r + 1.
        const std::vector<float> logits = model.forward({tokens, 0, LogitsFor::kAllTokens});
        std::vector<float> reference_logits;
        if (reference != nullptr) {
            reference_logits = reference->forward({tokens, 0, LogitsFor::kAllTokens});
        }
        const size_t vocab = logits.size() / tokens.size();

        std::vector<RowScore> rows(size_t(window.num_scored));
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < window.num_scored; ++i) {
            const int64_t row = window.first_scored_row + i;
            // The token that came next: the text's own, never the replaced BOS
            // (row ≥ 0 predicts token row + 1 ≥ 1).
            const TokenId target = text_tokens[size_t(window.start_token + row + 1)];
            const std::span<const float> row_logits(logits.data() + size_t(row) * vocab, vocab);
            RowScore& score = rows[size_t(i)];
            score.nll_nats = token_nll(row_logits, target);
            if (reference != nullptr) {
                const std::span<const float> reference_row(
                    reference_logits.data() + size_t(row) * vocab, vocab);
                score.reference_nll_nats = token_nll(reference_row, target);
                score.kl_nats = kl_divergence(reference_row, row_logits);
                score.same_top1 = argmax(reference_row) == argmax(row_logits);
            }
        }
        for (const RowScore& score : rows) {
            scores.nll.add(score.nll_nats);
            if (reference != nullptr) {
                scores.reference_nll.add(score.reference_nll_nats);
                scores.kl.add(score.kl_nats, score.same_top1);
            }
        }
        if (on_window) on_window(w + 1, num_windows);
    }
    return scores;
}

}  // namespace servelab
