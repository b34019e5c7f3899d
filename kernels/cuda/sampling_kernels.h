// sampling_kernels.h — turn rows of logits into token ids on the GPU: greedy, temperature, top-k,
// top-p, min-p.
//
// Part of the CUDA backend (issue 7; chapter: decoding strategies). The same
// pipeline as the CPU Sampler (reference/sampling/sampler.h):
//   grammar mask → repetition penalty → (temperature 0: argmax) → temperature → top-k
//   → softmax → top-p → min-p → renormalize → draw
// so only token ids travel back to the host, never vocab-sized rows. The
// random draw itself comes from the host: each request's own Sampler draws
// its uniform (Sampler::next_uniform), so a request's random stream still
// depends only on its seed. The kept set of tokens is the CPU's; the draw
// walks the kept tokens in vocabulary order (the CPU walks them most likely
// first), so for the same uniform the two may pick different tokens, from
// the same distribution. Greedy picks the smallest id among equal maxima, as
// the CPU does, so greedy outputs compare token for token.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::cuda {

// One token to draw. Several samples may read the same logits row (n
// completions of one prompt fork from the same logits); the logits are
// never modified.
struct DeviceSample {
    int32_t logits_row = 0;
    float temperature = 0.0f;         // 0 = greedy
    int32_t top_k = 0;                // 0 = off
    float top_p = 1.0f;               // 1 = off
    float min_p = 0.0f;               // 0 = off
    float repetition_penalty = 1.0f;  // 1 = off
    // The distinct token ids to penalize are penalty_tokens[penalty_begin,
    // penalty_end) (the host dedupes the request's recent window).
    int32_t penalty_begin = 0;
    int32_t penalty_end = 0;
    double uniform = 0.0;  // in [0, 1); ignored when greedy
    // Constrained decoding (Lab 12): the grammar's mask is the vocab bits
    // from 64-bit word mask_words[mask_offset] on (bit t of the mask: token t
    // allowed); every other token's logit is -infinity before anything else.
    // -1 = unconstrained.
    int64_t mask_offset = -1;
};

// Floats of scratch sample_tokens needs.
int64_t sampling_workspace_floats(int64_t num_samples, int64_t vocab_size);

// logits: (rows, vocab_size) fp32; samples, penalty_tokens, mask_words,
// out_tokens and workspace are device memory; out_tokens[i] is sample i's token.
void sample_tokens(const float* logits, const DeviceSample* samples, const int32_t* penalty_tokens,
                   const uint64_t* mask_words, int32_t* out_tokens, int64_t num_samples,
                   int64_t vocab_size, float* workspace, cudaStream_t stream);

}  // namespace servelab::cuda
