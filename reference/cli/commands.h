// commands.h — the servelab subcommands, one file each (cmd_<name>.cpp).
//
// Part of the CLI (all labs). Every command has the same shape:
//   add_<cmd>(CLI::App&)                registers the subcommand and its flags (the
//                                       groups several commands share are in
//                                       cli_options.h), and sets a callback that
//                                       only calls run_<cmd>;
//   run_<cmd>(const <Cmd>Options&)      does the work, file-local in cmd_<cmd>.cpp
//                                       (run_devices() alone takes none: it has no flags).
// run_<cmd> throws servelab::Error on bad input, which main() turns into one
// line on stderr and a non-zero exit. To add a command: write cmd_<name>.cpp
// in this shape, declare its add_<name> here and call it from main.cpp (or,
// for a `bench` subcommand, from add_bench). The CLI is a unity build
// (CMakeLists.txt): give file-local names that are unique across the CLI
// (GenerateOptions, not Options).
#pragma once

#include <CLI/CLI.hpp>

namespace servelab::cli {

void add_generate(CLI::App& app);              // prompt → text (--json: ids, timings)
void add_chat(CLI::App& app);                  // interactive ChatML chat, streamed
void add_info(CLI::App& app);                  // metadata, tensor table, sizes
void add_bench(CLI::App& app);                 // prefill/decode throughput as JSON
void add_bench_throughput(CLI::App& bench);    // `bench throughput`: a trace (Lab 5)
void add_bench_speculative(CLI::App& bench);   // `bench speculative`: drafters (Lab 6)
void add_bench_allreduce(CLI::App& bench);     // `bench allreduce`: a TP back end (Lab 7)
void add_bench_serve(CLI::App& bench);         // `bench serve`: a trace against a server
void add_bench_quantize(CLI::App& bench);      // `bench quantize`: RTN/AWQ/GPTQ speed
void add_bench_prefix_cache(CLI::App& bench);  // `bench prefix-cache`: no model (Lab 11)
void add_bench_structured(CLI::App& bench);    // `bench structured`: JSON schemas (Lab 12)
void add_bench_grammar(CLI::App& bench);       // `bench grammar`: token masks (Lab 12)
void add_logits(CLI::App& app);                // raw logits of a prompt (oracle tests)
void add_make_tiny_model(CLI::App& app);       // random small llama GGUF
void add_quantize(CLI::App& app);              // RTN / AWQ / GPTQ to a GGUF (Lab 10)
void add_perplexity(CLI::App& app);            // PPL on a text, KL vs a reference (Lab 10)
void add_devices(CLI::App& app);               // CPU threads, CUDA GPUs
void add_kv_compare(CLI::App& app);            // KV cache type vs fp32 (Lab 3)
void add_kv_sim(CLI::App& app);                // KV memory waste: static vs paged (Lab 4)
void add_replay(CLI::App& app);                // a trace through the engine (Lab 4)
void add_serve(CLI::App& app);                 // OpenAI-compatible HTTP server (chapter 11.7)
void add_route(CLI::App& app);                 // a router over `serve` replicas (chapter 11.7)
void add_grammar(CLI::App& app);  // a constraint as a grammar: print/sample/check (Lab 12)

}  // namespace servelab::cli
