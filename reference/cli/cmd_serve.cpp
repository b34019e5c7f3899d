// cmd_serve.cpp — `servelab serve`: the OpenAI-compatible server (chapter 11.7).
//
// Loads the model, serves HTTP (reference/server/http_server.h, its
// connections managed by http_listener.h) and runs the continuous-batching
// engine loop (reference/server/engine_loop.h) on the main thread, the one
// that already ran the model's OpenMP work (engine_loop.h says why that
// matters). Binds 127.0.0.1:8000 by default. SIGTERM or SIGINT (Ctrl-C)
// shuts down gracefully: new requests get 503, admitted ones finish and are
// answered, and whatever still runs after --drain-timeout is cancelled and
// answered; then the process exits 0. A second signal exits at once.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/common/error.h"
#include "reference/engine/engine.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/kv/kv_budget.h"
#include "reference/server/engine_loop.h"
#include "reference/server/http_server.h"

namespace servelab::cli {
namespace {

struct ServeOptions {
    ModelOptions model;
    CacheOptions cache;
    SpeculationOptions speculation;
    ServerOptions server;
    SchedulerConfig scheduler;
    std::string policy = "fcfs";
    bool no_chunked_prefill = false;
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
        return resolved;
    }
};

// The model's name for /v1/models: --served-model-name, else the file's stem.
std::string served_name(const ServeOptions& opts) {
    if (!opts.server.model_name.empty()) return opts.server.model_name;
    return std::filesystem::path(opts.model.path).stem().string();
}

void serve(const ServeOptions& opts) {
    // Signals go to a waiting thread, not to whichever thread they hit, so
    // the shutdown runs as ordinary code (blocked here, before any thread).
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    const Model model = opts.model.load();
    if (!opts.cache.paged(model.config)) {
        throw Error(
            "serve: the server needs the paged KV cache (this model or --kv-layout has none)");
    }
    const int64_t num_blocks = PagedKvCache::blocks_for_budget(model.config, opts.cache.block_size,
                                                               opts.cache.cpu_budget_bytes(model));
    PagedKvCache pool(model.config, num_blocks, opts.cache.block_size);
    KvBlockManager kv(pool, opts.cache.prefix_cache_kind());
    ModelRunner runner(model.config, model.weights, opts.cache.mla_mode());
    SchedulerConfig scheduler = opts.scheduler;
    scheduler.chunked_prefill = !opts.no_chunked_prefill;
    scheduler.policy = parse_scheduling_policy(opts.policy);
    if (!scheduler.chunked_prefill &&
        scheduler.max_num_batched_tokens < model.config.context_length) {
        spdlog::warn(
            "--no-chunked-prefill: a step holds a request's whole prompt (and, after a "
            "preemption, its output so far), so requests that could grow past "
            "--max-num-batched-tokens {} tokens are refused with 400 (the context is {})",
            scheduler.max_num_batched_tokens, model.config.context_length);
    }
    SpeculationOptions::LoadedDrafter drafter;  // declared first: it outlives the engine
    Engine engine(model, runner, kv, scheduler);
    if (opts.speculation.enabled()) {
        drafter = opts.speculation.load_drafter(model, num_blocks, opts.cache.block_size, true);
        if (drafter.drafter) engine.add_drafter(opts.speculation.drafter, *drafter.drafter);
    }
    EngineLoop loop(engine, {.max_waiting = opts.max_waiting});
    std::atomic<bool> stopped_without_signal{false};
    std::thread drainer;  // started by the first signal

    ServerOptions server_options = opts.resolved_server();
    server_options.model_name = served_name(opts);
    OpenAiServer server(model, loop, server_options);
    const int port = server.bind();
    spdlog::info("serving '{}' on http://{}:{} ({} KV blocks of {} tokens; {} API key)",
                 server_options.model_name, server_options.host, port, num_blocks,
                 opts.cache.block_size, server_options.api_key.empty() ? "no" : "with an");
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
        loop.stop();  // the listener failed or was stopped: no more requests can come
    });
    loop.run();  // returns after the drain
    // Wake the waiter, which is still waiting for a first signal (the
    // listener failed) or a second one (the drain is done).
    stopped_without_signal = true;
    pthread_kill(signal_waiter.native_handle(), SIGTERM);
    signal_waiter.join();
    listener.join();
    if (drainer.joinable()) drainer.join();
    spdlog::info("stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto opts = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
    opts->model.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->speculation.add_to(*cmd);
    cmd->add_option("--host", opts->server.host, "address to bind")->capture_default_str();
    cmd->add_option("--port", opts->server.port, "port (0: any free port)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    cmd->add_option("--api-key", opts->server.api_key,
                    "require 'Authorization: Bearer KEY' on /v1/*");
    cmd->add_option("--served-model-name", opts->server.model_name,
                    "the model name clients send (default: the file name's stem)");
    cmd->add_option("--max-waiting", opts->max_waiting, "queued requests before new ones get 503")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--policy", opts->policy,
                    "which waiting request goes next: 'fcfs', 'priority' (the request's "
                    "priority field) or 'lpm' (longest cached prefix first, Lab 11)")
        ->check(CLI::IsMember({"fcfs", "priority", "lpm"}))
        ->capture_default_str();
    cmd->add_option("--max-num-seqs", opts->scheduler.max_num_seqs, "requests running at once")
        ->check(CLI::Range(int64_t(1), int64_t(4096)))
        ->capture_default_str();
    cmd->add_option("--max-num-batched-tokens", opts->scheduler.max_num_batched_tokens,
                    "tokens computed per step")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_flag("--no-chunked-prefill", opts->no_chunked_prefill,
                  "compute each prompt in one step (a prompt over the token budget is refused)");
    cmd->add_option("--long-prefill-tokens", opts->scheduler.long_prefill_tokens,
                    "while others run or wait, a prompt computes at most this many tokens per "
                    "step (fair prefill; 0 = no cap)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--max-body-bytes", opts->server.max_body_bytes,
                    "largest request body, chunked or not (larger: 413)")
        ->check(CLI::Range(int64_t(1024), int64_t(1) << 30))
        ->capture_default_str();
    // One worker thread per connection being served; the sockets stay
    // below the FD_SETSIZE (1024) cpp-httplib checks them against.
    cmd->add_option("--max-connections", opts->server.max_connections,
                    "requests served at once (streams included); more get 503 at once, while "
                    "a few threads stay reserved for /health and /metrics")
        ->check(CLI::Range(1, 768))
        ->capture_default_str();
    cmd->add_option("--header-timeout", opts->header_timeout_s,
                    "seconds a connection has to send its whole request head (else 408)")
        ->check(CLI::Range(0.1, 600.0))
        ->capture_default_str();
    cmd->add_option("--body-timeout", opts->body_timeout_s,
                    "seconds a request has to send its whole body")
        ->check(CLI::Range(0.1, 3600.0))
        ->capture_default_str();
    cmd->add_option("--drain-timeout", opts->drain_timeout_s,
                    "on SIGTERM, seconds admitted requests may run before they are cancelled "
                    "and answered")
        ->check(CLI::Range(0.0, 86400.0))
        ->capture_default_str();
    cmd->add_option("--special-tokens-in-messages", opts->special_tokens,
                    "chat messages' text that spells a control token ('<|im_start|>'): 'parse' "
                    "(the token, as Hugging Face and llama.cpp do) or 'text' (plain text, so "
                    "a message cannot open a turn)")
        ->check(CLI::IsMember({"parse", "text"}))
        ->capture_default_str();
    cmd->callback([opts] { serve(*opts); });
}

}  // namespace servelab::cli
