// commands.h — the servelab subcommands, one file each (cmd_<name>.cpp).
//
// Part of the CLI (all labs). Each function adds one subcommand to the app;
// its callback runs the command and throws servelab::Error on bad input,
// which main() turns into one line on stderr and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

namespace servelab::cli {

void add_generate_command(CLI::App& app);              // prompt → text (--json: ids, timings)
void add_chat_command(CLI::App& app);                  // interactive ChatML chat, streamed
void add_info_command(CLI::App& app);                  // metadata, tensor table, sizes
void add_bench_command(CLI::App& app);                 // prefill/decode throughput as JSON
void add_bench_throughput_command(CLI::App& bench);    // `bench throughput`: a trace (Lab 5)
void add_bench_speculative_command(CLI::App& bench);   // `bench speculative`: drafters (Lab 6)
void add_bench_allreduce_command(CLI::App& bench);     // `bench allreduce`: a TP back end (Lab 7)
void add_bench_serve_command(CLI::App& bench);         // `bench serve`: a trace against a server
void add_bench_quantize_command(CLI::App& bench);      // `bench quantize`: RTN/AWQ/GPTQ speed
void add_bench_prefix_cache_command(CLI::App& bench);  // `bench prefix-cache`: no model (Lab 11)
void add_logits_command(CLI::App& app);                // raw logits of a prompt (oracle tests)
void add_make_tiny_model_command(CLI::App& app);       // random small llama GGUF
void add_quantize_command(CLI::App& app);              // RTN / AWQ / GPTQ to a GGUF (Lab 10)
void add_perplexity_command(CLI::App& app);            // PPL on a text, KL vs a reference (Lab 10)
void add_devices_command(CLI::App& app);               // CPU threads, CUDA GPUs
void add_kv_compare_command(CLI::App& app);            // KV cache type vs fp32 (Lab 3)
void add_kv_sim_command(CLI::App& app);                // KV memory waste: static vs paged (Lab 4)
void add_replay_command(CLI::App& app);                // a trace through the engine (Lab 4)
void add_serve_command(CLI::App& app);                 // OpenAI-compatible HTTP server (issue 10)
void add_route_command(CLI::App& app);                 // a router over `serve` replicas (11.7)

}  // namespace servelab::cli
