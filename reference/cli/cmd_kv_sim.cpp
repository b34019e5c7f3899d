// cmd_kv_sim.cpp — `servelab kv-sim`: the PagedAttention paper's memory-waste experiment.
//
// Part of the CLI (Lab 4). Replays a trace of request lengths through a KV
// budget under three policies (static-max, static-exact, paged; see
// reference/experiments/kv_memory_sim.h) and prints, for each, the share of
// reserved KV memory that holds no token and how many sequences ran at once.
// No model is loaded: a named config (servelab info --kv lists them) gives
// the bytes per token.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/experiments/kv_memory_sim.h"
#include "reference/kv/kv_budget.h"

namespace servelab::cli {
namespace {

ModelConfig find_named_config(const std::string& name) {
    std::string known;
    for (const NamedModelConfig& named : named_model_configs()) {
        if (named.name == name) return named.config;
        known += (known.empty() ? "" : ", ") + named.name;
    }
    throw Error(fmt::format("--config: no model config '{}' (known: {})", name, known));
}

nlohmann::json result_to_json(const MemorySimResult& r) {
    return {{"policy", r.policy},
            {"steps", r.steps},
            {"mean_running", r.mean_running},
            {"peak_running", r.peak_running},
            {"mean_used_tokens", r.mean_used_tokens},
            {"mean_reserved_tokens", r.mean_reserved_tokens},
            {"waste_fraction", r.waste_fraction},
            {"waste_future_fraction", r.waste_future_fraction},
            {"waste_never_fraction", r.waste_never_fraction},
            {"pool_used_fraction", r.pool_used_fraction},
            {"preemptions", r.preemptions}};
}

struct KvSimOptions {
    TraceOptions trace{.path = "data/traces/sharegpt_like.jsonl"};
    std::string config = "SmolLM2-135M";
    std::string kv_dtype = "f32";
    std::string memory = "1GiB";
    MemorySimOptions sim{.block_size = 16};
    OutputOptions output;
};

void print_kv_sim(const KvSimOptions& opts, size_t num_requests, int64_t budget_bytes,
                  const MemorySimOptions& sim, const std::vector<MemorySimResult>& results) {
    std::printf("%zu requests from %s; %s KV (%s) = %lld token slots of %s\n", num_requests,
                opts.trace.path.c_str(), format_bytes(budget_bytes).c_str(), opts.kv_dtype.c_str(),
                (long long)sim.capacity_tokens, opts.config.c_str());
    std::printf("%-13s %8s %8s %10s %10s %9s %8s %8s\n", "policy", "waste", "future", "never-used",
                "running", "peak", "steps", "preempt");
    for (const MemorySimResult& r : results) {
        std::printf("%-13s %7.1f%% %7.1f%% %9.1f%% %10.1f %9lld %8lld %8lld\n", r.policy.c_str(),
                    100 * r.waste_fraction, 100 * r.waste_future_fraction,
                    100 * r.waste_never_fraction, r.mean_running, (long long)r.peak_running,
                    (long long)r.steps, (long long)r.preemptions);
    }
    std::printf(
        "waste: reserved slots holding no token (time average), split into slots the "
        "sequence fills later (future) and never (never-used); running: mean "
        "sequences per step\n");
}

void run_kv_sim(const KvSimOptions& opts) {
    const ModelConfig config = find_named_config(opts.config);
    const int64_t budget = parse_byte_size(opts.memory);
    const int64_t bytes_per_token = kv_cache_bytes(config, 1, parse_kv_dtype(opts.kv_dtype));
    MemorySimOptions sim = opts.sim;
    sim.capacity_tokens = budget / bytes_per_token;
    if (sim.capacity_tokens < 1) {
        throw Error(fmt::format("--kv-memory {} holds no token of {} ({} bytes each)", opts.memory,
                                opts.config, bytes_per_token));
    }
    const std::vector<TraceRequest> trace = opts.trace.load();
    std::vector<MemorySimResult> results;
    for (ReservationPolicy policy : {ReservationPolicy::kStaticMax, ReservationPolicy::kStaticExact,
                                     ReservationPolicy::kPaged}) {
        results.push_back(simulate_kv_memory(trace, policy, sim));
    }
    if (!opts.output.json) {
        print_kv_sim(opts, trace.size(), budget, sim, results);
        return;
    }
    nlohmann::json report = {{"trace", opts.trace.path},
                             {"requests", trace.size()},
                             {"config", opts.config},
                             {"kv_dtype", opts.kv_dtype},
                             {"budget_bytes", budget},
                             {"bytes_per_token", bytes_per_token},
                             {"capacity_tokens", sim.capacity_tokens},
                             {"block_size", sim.block_size},
                             {"max_seq_len", sim.max_seq_len},
                             {"max_running", sim.max_running},
                             {"policies", nlohmann::json::array()}};
    for (const MemorySimResult& r : results) report["policies"].push_back(result_to_json(r));
    print_json(report);
}

}  // namespace

void add_kv_sim(CLI::App& app) {
    auto opts = std::make_shared<KvSimOptions>();
    CLI::App* cmd = app.add_subcommand(
        "kv-sim", "KV memory wasted by static reservation vs paging on a trace (Lab 4)");
    opts->trace.add_to(*cmd, TraceOptions::kNoCuts);
    cmd->add_option("--config", opts->config, "named model config (see `info --kv`)")
        ->capture_default_str();
    cmd->add_option("--kv-dtype", opts->kv_dtype, "KV element type: f32, f16, bf16, int8 or fp8")
        ->check(CLI::IsMember({"f32", "f16", "bf16", "int8", "fp8"}))
        ->capture_default_str();
    cmd->add_option("--kv-memory", opts->memory, "KV budget (512MiB, 16GiB, ...)")
        ->capture_default_str();
    cmd->add_option("--block-size", opts->sim.block_size, "tokens per block (paged)")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("--max-seq-len", opts->sim.max_seq_len, "static-max's reservation per request")
        ->check(CLI::Range(1, 1 << 24))
        ->capture_default_str();
    cmd->add_option("--max-running", opts->sim.max_running, "most sequences decoding at once")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_kv_sim(*opts); });
}

}  // namespace servelab::cli
