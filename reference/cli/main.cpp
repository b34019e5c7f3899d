// main.cpp — the `servelab` command-line program.
//
// Part of the CLI (all labs). Sets up logging (to stderr, so stdout carries
// only results), registers the subcommands and turns every error into one
// line on stderr with a non-zero exit status:
//   1 = bad input at run time (model file, prompt, parameters), 2 = bad flags.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "kernels/common/error.h"
#include "reference/cli/commands.h"
#include "reference/parallel/mpi_communicator.h"

int main(int argc, char** argv) {
    auto logger = spdlog::stderr_color_mt("servelab");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("[%H:%M:%S.%e] %^%l%$ %v");

    CLI::App app{"servelab — a teaching and reference LLM inference engine"};
    app.require_subcommand(1);
    bool verbose = false;
    bool quiet = false;
    app.add_flag("-v,--verbose", verbose, "debug logging");
    app.add_flag("-q,--quiet", quiet, "errors only");
    app.parse_complete_callback([&] {
        spdlog::set_level(quiet ? spdlog::level::err
                                : (verbose ? spdlog::level::debug : spdlog::level::info));
    });
    servelab::cli::add_generate(app);
    servelab::cli::add_chat(app);
    servelab::cli::add_info(app);
    servelab::cli::add_bench(app);
    servelab::cli::add_logits(app);
    servelab::cli::add_make_tiny_model(app);
    servelab::cli::add_quantize(app);
    servelab::cli::add_perplexity(app);
    servelab::cli::add_devices(app);
    servelab::cli::add_kv_compare(app);
    servelab::cli::add_kv_sim(app);
    servelab::cli::add_replay(app);
    servelab::cli::add_serve(app);
    servelab::cli::add_route(app);
    servelab::cli::add_grammar(app);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "servelab: error: %s (see servelab --help)\n", e.what());
        return 2;
    } catch (const servelab::Error& e) {
        std::fprintf(stderr, "servelab: error: %s\n", e.what());
        // Under mpirun, the other ranks may be waiting in a collective for
        // this one: end them all (a no-op without MPI).
        servelab::mpi_abort_if_running(1);
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "servelab: internal error: %s\n", e.what());
        servelab::mpi_abort_if_running(3);
        return 3;
    }
    return 0;
}
