// cmd_serve.cpp — `servelab serve`: the OpenAI-compatible server (chapter 11.7).
//
// Loads the model (or several: --model a.gguf --model b.gguf, each with its
// own engine and KV pool, the --kv-memory budget split between them as
// --kv-share says and shown at start), serves HTTP
// (reference/server/http_server.h, its connections managed by
// http_listener.h) and runs the continuous-batching engine loops
// (reference/server/engine_loop.h) on the main thread, the one that already
// ran the models' OpenMP work (engine_loop.h says why that matters), one
// step of each model with work in turn. Binds 127.0.0.1:8000 by default.
// SIGTERM, SIGINT (Ctrl-C) or SIGHUP (the terminal closed) shuts down
// gracefully: new requests get 503, admitted ones finish and are answered,
// and whatever still runs after --drain-timeout is cancelled and answered;
// then the process exits 0. A second signal exits at once.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/shutdown_signals.h"
#include "reference/common/memory_release.h"
#include "reference/engine/engine.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/kv/kv_budget.h"
#include "reference/server/engine_loop.h"
#include "reference/server/http_server.h"

namespace servelab::cli {
namespace {

struct ServeOptions {
    ModelOptions model;  // threads and kernels; the paths are below
    std::vector<std::string> model_paths{kDefaultModelPath};
    std::vector<std::string> served_model_names;
    std::vector<double> kv_shares;  // empty: the same number of tokens for each model
    int64_t max_model_len = 0;      // the longest request; 0: each model's context
    CacheOptions cache;
    SpeculationOptions speculation;
    ServerOptions server;
    SchedulerOptions scheduler;
    int64_t max_waiting = 256;
    double header_timeout_s = 5;
    double body_timeout_s = 30;
    double drain_timeout_s = 30;
    std::string special_tokens = "parse";

