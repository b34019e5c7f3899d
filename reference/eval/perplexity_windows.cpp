// perplexity_windows.cpp — see perplexity_windows.h.
#include "reference/eval/perplexity_windows.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/error.h"

namespace servelab {

int64_t PerplexityWindowPlan::num_scored_total() const {
    int64_t total = 0;
    for (const PerplexityWindow& window : windows) total += window.num_scored;
    return total;
}

namespace {

void check_plan_inputs(int64_t num_text_tokens, int64_t context, int64_t stride,
                       int64_t max_windows) {
    // N = 2 would score N − N/2 − 1 = 0 predictions per window.
    if (context < 3) {
        throw Error(
            fmt::format("perplexity: --context {} is too short; it must be at least 3", context));
    }
    if (stride <= 0 || stride > context) {
        throw Error(fmt::format("perplexity: --stride {} must be between 1 and the context, {}",
                                stride, context));
    }
    if (max_windows < 0) {
        throw Error(fmt::format("perplexity: --chunks {} must be 0 (all) or more", max_windows));
    }
    if (num_text_tokens < context) {
        throw Error(fmt::format(
            "perplexity: the text has {} tokens; one window of --context {} needs at least {}",
            num_text_tokens, context, context));
    }
}

}  // namespace

PerplexityWindowPlan plan_perplexity_windows(int64_t num_text_tokens, int64_t context_tokens,
                                             int64_t stride_tokens, int64_t max_windows) {
    const int64_t stride = stride_tokens == 0 ? context_tokens : stride_tokens;
    check_plan_inputs(num_text_tokens, context_tokens, stride, max_windows);

    PerplexityWindowPlan plan;
    plan.context_tokens = context_tokens;
    plan.stride_tokens = stride;
    const bool halves = stride == context_tokens;  // llama-perplexity's default scheme
    const int64_t fitting = (num_text_tokens - context_tokens) / stride + 1;
    const int64_t count = max_windows > 0 ? std::min(fitting, max_windows) : fitting;
    const int64_t first_scored_row = halves ? context_tokens / 2 : context_tokens - stride - 1;
    const int64_t num_scored = context_tokens - 1 - first_scored_row;
    plan.windows.reserve(size_t(count));
    for (int64_t i = 0; i < count; ++i) {
        plan.windows.push_back({i * stride, first_scored_row, num_scored});
    }
    return plan;
}

}  // namespace servelab
