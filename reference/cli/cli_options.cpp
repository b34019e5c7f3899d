// cli_options.cpp — see cli_options.h.
#include "reference/cli/cli_options.h"

#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>

#include "kernels/common/error.h"
#include "reference/kv/kv_budget.h"
#include "reference/speculative/model_drafter.h"

namespace servelab::cli {

void ModelOptions::add_to(CLI::App& command, bool with_model_flag) {
    if (with_model_flag) {
        command.add_option("-m,--model", path, "GGUF model file (llama architecture)")
            ->capture_default_str();
    }
    command.add_option("-t,--threads", threads, "CPU threads (0 = all cores)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    command
        .add_option("--cpu-kernels", cpu_kernels,
                    "quantized matmuls: 'fast' (int8 activations, as llama.cpp does; "
                    "faster) or 'exact' (fp32 activations, the numpy oracle's numbers)")
        ->check(CLI::IsMember({"exact", "fast"}))
        ->capture_default_str();
    // Each command passes it to the runners it builds (runner_options()).
    command.add_flag_callback(
        "--no-fused-kernels", [this] { fused_kernels = false; },
        "run the plain kernels instead of the fused ones (RMSNorm with quantization, "
        "residual add with RMSNorm, RoPE and SwiGLU in their matmuls; docs/kernel_fusion.md): "
        "the same numbers, for timing one against the other");
}

MatmulMode ModelOptions::matmul_mode() const {
    return cpu_kernels == "fast" ? MatmulMode::kFast : MatmulMode::kExact;
}

Model ModelOptions::load() const {
    // Far more threads than the machine has only time-slice each other: a
    // typo (10000 for 100) would start thousands and make no progress.
    const int hardware_threads = std::max(1, omp_get_num_procs());
    if (threads > kMaxThreadsPerHardwareThread * hardware_threads) {
        throw Error(fmt::format("--threads {} is more than {}x this machine's {} hardware threads",
                                threads, kMaxThreadsPerHardwareThread, hardware_threads));
    }
    if (threads > 0) omp_set_num_threads(threads);
    const auto start = std::chrono::steady_clock::now();
    Model model = Model::load(path);
    model.weights.set_matmul_mode(matmul_mode());
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("fused kernels: {}", describe(plan_fusions(fused_kernels)));
    spdlog::info("loaded {} ({} layers, dim {}, {} heads / {} kv heads, vocab {}) in {:.0f} ms",
                 model.config.name.empty() ? path : model.config.name, model.config.num_layers,
                 model.config.dim, model.config.num_heads, model.config.num_kv_heads,
                 model.config.vocab_size, load_ms);
    return model;
}

void SamplingOptions::add_to(CLI::App& command) {
    command.add_option("--max-tokens", params.max_tokens, "most tokens to generate")
        ->capture_default_str();
    command.add_option("--temperature", params.temperature, "0 = greedy")->capture_default_str();
    command.add_option("--top-k", params.top_k, "0 = off")->capture_default_str();
    command.add_option("--top-p", params.top_p, "1 = off")->capture_default_str();
    command.add_option("--min-p", params.min_p, "0 = off")->capture_default_str();
    command.add_option("--repetition-penalty", params.repetition_penalty, "1 = off")
        ->capture_default_str();
    command
        .add_option("--repetition-window", params.repetition_window,
                    "last tokens the penalty sees (0 = all)")
        ->capture_default_str();
    command
        .add_option("--presence-penalty", params.presence_penalty,
                    "subtracted from the logit of every token generated so far, [-2, 2]")
        ->capture_default_str();
    command
        .add_option("--frequency-penalty", params.frequency_penalty,
                    "subtracted once per time a token was generated so far, [-2, 2]")
        ->capture_default_str();
    command.add_option("--logit-bias", logit_bias,
                       "ID:BIAS,... added to those tokens' logits, each bias in [-100, 100]");
    command.add_option("--seed", params.seed, "random seed of this request")->capture_default_str();
    command.add_option("--stop", stop_strings, "stop string (repeatable)");
    command.add_flag("--ignore-eos", params.ignore_eos, "do not stop at end-of-generation tokens");
    command
        .add_option("--min-tokens", params.min_tokens,
                    "end-of-generation and stop tokens do not stop before this many tokens")
        ->capture_default_str();
}

SamplingParams SamplingOptions::resolve() const {
    SamplingParams resolved = params;
    resolved.stop_strings = stop_strings;
    if (!logit_bias.empty()) {
        size_t start = 0;
        while (start <= logit_bias.size()) {
            const size_t end = std::min(logit_bias.find(',', start), logit_bias.size());
            const std::string item = logit_bias.substr(start, end - start);
            const size_t colon = item.find(':');
            int32_t id = -1;
            float bias = 0.0f;
            const bool id_ok =
                colon != std::string::npos &&
                std::from_chars(item.data(), item.data() + colon, id).ptr == item.data() + colon;
            const bool bias_ok =
                id_ok && colon + 1 < item.size() &&
                std::from_chars(item.data() + colon + 1, item.data() + item.size(), bias).ptr ==
                    item.data() + item.size();
            if (!bias_ok) {
                throw Error(fmt::format("--logit-bias: '{}' is not ID:BIAS", item));
            }
            resolved.logit_bias.emplace_back(id, bias);
            start = end + 1;
        }
    }
    resolved.validate();
    return resolved;
}

void SpeculationOptions::add_to(CLI::App& command) {
    command
        .add_option("--speculate", num_tokens,
                    "speculative decoding: draft up to K tokens per step and verify them in one "
                    "pass of the model (Lab 6); 0 = off")
        ->check(CLI::Range(0, int(kMaxSpeculativeTokens)))
        ->capture_default_str();
    command
        .add_option("--drafter", drafter,
                    "who drafts: 'ngram' (prompt lookup, no model), 'early-exit' (the model's "
                    "first layers), 'draft-model' (--draft-model PATH)")
        ->check(CLI::IsMember({"ngram", "early-exit", "draft-model"}))
        ->capture_default_str();
    command
        .add_option("--early-exit-layers", early_exit_layers,
                    "early-exit drafter: layers run before the head (default: a quarter)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    command.add_option("--draft-model", draft_model_path,
                       "draft-model drafter: a GGUF sharing the model's vocabulary");
}

void SpeculationOptions::apply(SamplingParams& params) const {
    params.num_speculative_tokens = num_tokens;
    params.drafter = num_tokens > 0 ? drafter : "";
}

int64_t SpeculationOptions::exit_layer(int64_t num_layers) const {
    return early_exit_layers > 0 ? early_exit_layers : std::max<int64_t>(1, num_layers / 4);
}

SpeculationOptions::LoadedDrafter SpeculationOptions::load_drafter(
    const Model& target, int64_t num_kv_blocks, int64_t block_size, bool announce,
    const RunnerOptions& runner) const {
    LoadedDrafter loaded;
    if (drafter == "ngram") {
        if (announce)
            spdlog::info("speculative decoding: K = {}, n-gram prompt lookup", num_tokens);
        return loaded;  // the engine's own
    }
    if (drafter == "early-exit") {
        const int64_t layers = exit_layer(target.config.num_layers);
        loaded.drafter =
            ModelDrafter::early_exit(target, layers, num_kv_blocks, block_size, runner);
        if (announce) {
            spdlog::info("speculative decoding: K = {}, early exit after {} of {} layers",
                         num_tokens, layers, target.config.num_layers);
        }
        return loaded;
    }
    if (draft_model_path.empty()) throw Error("--drafter draft-model needs --draft-model PATH");
    loaded.draft_model = std::make_unique<Model>(Model::load(draft_model_path));
    loaded.drafter =
        ModelDrafter::draft_model(*loaded.draft_model, target, num_kv_blocks, block_size, runner);
    if (announce) {
        spdlog::info("speculative decoding: K = {}, draft model {} ({} layers)", num_tokens,
                     loaded.draft_model->config.name, loaded.draft_model->config.num_layers);
    }
    return loaded;
}

void CacheOptions::add_to(CLI::App& command) {
    command.add_flag("--no-kv-cache", disabled,
                     "recompute the whole sequence every step (naive decoding, Lab 1)");
    command
        .add_option("--kv-dtype", kv_dtype,
                    "KV cache element type: f32, f16, bf16, int8 or fp8 (Lab 3)")
        ->check(CLI::IsMember({"f32", "f16", "bf16", "int8", "fp8"}))
        ->capture_default_str();
    command
        .add_option("--mla-attention", mla_attention,
                    "MLA models: 'absorbed' (attend over the latents) or 'naive' (up-project "
                    "them first); both give the same result (Lab 3)")
        ->check(CLI::IsMember({"absorbed", "naive"}))
        ->capture_default_str();
    command
        .add_option("--kv-layout", layout,
                    "'paged' (blocks from a pool, Lab 4), 'contiguous' (one buffer per "
                    "sequence, Labs 2-3) or 'auto' (paged where the model and --kv-dtype allow)")
        ->check(CLI::IsMember({"auto", "paged", "contiguous"}))
        ->capture_default_str();
    command
        .add_option("--kv-memory", memory,
                    "paged KV pool size: bytes (512MiB, 2GB) or a fraction of physical memory "
                    "(0.1); pages are touched only as blocks fill")
        ->capture_default_str();
    command.add_option("--block-size", block_size, "tokens per KV block (paged)")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    command.add_flag("--no-prefix-caching", no_prefix_caching,
                     "paged: do not keep finished prompts' blocks for reuse");
    command
        .add_option("--prefix-cache", prefix_cache,
                    "paged: which prefix cache keeps them: 'hash' (blocks named by a hash "
                    "chain, LRU, Lab 4) or 'radix' (SGLang's radix tree, leaf-first LRU, Lab 11)")
        ->check(CLI::IsMember({"hash", "radix"}))
        ->capture_default_str();
    command
        .add_option("--device", device,
                    "where the engine runs: 'cpu', or 'cuda' (GPU 0: weights as --gpu-weights "
                    "says, the paged KV pool in GPU memory, --kv-memory fractions of GPU memory)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    command
        .add_option("--gpu-weights", gpu_weights,
                    "--device cuda: 'native' (Q4_0/Q4_1/Q8_0 projections stay quantized on the "
                    "GPU, read by a quantized GEMV up to 8 tokens) or 'bf16' (every weight "
                    "rounded to bf16, cuBLAS)")
        ->check(CLI::IsMember({"bf16", "native"}))
        ->capture_default_str();
}

PrefixCacheKind CacheOptions::prefix_cache_kind() const {
    return no_prefix_caching ? PrefixCacheKind::kNone : parse_prefix_cache_kind(prefix_cache);
}

bool CacheOptions::paged(const ModelConfig& config) const {
    if (disabled || layout == "contiguous") return false;
    const bool supported = !config.is_mla() && kv_dtype == "f32";
    if (layout == "paged" && !supported) {
        throw Error(
            fmt::format("--kv-layout paged: the paged cache holds f32 keys and values of "
                        "non-MLA models ({} with --kv-dtype {}: use --kv-layout "
                        "contiguous)",
                        config.is_mla() ? "an MLA model" : "this model", kv_dtype));
    }
    return supported;
}

int64_t CacheOptions::memory_budget_bytes(int64_t memory_bytes) const {
    double fraction = 0;
    const auto [end, ec] = std::from_chars(memory.data(), memory.data() + memory.size(), fraction);
    const bool is_fraction = ec == std::errc() && end == memory.data() + memory.size() &&
                             memory.find('.') != std::string::npos;
    if (!is_fraction) return parse_byte_size(memory);
    if (!(fraction > 0.0 && fraction <= 1.0)) {
        throw Error(fmt::format("--kv-memory {}: a fraction must be in (0, 1]", memory));
    }
    return int64_t(fraction * double(memory_bytes));
}

int64_t CacheOptions::checked_budget_bytes(int64_t memory_bytes, int64_t model_bytes,
                                           const std::string& memory_name) const {
    const int64_t budget_bytes = memory_budget_bytes(memory_bytes);
    check_kv_budget_fits(budget_bytes, memory_bytes, model_bytes, memory_name);
    return budget_bytes;
}

int64_t CacheOptions::cpu_budget_bytes(const Model& model) const {
    // The weights are read from the mapped file (or copied from it): its
    // size is what they take of physical memory.
    return checked_budget_bytes(physical_memory_bytes(), int64_t(model.file.file_size()),
                                "physical memory");
}

int64_t physical_memory_bytes() {
    return int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
}

MlaMode CacheOptions::mla_mode() const {
    return mla_attention == "naive" ? MlaMode::kNaive : MlaMode::kAbsorbed;
}

std::unique_ptr<KvCache> CacheOptions::make(const ModelConfig& config, int64_t prompt_tokens,
                                            int64_t max_tokens) const {
    if (disabled) return nullptr;
    const int64_t tokens = std::min(config.context_length, prompt_tokens + max_tokens);
    return std::make_unique<KvCache>(config, std::max<int64_t>(tokens, 1),
                                     parse_kv_dtype(kv_dtype));
}

void OutputOptions::add_to(CLI::App& command, const std::string& json_help) {
    command.add_flag("--json", json, json_help);
}

void print_json(const nlohmann::json& report) {
    std::printf("%s\n", report.dump(2).c_str());
}

void TraceOptions::add_to(CLI::App& command, unsigned cuts) {
    command
        .add_option("--trace", path, "JSONL trace of request lengths (see data/traces/README.md)")
        ->capture_default_str();
    if ((cuts & kLimit) != 0) {
        command.add_option("--limit", limit, "replay only the trace's first N requests (0 = all)")
            ->check(CLI::NonNegativeNumber)
            ->capture_default_str();
    }
    if ((cuts & kMaxOutput) != 0) {
        command
            .add_option("--max-output", max_output_tokens,
                        "cap each request's output tokens (0 = the trace's)")
            ->check(CLI::NonNegativeNumber)
            ->capture_default_str();
    }
    if ((cuts & kMaxPrompt) != 0) {
        command
            .add_option("--max-prompt", max_prompt_tokens,
                        "cap each request's prompt tokens (0 = the trace's; a shared prefix is "
                        "cut with it)")
            ->check(CLI::NonNegativeNumber)
            ->capture_default_str();
    }
}

std::vector<TraceRequest> TraceOptions::load() const {
    std::vector<TraceRequest> trace = load_trace(path);
    if (limit > 0 && limit < int64_t(trace.size())) trace.resize(size_t(limit));
    for (TraceRequest& r : trace) {
        if (max_output_tokens > 0) r.output_tokens = std::min(r.output_tokens, max_output_tokens);
        r.truncate_prompt(max_prompt_tokens);  // nothing for 0
    }
    return trace;
}

void ArrivalOptions::add_to(CLI::App& command) {
    command
        .add_option("--request-rate", request_rate,
                    "Poisson arrivals at this many requests/s (0 = all at once)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    command
        .add_option("--max-concurrency", max_concurrency,
                    "at most N requests in flight at once, like N clients (0 = no limit)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    command.add_option("--seed", seed, "seed of the arrival process")->capture_default_str();
}

void SchedulerOptions::add_to(CLI::App& command, const std::vector<std::string>& policies,
                              bool with_prefill_knobs) {
    std::string policy_help = "which waiting request goes next:";
    for (size_t i = 0; i < policies.size(); ++i) {
        const std::string& name = policies[i];
        policy_help += i == 0 ? " " : (i + 1 == policies.size() ? " or " : ", ");
        policy_help += "'" + name + "'";
        if (name == "priority") policy_help += " (the request's priority field)";
        if (name == "lpm")
            policy_help += " (longest cached prefix first, with a starvation bound: Lab 11)";
    }
    command.add_option("--policy", policy, policy_help)
        ->check(CLI::IsMember(policies))
        ->capture_default_str();
    command.add_option("--max-num-seqs", config.max_num_seqs, "requests running at once")
        ->check(CLI::Range(int64_t(1), int64_t(4096)))
        ->capture_default_str();
    command
        .add_option("--max-num-batched-tokens", config.max_num_batched_tokens,
                    "tokens computed per step (the token budget)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    if (!with_prefill_knobs) return;
    command.add_flag("--no-chunked-prefill", no_chunked_prefill,
                     "compute each prompt in one step: a prompt must fit one step's token "
                     "budget whole (the server refuses one that cannot)");
    command
        .add_option("--long-prefill-tokens", config.long_prefill_tokens,
                    "while others run or wait, a prompt computes at most this many tokens per "
                    "step (fair prefill; 0 = no cap)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
}

SchedulerConfig SchedulerOptions::resolve() const {
    SchedulerConfig resolved = config;
    resolved.policy = parse_scheduling_policy(policy);
    resolved.chunked_prefill = !no_chunked_prefill;
    return resolved;
}

void RepeatOptions::add_to(CLI::App& command, const std::string& help, int max_repeats) {
    command.add_option("--repeats", repeats, help)
        ->check(CLI::Range(1, max_repeats))
        ->capture_default_str();
}

std::vector<int32_t> parse_token_list(const std::string& text) {
    std::vector<int32_t> ids;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string::npos) end = text.size();
        const std::string item = text.substr(start, end - start);
        int32_t id = 0;
        const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
        if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
            throw Error(fmt::format("--tokens: '{}' is not a token id", item));
        }
        ids.push_back(id);
        start = end + 1;
    }
    return ids;
}

}  // namespace servelab::cli
