// trace.h — request traces for experiments: lengths, not texts.
//
// Lab 4 (chapter 11.4). data/traces/*.jsonl hold one request per line, made
// by tools/make_traces.py (see data/traces/README.md):
//   {"id": 0, "prompt_tokens": 178, "output_tokens": 872}
// and, for prefix-sharing workloads, "prefix_group" and "prefix_tokens": the
// first prefix_tokens of requests in the same group are the same tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

struct TraceRequest {
    int64_t id = 0;
    int64_t prompt_tokens = 0;
    int64_t output_tokens = 0;
    int64_t prefix_group = -1;  // -1: no shared prefix
    int64_t prefix_tokens = 0;
};

// Throws servelab::Error naming the file and line of anything malformed:
// bad JSON, missing or non-integer fields, lengths < 1, a prefix longer than
// the prompt, or an empty trace.
std::vector<TraceRequest> load_trace(const std::string& path);

}  // namespace servelab