    // The server's options with the seconds and names above resolved.
    ServerOptions resolved_server() const {
        const auto ms = [](double seconds) {
            return std::chrono::milliseconds(int64_t(seconds * 1000.0));
        };
        ServerOptions resolved = server;
        resolved.header_timeout = ms(header_timeout_s);
        resolved.body_timeout = ms(body_timeout_s);
        resolved.drain_timeout = ms(drain_timeout_s);
        resolved.requests.special_tokens = special_tokens == "text"
                                               ? SpecialTokensInMessages::kText
                                               : SpecialTokensInMessages::kParse;
        resolved.requests.num_speculative_tokens = speculation.num_tokens;
        resolved.requests.drafter = speculation.drafter;
        resolved.requests.max_model_len = max_model_len;
        return resolved;
    }
};

// Model i's name for /v1/models: the i-th --served-model-name, else the file's stem.
std::string served_name(const ServeOptions& opts, size_t i) {
    if (i < opts.served_model_names.size()) return opts.served_model_names[i];
    return std::filesystem::path(opts.model_paths[i]).stem().string();
}

// One served model and everything that runs it, in construction order (the
// drafter before the engine, which uses it, and so is destroyed after it).
struct ServedEngine {
    std::string name;
    Model model;
    int64_t kv_budget_bytes = 0;
    std::unique_ptr<PagedKvCache> pool{};
    std::unique_ptr<KvBlockManager> kv{};
    std::unique_ptr<ModelRunner> runner{};
    SpeculationOptions::LoadedDrafter drafter{};
    std::unique_ptr<Engine> engine{};
    std::unique_ptr<EngineLoop> loop{};
};

// Each model's share of the KV budget. The default gives every model the
// same number of tokens: a small model's tokens cost fewer bytes, so it gets
// fewer bytes. --kv-share W1,W2,… splits the bytes by those weights instead.
std::vector<int64_t> split_kv_budget(const ServeOptions& opts, int64_t budget_bytes,
                                     const std::vector<std::unique_ptr<ServedEngine>>& served) {
    std::vector<double> weights;
    for (size_t i = 0; i < served.size(); ++i) {
        weights.push_back(
            opts.kv_shares.empty()
                ? double(PagedKvCache::block_bytes(served[i]->model.config, opts.cache.block_size))
                : opts.kv_shares[i]);
    }
    // Relative to the largest, so that the sum cannot overflow (1e308 twice).
    const double largest = *std::max_element(weights.begin(), weights.end());
    double total_weight = 0;
    for (double& w : weights) total_weight += (w /= largest);
    std::vector<int64_t> budgets;
    for (const double w : weights)
        budgets.push_back(int64_t(double(budget_bytes) * w / total_weight));
    return budgets;
}

void check_model_options(const ServeOptions& opts) {
    if (opts.served_model_names.size() > opts.model_paths.size()) {
        throw Error(fmt::format("serve: {} --served-model-name for {} --model",
                                opts.served_model_names.size(), opts.model_paths.size()));
    }
    if (!opts.kv_shares.empty() && opts.kv_shares.size() != opts.model_paths.size()) {
        throw Error(fmt::format("serve: --kv-share gives {} weights for {} models",
                                opts.kv_shares.size(), opts.model_paths.size()));
    }
    for (size_t i = 0; i < opts.model_paths.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
            if (served_name(opts, i) == served_name(opts, j)) {
                throw Error(fmt::format(
                    "serve: two models are named '{}' (give each its own --served-model-name)",
                    served_name(opts, i)));
            }
        }
    }
    for (const double share : opts.kv_shares) {
        if (!std::isfinite(share) || !(share > 0)) {
            throw Error(
                fmt::format("serve: --kv-share weight {} is not a finite number above 0", share));
        }
    }
    if (opts.model_paths.size() > 1 && opts.speculation.enabled() &&
        opts.speculation.drafter == "draft-model") {
        throw Error(
            "serve: --drafter draft-model drafts for one target: serve one model with it, or use "
            "the ngram or early-exit drafter");
    }
}

// --max-model-len caps each model's context; one above all of them would
// cap nothing, and a flag that does nothing is an error, not a silence.
void check_max_model_len(const ServeOptions& opts,
                         const std::vector<std::unique_ptr<ServedEngine>>& served) {
    int64_t longest_context = 0;
    for (const auto& s : served)
        longest_context = std::max(longest_context, s->model.config.context_length);
    if (opts.max_model_len > longest_context) {
        throw Error(fmt::format("serve: --max-model-len {}: more than the {} context of {} tokens",
                                opts.max_model_len, served.size() > 1 ? "longest" : "model's",
                                longest_context));
    }
}

// A pool that cannot hold one request of the engine's longest length would
// refuse such a request whenever it came: refuse to start instead, naming
// the flags that fix it (vLLM checks its max_model_len the same way).
void check_pool_holds_a_request(const ServedEngine& s, const ServeOptions& opts, int64_t num_blocks,
                                int64_t longest_tokens, bool several_models) {
    const int64_t block_size = opts.cache.block_size;
    const int64_t needed_blocks = (longest_tokens + block_size - 1) / block_size;
    if (num_blocks >= needed_blocks) return;
    const int64_t needed_bytes =
        needed_blocks * PagedKvCache::block_bytes(s.model.config, block_size);
    const int64_t pool_tokens = num_blocks * block_size;
    const std::string raise =
        several_models ? std::string("raise --kv-memory or its --kv-share")
                       : fmt::format("raise --kv-memory to {} or more", format_bytes(needed_bytes));
    const std::string lower =
        pool_tokens >= 2 ? fmt::format(", or lower --max-model-len to {} or less", pool_tokens)
                         : "";
    throw Error(fmt::format(
        "serve: '{}' gets a KV pool of {} = {} blocks of {} tokens ({} tokens), less than one "
        "request of {} tokens ({}; {} blocks, {}): {}{}",
        s.name, format_bytes(s.kv_budget_bytes), num_blocks, block_size, pool_tokens,
        longest_tokens,
        longest_tokens < s.model.config.context_length ? "--max-model-len" : "the model's context",
        needed_blocks, format_bytes(needed_bytes), raise, lower));
}

// Builds model `index`'s pool, engine, drafter and loop from its KV budget.
void build_engine(ServedEngine& s, size_t index, size_t num_models, const ServeOptions& opts,
                  const SchedulerConfig& scheduler, const std::shared_ptr<LoopSignal>& signal) {
    const Model& model = s.model;
    const int64_t longest_tokens = capped_context_length(model.config, opts.max_model_len);
    // Whole blocks only: a budget below one block buys none (the check
    // below refuses it), not the one block blocks_for_budget rounds up to.
    const int64_t num_blocks =
        s.kv_budget_bytes / PagedKvCache::block_bytes(model.config, opts.cache.block_size);
    if (num_models > 1) {
        spdlog::info(
            "  '{}': weights {}, KV {} = {} blocks of {} tokens ({} tokens), requests up to {} "
            "tokens",
            s.name, format_bytes(int64_t(model.file.file_size())), format_bytes(s.kv_budget_bytes),
            num_blocks, opts.cache.block_size, num_blocks * opts.cache.block_size, longest_tokens);
    }
    check_pool_holds_a_request(s, opts, num_blocks, longest_tokens, num_models > 1);
    s.pool = std::make_unique<PagedKvCache>(model.config, num_blocks, opts.cache.block_size);
    s.kv = std::make_unique<KvBlockManager>(*s.pool, opts.cache.prefix_cache_kind());
    s.runner = std::make_unique<ModelRunner>(model.config, model.weights,
                                             opts.model.runner_options(opts.cache.mla_mode()));
    if (!scheduler.chunked_prefill && scheduler.max_num_batched_tokens < longest_tokens) {
        spdlog::warn(
            "--no-chunked-prefill: a step holds a request's whole prompt (and, after a "
            "preemption, its output so far), so requests to '{}' that could grow past "
            "--max-num-batched-tokens {} tokens are refused with 400 (the longest is {})",
            s.name, scheduler.max_num_batched_tokens, longest_tokens);
    }
    s.engine = std::make_unique<Engine>(model, *s.runner, *s.kv, scheduler);
    if (opts.speculation.enabled()) {
        s.drafter = opts.speculation.load_drafter(model, num_blocks, opts.cache.block_size,
                                                  index == 0, s.runner->options());
        if (s.drafter.drafter) s.engine->add_drafter(opts.speculation.drafter, *s.drafter.drafter);
    }
    s.loop = std::make_unique<EngineLoop>(
        *s.engine, EngineLoopConfig{.max_waiting = opts.max_waiting}, signal);
}

// Loads every model and builds its pool, engine and loop; logs the split.
std::vector<std::unique_ptr<ServedEngine>> build_engines(const ServeOptions& opts) {
    check_model_options(opts);
    std::vector<std::unique_ptr<ServedEngine>> served;
    int64_t weights_bytes = 0;
    for (size_t i = 0; i < opts.model_paths.size(); ++i) {
        ModelOptions model_options = opts.model;
        model_options.path = opts.model_paths[i];
        served.push_back(std::make_unique<ServedEngine>(
            ServedEngine{.name = served_name(opts, i), .model = model_options.load()}));
        const Model& model = served.back()->model;
        if (!opts.cache.paged(model.config)) {
            throw Error(
                fmt::format("serve: the server needs the paged KV cache ({}: this model "
                            "or --kv-layout has none)",
                            opts.model_paths[i]));
        }
        weights_bytes += int64_t(model.file.file_size());
    }
    check_max_model_len(opts, served);
    // One budget for all, checked against all the weights, then split.
    const int64_t budget_bytes =
        opts.cache.checked_budget_bytes(physical_memory_bytes(), weights_bytes, "physical memory");
    const std::vector<int64_t> budgets = split_kv_budget(opts, budget_bytes, served);
    const std::shared_ptr<LoopSignal> signal = std::make_shared<LoopSignal>();
    SchedulerConfig scheduler = opts.scheduler.resolve();
    scheduler.max_model_len = opts.max_model_len;
    if (served.size() > 1) {
        spdlog::info(
            "KV memory {} (--kv-memory {}), split {}:", format_bytes(budget_bytes),
            opts.cache.memory,
            opts.kv_shares.empty() ? "for the same number of tokens per model" : "by --kv-share");
    }
    for (size_t i = 0; i < served.size(); ++i) {
        served[i]->kv_budget_bytes = budgets[i];
        build_engine(*served[i], i, served.size(), opts, scheduler, signal);
    }
    return served;
}

// The served models as the HTTP server sees them, and their engine loops.
struct ServedSet {
    std::vector<ServedModel> models;
    std::vector<EngineLoop*> loops;
    std::string names;  // "'a', 'b'", for the log
};

ServedSet served_set(const std::vector<std::unique_ptr<ServedEngine>>& served) {
    ServedSet set;
    for (const auto& s : served) {
        set.models.push_back({s->name, &s->model, s->loop.get()});
        set.loops.push_back(s->loop.get());
        set.names += (set.names.empty() ? "'" : ", '") + s->name + "'";
    }
    return set;
}

void log_serving(const ServeOptions& opts, const std::vector<std::unique_ptr<ServedEngine>>& served,
                 const ServedSet& set, const ServerOptions& server_options, int port) {
    const ServedEngine& first = *served.front();
    spdlog::info(
        "serving {} on http://{}:{} ({}; {} API key)", set.names, server_options.host, port,
        served.size() > 1 ? "KV pools above"
                          : fmt::format("{} KV blocks of {} tokens, requests up to {} tokens",
                                        first.pool->num_blocks(), opts.cache.block_size,
                                        first.engine->context_length()),
        server_options.api_key.empty() ? "no" : "with an");
}

void run_serve(const ServeOptions& opts) {
    limit_retained_memory();                      // before any thread starts: memory_release.h
    sigset_t signals = block_shutdown_signals();  // before any thread, too
    const std::vector<std::unique_ptr<ServedEngine>> served = build_engines(opts);
    const ServedSet set = served_set(served);
    std::atomic<bool> stopped_without_signal{false};
    std::thread drainer;  // started by the first signal
    const ServerOptions server_options = opts.resolved_server();
    OpenAiServer server(set.models, server_options);
    const int port = server.bind();
    log_serving(opts, served, set, server_options, port);
    std::thread signal_waiter([&] {
        int signal = 0;
        sigwait(&signals, &signal);
        if (stopped_without_signal) return;
        spdlog::info(
            "signal {}: draining (new requests get 503; running ones are cancelled "
            "after {} s), then exiting; a second signal exits at once",
            signal, server_options.drain_timeout.count() / 1000.0);
        // The drain runs on its own thread, so that this one can take a second signal.
        drainer = std::thread([&] { server.stop(); });
        sigwait(&signals, &signal);
        if (stopped_without_signal) return;
        spdlog::warn("signal {} again: exiting now, without draining", signal);
        std::_Exit(128 + signal);
    });
    std::thread listener([&] {
        server.run();
        // The listener failed or was stopped: no more requests can come.
        for (EngineLoop* loop : set.loops) loop->stop();
    });
    run_engine_loops(set.loops);  // returns after the drain
    // Wake the waiter, which is still waiting for a first signal (the
    // listener failed) or a second one (the drain is done).
    stopped_without_signal = true;
    pthread_kill(signal_waiter.native_handle(), SIGTERM);
    signal_waiter.join();
    listener.join();
    if (drainer.joinable()) drainer.join();
    spdlog::info("stopped");
}

// Who may connect, how much they may send and how long they may take.
void add_serve_http_flags(CLI::App& cmd, ServeOptions& opts) {
    cmd.add_option("--host", opts.server.host, "address to bind")->capture_default_str();
    cmd.add_option("--port", opts.server.port, "port (0: any free port)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    cmd.add_option("--api-key", opts.server.api_key,
                   "require 'Authorization: Bearer KEY' on /v1/*");
    cmd.add_option("--max-body-bytes", opts.server.max_body_bytes,
                   "largest request body, chunked or not (larger: 413)")
        ->check(CLI::Range(int64_t(1024), int64_t(1) << 30))
        ->capture_default_str();
    // One worker thread per connection being served; the sockets stay
    // below the FD_SETSIZE (1024) cpp-httplib checks them against.
    cmd.add_option("--max-connections", opts.server.max_connections,
                   "requests served at once (streams included); more get 503 at once, while "
                   "a few threads stay reserved for /health and /metrics")
        ->check(CLI::Range(1, 768))
        ->capture_default_str();
    cmd.add_option("--header-timeout", opts.header_timeout_s,
                   "seconds a connection has to send its whole request head (else 408)")
        ->check(CLI::Range(0.1, 600.0))
        ->capture_default_str();
    cmd.add_option("--body-timeout", opts.body_timeout_s,
                   "seconds a request has to send its whole body")
        ->check(CLI::Range(0.1, 3600.0))
        ->capture_default_str();
    cmd.add_option("--drain-timeout", opts.drain_timeout_s,
                   "on SIGTERM or SIGHUP, seconds admitted requests may run before they are "
                   "cancelled and answered")
        ->check(CLI::Range(0.0, 86400.0))
        ->capture_default_str();
}

// The models: several -m, their names, their shares of the KV pool, the longest request.
void add_serve_model_flags(CLI::App& cmd, ServeOptions& opts) {
    cmd.add_option("-m,--model", opts.model_paths,
                   "GGUF model file; repeat it to serve several models, each with its own "
                   "engine and KV pool")
        ->capture_default_str();
    opts.model.add_to(cmd, false);
    opts.cache.add_to(cmd);
    cmd.add_option("--kv-share", opts.kv_shares,
                   "with several models: weights splitting --kv-memory between them, one per "
                   "--model (default: the same number of tokens for each)")
        ->delimiter(',');
    cmd.add_option("--max-model-len", opts.max_model_len,
                   "the longest request, prompt and output together (default: the model's "
                   "context); the KV pool must hold one such request, so a smaller pool needs "
                   "a smaller length")
        ->check(CLI::Range(int64_t(2), int64_t(1) << 24));
    cmd.add_option("--served-model-name", opts.served_model_names,
                   "the model name clients send, one per --model in order (default: the file "
                   "name's stem)");
}

}  // namespace

void add_serve(CLI::App& app) {
    auto opts = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
    add_serve_model_flags(*cmd, *opts);
    opts->speculation.add_to(*cmd);
    add_serve_http_flags(*cmd, *opts);
    cmd->add_option("--max-waiting", opts->max_waiting, "queued requests before new ones get 503")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    opts->scheduler.add_to(*cmd, {"fcfs", "priority", "lpm"}, true);
    cmd->add_option("--special-tokens-in-messages", opts->special_tokens,
                    "chat messages' text that spells a control token ('<|im_start|>'): 'parse' "
                    "(the token, as Hugging Face and llama.cpp do) or 'text' (plain text, so "
                    "a message cannot open a turn)")
        ->check(CLI::IsMember({"parse", "text"}))
        ->capture_default_str();
    cmd->callback([opts] { run_serve(*opts); });
}

}  // namespace servelab::cli
