// cli_generator.cpp — see cli_generator.h.
#include "reference/cli/cli_generator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/common/error.h"
#include "reference/engine/runner_generate.h"
#include "reference/kv/kv_budget.h"
#include "reference/speculative/model_drafter.h"
#ifdef SERVELAB_HAVE_CUDA
#include "reference/device/cuda_model_runner.h"
#include "reference/device/cuda_weights.h"
#endif

namespace servelab::cli {

CliGenerator::CliGenerator(const CacheOptions& options, const Model& model, ModelRunner& runner,
                           const SchedulerConfig& scheduler, const SpeculationOptions& speculation,
                           bool announce)
    : options_(options),
      model_(model),
      announce_(announce),
      runner_(runner),
      speculation_(speculation) {
    if (runner.shard().num_ranks > 1 && options.on_gpu()) {
        throw servelab::Error("--tp: a split model runs on the CPU engine (drop --device cuda)");
    }
    if (runner.shard().num_ranks > 1 && speculation.enabled() && speculation.drafter != "ngram") {
        throw servelab::Error(
            "--tp: with a split model, speculation drafts with --drafter ngram only (a model "
            "drafter would need its own split)");
    }
    if (speculation.enabled() && options.on_gpu()) {
        throw servelab::Error(
            "--speculate: speculative decoding runs on the CPU engine only for now (drop "
            "--device cuda)");
    }
    if (speculation.enabled() && (options.disabled || !options.paged(model.config))) {
        throw servelab::Error(
            "--speculate needs the paged engine (drop --no-kv-cache and --kv-layout contiguous)");
    }
    if (options.on_gpu()) {
        start_on_gpu(scheduler);
        if (announce_) spdlog::info("KV cache: {}", describe());
        return;
    }
    if (!options.paged(model.config)) return;
    const int64_t budget = options.cpu_budget_bytes(model);
    const int64_t num_blocks =
        PagedKvCache::blocks_for_budget(model.config, options.block_size, budget);
    pool_ = std::make_unique<PagedKvCache>(model.config, num_blocks, options.block_size);
    manager_ = std::make_unique<KvBlockManager>(*pool_, options.prefix_cache_kind());
    engine_ = std::make_unique<Engine>(model, runner, *manager_, scheduler);
    if (announce_) spdlog::info("KV cache: {}", describe());
    if (speculation.enabled()) start_drafter();
}

void CliGenerator::start_drafter() {
    SpeculationOptions::LoadedDrafter loaded = speculation_.load_drafter(
        model_, pool_->num_blocks(), pool_->block_size(), announce_, runner_.options());
    if (!loaded.drafter) return;  // n-gram: the engine's own
    engine_->add_drafter(speculation_.drafter, *loaded.drafter);
    draft_model_ = std::move(loaded.draft_model);
    drafter_ = std::move(loaded.drafter);
}

void CliGenerator::start_on_gpu(const SchedulerConfig& scheduler) {
#ifdef SERVELAB_HAVE_CUDA
    if (options_.kv_dtype != "f32") {
        throw servelab::Error("--device cuda keeps keys and values in bf16: drop --kv-dtype");
    }
    const ModelConfig& config = model_.config;
    const GpuWeights weights_kind = parse_gpu_weights(options_.gpu_weights);
    // What the runner uploads: two bytes per element in bf16, the file's own
    // bytes for native Q4_0/Q4_1/Q8_0 projections.
    int64_t device_weight_bytes = 0;
    for (const GgufTensorInfo& tensor : model_.file.tensors()) {
        device_weight_bytes += cuda_tensor_bytes(tensor.type, tensor.num_elements(),
                                                 tensor.name == "token_embd.weight", weights_kind);
    }
    const int64_t budget = options_.checked_budget_bytes(cuda_device_memory_bytes(),
                                                         device_weight_bytes, "GPU memory");
    CudaRunnerOptions gpu;
    gpu.weights = weights_kind;
    gpu.block_size = options_.block_size;
    gpu.num_kv_blocks = cuda_kv_blocks_for_budget(config, gpu.block_size, budget);
    // Naive and contiguous decoding (runner_generate.h) need one request's
    // blocks at most: the whole context.
    const bool one_request = options_.disabled || options_.layout == "contiguous";
    if (one_request) {
        gpu.num_kv_blocks = (config.context_length + gpu.block_size - 1) / gpu.block_size;
    }
    gpu.max_tokens_per_step = std::max<int64_t>(scheduler.max_num_batched_tokens, 256);
    auto cuda_runner = std::make_unique<CudaModelRunner>(config, model_.weights, gpu);
    gpu_pool_bytes_ = cuda_runner->kv_pool_bytes();
    if (announce_)
        spdlog::info("GPU: {} of weights uploaded (--gpu-weights {})",
                     format_bytes(cuda_runner->weight_bytes()), gpu_weights_name(weights_kind));
    gpu_runner_ = std::move(cuda_runner);
    if (one_request) return;
    pool_ = std::make_unique<PagedKvCache>(config, gpu.num_kv_blocks, gpu.block_size,
                                           KvStorage::kDevice);
    manager_ = std::make_unique<KvBlockManager>(*pool_, options_.prefix_cache_kind());
    engine_ = std::make_unique<Engine>(model_, *gpu_runner_, *manager_, scheduler);
#else
    (void)scheduler;
    throw servelab::Error(
        "--device cuda: this build has no CUDA (nvcc was not found when it was configured)");
#endif
}

std::string CliGenerator::describe() const {
    if (options_.disabled && !gpu_runner_) return "none (naive decoding)";
    if (gpu_runner_ && !manager_) {
        return fmt::format("{} on the GPU, bf16",
                           options_.disabled ? "none (naive decoding)" : "contiguous");
    }
    if (gpu_runner_) {
        return fmt::format(
            "paged on the GPU, {} blocks of {} tokens = {} tokens in {} (bf16), prefix cache "
            "{}",
            pool_->num_blocks(), pool_->block_size(), pool_->num_blocks() * pool_->block_size(),
            format_bytes(gpu_pool_bytes_), prefix_cache_kind_name(manager_->prefix_cache_kind()));
    }
    if (!manager_) return fmt::format("contiguous ({})", options_.kv_dtype);
    return fmt::format("paged, {} blocks of {} tokens = {} tokens in {} (f32), prefix cache {}",
                       pool_->num_blocks(), pool_->block_size(),
                       pool_->num_blocks() * pool_->block_size(),
                       format_bytes(pool_->allocated_bytes()),
                       prefix_cache_kind_name(manager_->prefix_cache_kind()));
}

std::vector<GenerationResult> CliGenerator::generate(std::span<const TokenId> prompt,
                                                     const SamplingParams& params,
                                                     int num_completions,
                                                     const TokenCallback& on_token) {
    if (manager_) {
        SamplingParams own = params;
        speculation_.apply(own);
        return engine_->generate_parallel(prompt, own, num_completions, on_token);
    }
    // The grammar's mask and matcher live in the engine's step (Lab 12).
    if (params.grammar) {
        throw servelab::Error(
            "constrained output (--json-schema, --regex, --choice, --grammar) runs on the paged "
            "engine; drop --no-kv-cache and --kv-layout contiguous");
    }
    if (gpu_runner_) {  // naive or contiguous decoding on the GPU, one completion at a time
        std::vector<GenerationResult> results;
        for (int i = 0; i < num_completions; ++i) {
            results.push_back(generate_on_runner(
                *gpu_runner_, model_, prompt, completion_params(params, i),
                options_.disabled ? RunnerLayout::kNaive : RunnerLayout::kContiguous,
                options_.block_size, i == 0 ? on_token : TokenCallback{}));
        }
        return results;
    }
    if (num_completions < 1) {
        throw servelab::Error(
            fmt::format("generate: n = {} completions, need at least 1", num_completions));
    }
    std::vector<GenerationResult> results;
    for (int i = 0; i < num_completions; ++i) {
        const std::unique_ptr<KvCache> cache =
            options_.make(model_.config, int64_t(prompt.size()), params.max_tokens);
        results.push_back(servelab::generate(runner_, model_.config, model_.tokenizer, prompt,
                                             completion_params(params, i),
                                             i == 0 ? on_token : TokenCallback{}, cache.get()));
    }
    return results;
}

}  // namespace servelab::cli
