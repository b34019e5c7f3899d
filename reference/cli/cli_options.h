// cli_options.h — flag groups shared by several servelab subcommands.
//
// Part of the CLI (all labs). Each subcommand file (cmd_*.cpp) registers its
// own flags in add_<cmd>; a flag used by more than one command lives here,
// in a group registered once (add_to), so it is spelled, checked and
// documented once. Where commands differ only in a default (a trace's path,
// --repeats), the command sets the field before add_to shows it.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "reference/engine/model_runner.h"
#include "reference/experiments/trace.h"
#include "reference/kv/kv_cache.h"
#include "reference/kv/prefix_index.h"
#include "reference/model/model.h"
#include "reference/sampling/sampling_params.h"
#include "reference/scheduler/scheduler.h"
#include "reference/speculative/drafter.h"

namespace servelab::cli {

inline constexpr const char* kDefaultModelPath = "data/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// --threads above this multiple of the hardware threads is refused.
inline constexpr int kMaxThreadsPerHardwareThread = 4;

struct ModelOptions {
    std::string path = kDefaultModelPath;
    int threads = 0;  // 0 = OpenMP's default (all cores)
    // MatmulMode: "fast" (every command's default: int8 activations, the
    // repacked kernels) or "exact" (fp32 activations, the oracle's numbers).
    // docs/perf.md has the figures that chose the default.
    std::string cpu_kernels = "fast";
    // false with --no-fused-kernels: runners use the plain kernels only
    // (reference/engine/fusion_plan.h, docs/kernel_fusion.md).
    bool fused_kernels = true;

    MatmulMode matmul_mode() const;
    // How the command's runners are built: pass this to every one.
    RunnerOptions runner_options(MlaMode mla_mode = MlaMode::kAbsorbed) const {
        return {.mla_mode = mla_mode, .fused_kernels = fused_kernels};
    }

    // `with_model_flag` false leaves -m/--model to the command (serve takes
    // several).
    void add_to(CLI::App& command, bool with_model_flag = true);
    // Applies --threads, loads the model and logs what was loaded.
    Model load() const;
};

struct SamplingOptions {
    SamplingParams params;
    std::vector<std::string> stop_strings;
    std::string logit_bias;  // "ID:BIAS,ID:BIAS"

    void add_to(CLI::App& command);
    SamplingParams resolve() const;  // validated; throws servelab::Error
};

// The KV cache flags, shared by generate, chat and bench: --no-kv-cache,
// --kv-dtype, --mla-attention (Labs 1-3) and the paged cache's --kv-layout,
// --kv-memory, --block-size, --no-prefix-caching (Lab 4), --prefix-cache (Lab 11).
// Physical memory of this machine (sysconf), for --kv-memory fractions.
int64_t physical_memory_bytes();

struct CacheOptions {
    bool disabled = false;
    std::string kv_dtype = "f32";
    std::string mla_attention = "absorbed";
    std::string layout = "auto";
    std::string memory = "0.1";
    int64_t block_size = 16;
    bool no_prefix_caching = false;
    std::string prefix_cache = "hash";  // hash (Lab 4) or radix (Lab 11)
    std::string device = "cpu";         // "cuda": the paged engine on GPU 0 (issue 7)
    // --device cuda: "native" keeps Q4_0/Q4_1/Q8_0 projections as blocks on
    // the GPU, "bf16" rounds every weight to bf16 (reference/device/cuda_weights.h).
    std::string gpu_weights = "native";

    void add_to(CLI::App& command);
    // Whether to decode with the paged cache: --kv-layout paged, or auto where
    // the paged cache supports the model (not MLA) and dtype (f32). Throws
    // servelab::Error for --kv-layout paged where it does not.
    bool paged(const ModelConfig& config) const;
    // --prefix-cache, or kNone with --no-prefix-caching.
    PrefixCacheKind prefix_cache_kind() const;
    // The paged pool's budget: --kv-memory as a size (512MiB, 2GB) or as a
    // fraction in (0, 1] of `memory_bytes` (this machine's physical memory,
    // or the GPU's for --device cuda).
    int64_t memory_budget_bytes(int64_t memory_bytes) const;
    // memory_budget_bytes(memory_bytes), refused at start with a one-line
    // error unless it fits beside the model's `model_bytes` of weights
    // (check_kv_budget_fits): every command sizes its pool through this.
    int64_t checked_budget_bytes(int64_t memory_bytes, int64_t model_bytes,
                                 const std::string& memory_name) const;
    // This machine's physical memory, less the mapped model file.
    int64_t cpu_budget_bytes(const Model& model) const;
    bool on_gpu() const { return device == "cuda"; }
    // A cache for prompt + max_tokens tokens (capped at the context length),
    // or nullptr with --no-kv-cache (naive decoding, Lab 1).
    std::unique_ptr<KvCache> make(const ModelConfig& config, int64_t prompt_tokens,
                                  int64_t max_tokens) const;
    MlaMode mla_mode() const;
};

// Speculative decoding (Lab 6), for generate, chat, bench and bench
// throughput: --speculate K, --drafter, --early-exit-layers, --draft-model.
struct SpeculationOptions {
    int32_t num_tokens = 0;         // K drafted tokens per step; 0 = off
    std::string drafter = "ngram";  // "ngram", "early-exit" or "draft-model"
    int64_t early_exit_layers = 0;  // 0: a quarter of the target's layers
    std::string draft_model_path;

