// cli_generator.cpp — see cli_generator.h.
#include "reference/cli/cli_generator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "reference/common/error.h"
#include "reference/kv/kv_budget.h"

namespace servelab::cli {

CliGenerator::CliGenerator(const CacheOptions& options, const Model& model, ModelRunner& runner,
                           const SchedulerConfig& scheduler)
    : options_(options), model_(model), runner_(runner) {
    if (!options.paged(model.config)) return;
    const int64_t budget = options.memory_budget_bytes();
    const int64_t num_blocks =
        PagedKvCache::blocks_for_budget(model.config, options.block_size, budget);
    pool_ = std::make_unique<PagedKvCache>(model.config, num_blocks, options.block_size);
    manager_ = std::make_unique<KvBlockManager>(*pool_, !options.no_prefix_caching);
    engine_ = std::make_unique<Engine>(model, runner, *manager_, scheduler);
    spdlog::info("KV cache: {}", describe());
}

std::string CliGenerator::describe() const {
    if (options_.disabled) return "none (naive decoding)";
    if (!manager_) return fmt::format("contiguous ({})", options_.kv_dtype);
    return fmt::format(
        "paged, {} blocks of {} tokens = {} tokens in {} (f32), prefix caching {}",
        pool_->num_blocks(), pool_->block_size(), pool_->num_blocks() * pool_->block_size(),
        format_bytes(pool_->allocated_bytes()), manager_->prefix_caching() ? "on" : "off");
}

std::vector<GenerationResult> CliGenerator::generate(std::span<const TokenId> prompt,
                                                     const SamplingParams& params,
                                                     int num_completions,
                                                     const TokenCallback& on_token) {
    if (manager_) {
        return engine_->generate_parallel(prompt, params, num_completions, on_token);
    }
    if (num_completions < 1) {
        throw servelab::Error(
            fmt::format("generate: n = {} completions, need at least 1", num_completions));
    }
    std::vector<GenerationResult> results;
    for (int i = 0; i < num_completions; ++i) {
        SamplingParams own = params;
        own.seed = params.seed + uint64_t(i);
        const std::unique_ptr<KvCache> cache =
            options_.make(model_.config, int64_t(prompt.size()), params.max_tokens);
        results.push_back(servelab::generate(runner_, model_.config, model_.tokenizer, prompt, own,
                                             i == 0 ? on_token : TokenCallback{}, cache.get()));
    }
    return results;
}

}  // namespace servelab::cli
