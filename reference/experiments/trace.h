// trace.h — request traces for experiments: lengths, not texts.
//
// Lab 4 (chapter 11.4). data/traces/*.jsonl hold one request per line, made
// by tools/goldens/make_traces.py (see data/traces/README.md):
//   {"id": 0, "prompt_tokens": 178, "output_tokens": 872}
// and, for prefix-sharing workloads, either "prefix_group" and
// "prefix_tokens" (the first prefix_tokens of requests in the same group are
// the same tokens) or, for richer sharing (Lab 11's multi-turn, few-shot and
// branching traces), "segments": [[segment_id, length], ...], the prompt as
// consecutive pieces whose ids are drawn from the segment id alone, so two
// prompts agree exactly as far as their segment lists do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

struct TraceRequest {
    int64_t id = 0;
    int64_t prompt_tokens = 0;
    int64_t output_tokens = 0;
    int64_t prefix_group = -1;  // -1: no shared prefix
    int64_t prefix_tokens = 0;
    struct Segment {
        int64_t id = 0;
        int64_t length = 0;
    };
    std::vector<Segment> segments;  // empty, or lengths summing to prompt_tokens

    // Cuts the prompt to its first `max_tokens` tokens (shared prefix and
    // segments with it); nothing changes for max_tokens <= 0.
    void truncate_prompt(int64_t max_tokens);
};

// Throws servelab::Error naming the file and line of anything malformed:
// bad JSON, missing or non-integer fields, lengths < 1, a prefix longer than
// the prompt, segments that are malformed or do not add up to the prompt,
// or an empty trace.
std::vector<TraceRequest> load_trace(const std::string& path);

// The prompt of a trace request as token ids in [0, vocab_size): random ids
// from seeds fixed by the request id and, for its shared prefix, by its
// prefix_group — so requests of one group share their first prefix_tokens
// ids and every run draws the same prompts. These measure the cache and the
// work, not the text (generate with ignore_eos to get output_tokens tokens).
// A nonzero `salt` draws a different set of prompts (same lengths, same
// sharing), so repeated runs against one server do not hit its prefix cache.
std::vector<TokenId> trace_prompt_ids(const TraceRequest& request, int64_t vocab_size,
                                      uint64_t salt = 0);

// The same prompt as text, for servers that take only text (llama.cpp's):
// one word per id, each " word" from a list of common English words that
// SmolLM2's tokenizer (GPT-2-style BPE, which splits text before each space)
// turns into exactly one token. So the text is prompt_tokens tokens long for
// that model and any sharing its vocabulary; other tokenizers may count
// differently.
std::string trace_prompt_text(const TraceRequest& request, uint64_t salt = 0);
// How many words trace_prompt_text draws from.
int64_t trace_prompt_vocabulary_size();

// Arrival times in seconds from the start: a Poisson process of `rate`
// requests/s (exponential gaps, seeded), or all 0 for rate <= 0 (every
// request at once).
std::vector<double> poisson_arrivals_s(int64_t count, double rate, uint64_t seed);

}  // namespace servelab
