// perplexity_windows.h — which windows of a text the model sees, and which of their predictions
// count.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ and AWQ; 11.8, what
// quantization costs). A model with a context of N tokens cannot read a whole
// book at once, so the text's tokens are cut into windows of N tokens, each
// run from position 0 with nothing cached, and only some of each window's
// predictions are scored (row r of a window's logits predicts its token r + 1):
//
//   stride S = N (the default): llama-perplexity's scheme, so that the numbers
//     compare with llama.cpp's. Windows do not overlap: window i is tokens
//     [i·N, i·N + N), and rows N/2 .. N−2 are scored, predicting tokens
//     N/2 + 1 .. N−1 of the window. Every scored prediction has at least N/2
//     tokens of context; the first half of each window is context only.
//     Windows: ⌊T / N⌋ for T tokens; scored per window: N − N/2 − 1.
//
//   stride S < N: overlapping windows, llama-perplexity's --ppl-stride scheme.
//     Window i is tokens [i·S, i·S + N) and scores its last S predictions,
//     rows N−S−1 .. N−2, predicting its tokens N−S .. N−1: the S tokens the
//     previous window did not reach. So no token is scored twice, and each
//     has at least N − S tokens of context. Windows: ⌊(T − N) / S⌋ + 1 (every
//     window that fits; llama.cpp's count leaves out the last one when
//     (T − N) is a multiple of S).
//
// Smaller S means more context per scored token and more compute per scored
// token (N / S passes over each token instead of 2).
#pragma once

#include <cstdint>
#include <vector>

namespace servelab {

struct PerplexityWindow {
    int64_t start_token = 0;       // index in the text's tokens of the window's token 0
    int64_t first_scored_row = 0;  // row r predicts text token start_token + r + 1
    int64_t num_scored = 0;        // rows first_scored_row .. first_scored_row + num_scored − 1
};

struct PerplexityWindowPlan {
    int64_t context_tokens = 0;  // N, every window's length
    int64_t stride_tokens = 0;   // S, the distance between window starts
    std::vector<PerplexityWindow> windows;

    int64_t num_scored_total() const;
};

// The windows over a text of `num_text_tokens` tokens, at most `max_windows`
// of them (0: all that fit). `stride_tokens` 0 means N. Throws
// servelab::Error, saying what is needed, when the context is below 3 (no
// prediction would be scored), the stride is not in 1..N, or the text is
// shorter than one window.
PerplexityWindowPlan plan_perplexity_windows(int64_t num_text_tokens, int64_t context_tokens,
                                             int64_t stride_tokens, int64_t max_windows = 0);

}  // namespace servelab
