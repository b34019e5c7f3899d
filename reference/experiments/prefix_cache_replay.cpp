// prefix_cache_replay.cpp — see prefix_cache_replay.h.
#include "reference/experiments/prefix_cache_replay.h"

#include <chrono>
#include <memory>
#include <random>

#include "reference/kv/kv_block_manager.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/model/model_config.h"

namespace servelab {
namespace {

// The block manager needs a pool; one float per slot is enough, since
// nothing is ever computed into it.
ModelConfig one_float_config(int64_t context_length) {
    ModelConfig config;
    config.num_layers = 1;
    config.num_heads = 1;
    config.num_kv_heads = 1;
    config.head_dim = 1;
    config.dim = 1;
    config.context_length = context_length;
    return config;
}

}  // namespace

PrefixReplayResult replay_prefix_cache(const std::vector<TraceRequest>& trace,
                                       const PrefixReplayOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    PagedKvCache pool(one_float_config(options.context_length), options.num_blocks,
                      options.block_size);
    KvBlockManager kv(pool, options.prefix_cache);
    Scheduler scheduler(kv, options.scheduler, options.context_length);
    std::vector<std::unique_ptr<Request>> requests;
    std::vector<std::mt19937_64> output_ids;
    PrefixReplayResult result;
    for (const TraceRequest& r : trace) {
        SamplingParams params;
        params.max_tokens = int32_t(r.output_tokens);
        requests.push_back(std::make_unique<Request>(int64_t(requests.size()),
                                                     trace_prompt_ids(r, options.vocab_size),
                                                     params, 0, options.block_size));
        output_ids.emplace_back(uint64_t(r.id) * 7919 + 1);
        scheduler.add(*requests.back());
        result.prompt_tokens += r.prompt_tokens;
    }
    int64_t finished = 0;
    while (finished < int64_t(requests.size())) {
        const SchedulerOutput out = scheduler.schedule();
        if (out.chunks.empty()) break;  // cannot happen: add() refused what never fits
        ++result.steps;
        result.preemptions += int64_t(out.preempted.size());
        for (const ScheduledChunk& chunk : out.chunks) {
            Request& request = *chunk.request;
            // Admitted for the first time this step (nothing computed yet but
            // its hits): count them, as the engine reports a request's hits.
            // (Hits after a preemption show in tokens_computed instead.)
            const bool first_admission =
                request.num_preemptions == 0 &&
                request.kv.num_computed_tokens == request.kv.num_cached_prompt_tokens;
            if (first_admission) {
                result.cached_prompt_tokens += request.kv.num_cached_prompt_tokens;
            }
            result.tokens_computed += chunk.num_tokens;
            kv.commit(request.kv, request.tokens);
            if (request.num_uncomputed() > 0) continue;
            std::uniform_int_distribution<TokenId> id(0, TokenId(options.vocab_size - 1));
            request.tokens.push_back(id(output_ids[size_t(request.id)]));
            if (request.num_generated() < request.params.max_tokens) continue;
            scheduler.finish(request);
            ++finished;
            const RadixCache* radix = dynamic_cast<const RadixCache*>(kv.prefix_cache());
            if (radix && finished == options.snapshot_after) result.snapshot = radix->nodes();
        }
    }
    result.requests = finished;
    result.cached_blocks = kv.prefix_cache() ? kv.prefix_cache()->num_cached_blocks() : 0;
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

}  // namespace servelab