    void add_to(CLI::App& command);
    bool enabled() const { return num_tokens > 0; }
    // Sets the request's K and drafter.
    void apply(SamplingParams& params) const;
    // The early-exit depth for a target of `num_layers` layers.
    int64_t exit_layer(int64_t num_layers) const;
    // The model drafter --drafter names for `target` over a pool of
    // `num_kv_blocks` blocks of `block_size` (nullptr for "ngram", the
    // engine's own), loading --draft-model when asked; announces it.
    struct LoadedDrafter {
        std::unique_ptr<Model> draft_model;  // --drafter draft-model only
        std::unique_ptr<Drafter> drafter;    // must outlive the engine that uses it
    };
    // `runner`: how to build the drafter's runner (the target runner's options).
    LoadedDrafter load_drafter(const Model& target, int64_t num_kv_blocks, int64_t block_size,
                               bool announce, const RunnerOptions& runner) const;
};

// --json: one JSON object on stdout instead of the text or table (every
// command that reports figures). `json_help` says what the object holds.
struct OutputOptions {
    bool json = false;

    void add_to(CLI::App& command, const std::string& json_help = "print one JSON object");
};

// The JSON report on stdout, two-space indented, one object per command run.
void print_json(const nlohmann::json& report);

// A trace of request lengths (data/traces/README.md) and the flags that cut
// it: --trace, --limit, --max-prompt, --max-output (bench throughput, bench
// serve, bench prefix-cache, replay, kv-sim).
struct TraceOptions {
    std::string path;               // JSONL; each command sets its default
    int64_t limit = 0;              // the first N requests; 0 = all
    int64_t max_prompt_tokens = 0;  // each prompt cut to this; 0 = the trace's
    int64_t max_output_tokens = 0;  // each output capped at this; 0 = the trace's

    // Which of the cutting flags a command offers besides --trace.
    enum Cuts : unsigned { kNoCuts = 0, kLimit = 1, kMaxOutput = 2, kMaxPrompt = 4 };
    void add_to(CLI::App& command, unsigned cuts);
    // The trace with the cuts applied; throws servelab::Error (load_trace).
    std::vector<TraceRequest> load() const;
};

// When a replayed trace's requests arrive: --request-rate, --max-concurrency
// and the arrival process's --seed (bench throughput, bench serve).
struct ArrivalOptions {
    double request_rate = 0;      // Poisson arrivals per second; 0 = all at once
    int64_t max_concurrency = 0;  // requests in flight at most; 0 = no limit
    uint64_t seed = 0;            // of the arrival times

    void add_to(CLI::App& command);
};

// The scheduler's knobs (Labs 5 and 11): --policy, --max-num-seqs,
// --max-num-batched-tokens, and with `with_prefill_knobs` --no-chunked-prefill
// and --long-prefill-tokens (serve, bench throughput, bench prefix-cache).
// The defaults are SchedulerConfig's, so a bench measures what a server does.
struct SchedulerOptions {
    SchedulerConfig config;  // the numeric knobs land here
    std::string policy = "fcfs";
    bool no_chunked_prefill = false;

    // `policies`: the --policy values the command accepts.
    void add_to(CLI::App& command, const std::vector<std::string>& policies,
                bool with_prefill_knobs);
    // config with --policy and --no-chunked-prefill applied.
    SchedulerConfig resolve() const;
};

// --repeats: how many times a benchmark measures (the median is reported).
// Each command sets its default before add_to; `max_repeats` bounds it.
struct RepeatOptions {
    int repeats = 1;

    void add_to(CLI::App& command, const std::string& help, int max_repeats);
};

// "1,2,3" → {1, 2, 3}; throws servelab::Error naming the bad item.
std::vector<int32_t> parse_token_list(const std::string& text);

}  // namespace servelab::cli
