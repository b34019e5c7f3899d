// cmd_bench_throughput.cpp — `servelab bench throughput`: a trace through the batching engine.
//
// Part of the CLI (Lab 5, chapter 11.5). Replays a trace from data/traces/
// (replay_trace: arrivals all at once or Poisson, a concurrency limit) on
// the loaded model with continuous batching or the static baseline, then
// prints the serving figures (serving_metrics.h) as a table, or as JSON
// with --json; --output also writes the JSON, with every request and step,
// for the notebooks' timelines. A progress bar goes to stderr.
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include "kernels/common/error.h"
#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/machine_info.h"
#include "reference/experiments/trace_replay.h"

namespace servelab::cli {
namespace {

struct ThroughputBenchOptions {
    ModelOptions model;
    CacheOptions cache;
    SpeculationOptions speculation;
    TraceOptions trace{.path = "data/traces/sharegpt_like.jsonl", .limit = 64};
    ArrivalOptions arrivals;
    std::string batching = "continuous";
    SchedulerOptions scheduler;
    OutputOptions output;
    std::string output_path;  // --output: the JSON with every request and step
    bool no_progress = false;
};

// "[=====>    ] 12/64 requests  2345 tokens  123.4 tok/s  32 running  5 waiting"
class ProgressBar {
  public:
    explicit ProgressBar(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

    void update(const ReplayProgress& p) {
        if (!enabled_) return;
        // A terminal gets a redrawn line 4 times a second; a log file a line every 10 s.
        const double every_s = tty_ ? 0.25 : 10.0;
        const bool done = p.finished == p.total;
        if (!done && p.elapsed_s - last_s_ < every_s) return;
        last_s_ = p.elapsed_s;
        constexpr int kWidth = 30;
        const int filled = p.total > 0 ? int(kWidth * p.finished / p.total) : kWidth;
        std::string bar(size_t(filled), '=');
        if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
        std::fprintf(
            stderr,
            "%s[%s] %lld/%lld requests  %lld tokens  %.1f tok/s  %lld running  %lld waiting%s",
            tty_ ? "\r" : "", bar.c_str(), (long long)p.finished, (long long)p.total,
            (long long)p.output_tokens,
            p.elapsed_s > 0 ? double(p.output_tokens) / p.elapsed_s : 0.0, (long long)p.running,
            (long long)p.waiting, tty_ && !done ? "" : "\n");
        std::fflush(stderr);
    }

  private:
    bool enabled_;
    bool tty_;
    double last_s_ = -1e9;
};

nlohmann::json latency_json(const LatencySummary& s) {
    return {
        {"mean", s.mean}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99}, {"count", s.count}};
}

nlohmann::json summary_json(const ServingMetrics& m) {
    return {{"requests", m.num_requests},
            {"prompt_tokens", m.prompt_tokens},
            {"output_tokens", m.output_tokens},
            {"duration_s", m.duration_s},
            {"output_tokens_per_s", m.output_tokens_per_s},
            {"total_tokens_per_s", m.total_tokens_per_s},
            {"requests_per_s", m.requests_per_s},
            {"queue_ms", latency_json(m.queue_ms)},
            {"ttft_ms", latency_json(m.ttft_ms)},
            {"tpot_ms", latency_json(m.tpot_ms)},
            {"itl_ms", latency_json(m.itl_ms)},
            {"e2e_ms", latency_json(m.e2e_ms)},
            {"kv_utilization_mean", m.kv_utilization_mean},
            {"kv_utilization_peak", m.kv_utilization_peak},
            {"preemptions", m.preemptions},
            {"prefix_hit_rate", m.prefix_hit_rate},
            {"steps", m.num_steps},
            {"mean_batched_tokens", m.mean_batched_tokens},
            {"tokens_computed", m.tokens_computed}};
}

nlohmann::json requests_json(const std::vector<RequestRecord>& requests) {
    nlohmann::json all = nlohmann::json::array();
    for (const RequestRecord& r : requests) {
        const GenerationTimings& t = r.result.timings;
        all.push_back({{"id", r.trace_id},
                       {"arrival_s", r.arrival_s},
                       {"start_s", r.arrival_s + t.queue_ms / 1000.0},
                       {"first_token_s", r.arrival_s + t.first_step_ms / 1000.0},
                       {"finish_s", r.arrival_s + t.total_ms / 1000.0},
                       {"prompt_tokens", r.result.prompt_tokens.size()},
                       {"output_tokens", r.result.tokens.size()},
                       {"cached_prompt_tokens", r.result.cached_prompt_tokens},
                       {"preemptions", r.result.num_preemptions}});
    }
    return all;
}

nlohmann::json steps_json(const std::vector<StepRecord>& steps) {
    nlohmann::json all = nlohmann::json::array();
    for (const StepRecord& s : steps) {
        all.push_back({{"start_s", s.start_s},
                       {"duration_ms", s.duration_ms},
                       {"batched_tokens", s.num_batched_tokens},
                       {"prefill_tokens", s.num_prefill_tokens},
                       {"running", s.num_running},
                       {"waiting", s.num_waiting},
                       {"kv_blocks_used", s.num_kv_blocks_used},
                       {"preempted", s.num_preempted}});
    }
    return all;
}

void print_table(const nlohmann::json& config, const ServingMetrics& m) {
    std::printf("%s: %lld requests from %s, %s batching, %s, %s\n",
                config["model"].get<std::string>().c_str(), (long long)m.num_requests,
                config["trace"].get<std::string>().c_str(),
                config["batching"].get<std::string>().c_str(),
                config["arrivals"].get<std::string>().c_str(),
                config["concurrency"].get<std::string>().c_str());
    std::printf("%s, %d threads, %s\n\n", config["kv_cache"].get<std::string>().c_str(),
                config["threads"].get<int>(), config["date"].get<std::string>().c_str());
    std::printf("duration            %10.1f s   (%lld steps, %.1f tokens per step)\n", m.duration_s,
                (long long)m.num_steps, m.mean_batched_tokens);
    std::printf("output tokens/s     %10.1f     (%lld tokens)\n", m.output_tokens_per_s,
                (long long)m.output_tokens);
    std::printf("total tokens/s      %10.1f     (%lld prompt + output)\n", m.total_tokens_per_s,
                (long long)(m.prompt_tokens + m.output_tokens));
    std::printf("requests/s          %10.3f\n\n", m.requests_per_s);
    std::printf("%-22s %10s %10s %10s %10s\n", "latency (ms)", "mean", "median", "p90", "p99");
    const std::pair<const char*, const LatencySummary*> rows[] = {
        {"queue time", &m.queue_ms},
        {"time to first token", &m.ttft_ms},
        {"time per output token", &m.tpot_ms},
        {"inter-token latency", &m.itl_ms},
        {"end-to-end", &m.e2e_ms}};
    for (const auto& [name, s] : rows) {
        std::printf("%-22s %10.1f %10.1f %10.1f %10.1f\n", name, s->mean, s->median, s->p90,
                    s->p99);
    }
    std::printf("\nKV utilization      %9.1f%% mean, %.1f%% peak\n", 100 * m.kv_utilization_mean,
                100 * m.kv_utilization_peak);
    std::printf("preemptions         %10lld     (%lld tokens computed in all)\n",
                (long long)m.preemptions, (long long)m.tokens_computed);
    std::printf("prefix-cache hits   %9.1f%% of prompt tokens\n", 100 * m.prefix_hit_rate);
}

// What the run was: model, trace, engine and machine (the report's "config").
nlohmann::json throughput_config(const ThroughputBenchOptions& opts, const Model& model,
                                 size_t num_requests, const SchedulerConfig& scheduler,
                                 const CliGenerator& generator, int64_t num_blocks) {
    const ArrivalOptions& arrivals = opts.arrivals;
    return {
        {"model", model.config.name},
        {"trace", opts.trace.path},
        {"requests", num_requests},
        {"batching", opts.batching},
        {"policy", opts.scheduler.policy},
        {"prefix_cache", prefix_cache_kind_name(opts.cache.prefix_cache_kind())},
        {"arrivals", arrivals.request_rate > 0 ? fmt::format("Poisson {:g} requests/s (seed {})",
                                                             arrivals.request_rate, arrivals.seed)
                                               : std::string("all at once")},
        {"concurrency", arrivals.max_concurrency > 0
                            ? fmt::format("at most {} concurrent", arrivals.max_concurrency)
                            : std::string("no concurrency limit")},
        {"request_rate", arrivals.request_rate},
        {"max_concurrency", arrivals.max_concurrency},
        {"max_num_seqs", scheduler.max_num_seqs},
        {"max_num_batched_tokens", scheduler.max_num_batched_tokens},
        {"chunked_prefill", scheduler.chunked_prefill},
        {"long_prefill_tokens", scheduler.long_prefill_tokens},
        {"speculate", opts.speculation.num_tokens},
        {"drafter", opts.speculation.enabled() ? opts.speculation.drafter : "none"},
        {"kv_cache", "KV cache " + generator.describe()},
        {"num_kv_blocks", num_blocks},
        {"cpu", cpu_model_name()},
        {"threads", omp_get_max_threads()},
        {"date", utc_date()}};
}

ReplayResult replay_with_progress(const ThroughputBenchOptions& opts, Engine& engine,
                                  const std::vector<TraceRequest>& trace, int64_t vocab_size) {
    ProgressBar bar(!opts.no_progress);
    ReplayOptions replay;
    replay.request_rate = opts.arrivals.request_rate;
    replay.max_concurrency = opts.arrivals.max_concurrency;
    replay.seed = opts.arrivals.seed;
    replay.num_speculative_tokens = opts.speculation.num_tokens;
    replay.drafter = opts.speculation.enabled() ? opts.speculation.drafter : "";
    return replay_trace(engine, trace, vocab_size, replay,
                        [&bar](const ReplayProgress& p) { bar.update(p); });
}

// --output: the report with every request and step, for the notebooks' timelines.
void write_full_report(const std::string& path, nlohmann::json full, const ReplayResult& run) {
    full["requests"] = requests_json(run.requests);
    full["steps"] = steps_json(run.steps);
    std::ofstream file(path);
    if (!file) throw Error(fmt::format("--output {}: cannot write", path));
    file << full.dump(1) << "\n";
}

void run_bench_throughput(const ThroughputBenchOptions& opts) {
    const std::vector<TraceRequest> trace = opts.trace.load();
    Model model = opts.model.load();
    if (!opts.cache.paged(model.config)) {
        throw Error(
            "bench throughput runs on the paged KV cache: drop --kv-layout contiguous / "
            "--no-kv-cache / --kv-dtype");
    }
    ModelRunner runner(model.config, model.weights, opts.model.runner_options());
    SchedulerConfig scheduler = opts.scheduler.resolve();
    scheduler.static_batching = opts.batching == "static";
    CliGenerator generator(opts.cache, model, runner, scheduler, opts.speculation);
    Engine& engine = *generator.engine();
    const int64_t num_blocks = engine.kv().cache().num_blocks();
    const nlohmann::json config =
        throughput_config(opts, model, trace.size(), scheduler, generator, num_blocks);
    spdlog::info("replaying {} requests ({} batching)", trace.size(), opts.batching);
    const ReplayResult run = replay_with_progress(opts, engine, trace, model.config.vocab_size);
    const ServingMetrics metrics =
        summarize_run(run.requests, run.steps, run.duration_s, num_blocks);
    const nlohmann::json report = {{"config", config}, {"summary", summary_json(metrics)}};
    if (!opts.output_path.empty()) write_full_report(opts.output_path, report, run);
    if (opts.output.json) {
        print_json(report);
    } else {
        print_table(config, metrics);
    }
}

}  // namespace

void add_bench_throughput(CLI::App& bench) {
    auto opts = std::make_shared<ThroughputBenchOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "throughput", "replay a trace through the continuous-batching engine (Lab 5)");
    opts->model.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->speculation.add_to(*cmd);
    opts->trace.add_to(*cmd,
                       TraceOptions::kLimit | TraceOptions::kMaxOutput | TraceOptions::kMaxPrompt);
    opts->arrivals.add_to(*cmd);
    cmd->add_option("--batching", opts->batching,
                    "'continuous' (requests join and leave every step) or 'static' (a batch "
                    "starts together and ends together: the baseline)")
        ->check(CLI::IsMember({"continuous", "static"}))
        ->capture_default_str();
    opts->scheduler.add_to(*cmd, {"fcfs", "priority", "lpm"}, true);
    opts->output.add_to(*cmd, "print the summary as one JSON object");
    cmd->add_option("--output", opts->output_path,
                    "also write the JSON, with every request and step, to this file");
    cmd->add_flag("--no-progress", opts->no_progress, "no progress bar on stderr");
    cmd->callback([opts] { run_bench_throughput(*opts); });
}

}  // namespace servelab::cli
