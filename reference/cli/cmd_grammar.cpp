// cmd_grammar.cpp — `servelab grammar`: a constraint as a grammar, without a model.
//
// Part of the CLI (Lab 12, chapter 11.6: constrained decoding). Builds the
// grammar a request's constraint becomes — a JSON schema (--json-schema
// FILE, or - for stdin), a regex, a GBNF file, or a list of --choice — and
// then, in this order, for whichever are asked:
//   --print      the rules (Grammar::to_string), the default;
//   --sample N   N random sentences (grammar_sampler.h), one a line, each as a
//                JSON string so that newlines and quotes survive;
//   --check T    exit 0 if T is a whole sentence, else a one-line reason and
//                exit 1 (the byte where T leaves the language, or that it
//                stops early), walked by the matcher a request uses.
// The tests feed the samples to independent validators (Python's json and
// jsonschema: tests/e2e/test_json_schema_grammar.py); a user sees what a
// schema allows before sending it.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>

#include "kernels/common/error.h"
#include "reference/cli/commands.h"
#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/gbnf_parser.h"
#include "reference/constrained/grammar_matcher.h"
#include "reference/constrained/grammar_sampler.h"
#include "reference/constrained/json_schema_grammar.h"
#include "reference/constrained/regex_grammar.h"

namespace servelab::cli {
namespace {

struct GrammarOptions {
    std::string json_schema;  // a file, or "-" for stdin
    std::string regex;
    std::string gbnf;  // a file
    std::vector<std::string> choices;
    bool print = false;
    int64_t samples = 0;
    uint64_t seed = 0;
    int64_t sample_max_bytes = 256;
    std::string check;
    bool check_given = false;
};

std::string read_input(const std::string& path, const char* flag) {
    if (path == "-") {
        return std::string(std::istreambuf_iterator<char>(std::cin), {});
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot read '{}'", flag, path));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

Grammar constraint_grammar(const GrammarOptions& opts) {
    const int given = !opts.json_schema.empty() + !opts.regex.empty() + !opts.gbnf.empty() +
                      !opts.choices.empty();
    if (given != 1) {
        throw Error("grammar: give one constraint: --json-schema, --regex, --gbnf or --choice");
    }
    if (!opts.json_schema.empty()) {
        const std::string text = read_input(opts.json_schema, "--json-schema");
        const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(text, nullptr, false);
        if (schema.is_discarded()) {
            throw Error(fmt::format("--json-schema: '{}' is not JSON", opts.json_schema));
        }
        return json_schema_grammar(schema);
    }
    if (!opts.regex.empty()) return regex_grammar(opts.regex);
    if (!opts.gbnf.empty()) return parse_gbnf(read_input(opts.gbnf, "--gbnf"));
    return choice_grammar(opts.choices);
}

void print_samples(const Grammar& grammar, const GrammarOptions& opts) {
    const GrammarSampler sampler(grammar);
    std::mt19937_64 rng(opts.seed);
    for (int64_t k = 0; k < opts.samples; ++k) {
        const std::string sentence = sampler.sample(rng, size_t(opts.sample_max_bytes));
        std::string line;
        try {
            line = nlohmann::json(sentence).dump();
        } catch (const nlohmann::json::type_error&) {
            // A GBNF grammar may match bytes that are not UTF-8, which a
            // JSON string cannot show: they print as U+FFFD, and we say so.
            line = nlohmann::json(sentence).dump(-1, ' ', false,
                                                 nlohmann::json::error_handler_t::replace);
            std::fprintf(stderr, "sample %lld is not UTF-8: its bad bytes show as U+FFFD\n",
                         (long long)k);
        }
        std::printf("%s\n", line.c_str());
    }
}

// Throws Error with the reason `text` is not a sentence of `grammar`.
void check_sentence(Grammar grammar, const std::string& text) {
    GrammarCompileOptions options;
    options.mask_cache = false;  // bytes only: no tokens to mask
    const auto compiled = CompiledGrammar::compile(
        std::move(grammar), std::make_shared<const TokenVocabulary>(), options);
    GrammarMatcher matcher(compiled);
    for (size_t i = 0; i < text.size(); ++i) {
        if (matcher.accept_bytes(text.substr(i, 1))) continue;
        const std::string before =
            nlohmann::json(text.substr(0, i))
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        throw Error(fmt::format("--check: not a sentence: byte {} (0x{:02X}) cannot follow {}", i,
                                uint8_t(text[i]), before));
    }
    if (!matcher.can_terminate()) {
        throw Error("--check: not a sentence: it stops early (the grammar wants more)");
    }
}

void run_grammar(const GrammarOptions& opts) {
    Grammar grammar = constraint_grammar(opts);
    if (opts.print || (opts.samples == 0 && !opts.check_given)) {
        std::printf("%s", grammar.to_string().c_str());
    }
    if (opts.samples > 0) print_samples(grammar, opts);
    if (opts.check_given) check_sentence(std::move(grammar), opts.check);
}

}  // namespace

void add_grammar(CLI::App& app) {
    auto opts = std::make_shared<GrammarOptions>();
    CLI::App* cmd = app.add_subcommand(
        "grammar",
        "a constraint (JSON schema, regex, GBNF, choices) as a grammar: print, sample, "
        "check (Lab 12)");
    auto* schema =
        cmd->add_option("--json-schema", opts->json_schema, "a JSON schema file (- reads stdin)");
    auto* regex = cmd->add_option("--regex", opts->regex, "a regex the whole output must match");
    auto* gbnf = cmd->add_option("--gbnf", opts->gbnf, "a GBNF grammar file (rule 'root')");
    auto* choice = cmd->add_option("--choice", opts->choices, "one allowed output (repeat it)");
    schema->excludes(regex, gbnf, choice);
    regex->excludes(gbnf, choice);
    gbnf->excludes(choice);
    cmd->add_flag("--print", opts->print, "print the grammar's rules (the default action)");
    cmd->add_option("--sample", opts->samples, "print N random sentences, one JSON string a line")
        ->check(CLI::Range(int64_t(0), int64_t(1000000)));
    cmd->add_option("--seed", opts->seed, "the seed of --sample")->capture_default_str();
    cmd->add_option("--sample-max-bytes", opts->sample_max_bytes,
                    "past this length a sample closes as fast as the grammar allows")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 24))
        ->capture_default_str();
    cmd->add_option("--check", opts->check, "exit 0 if TEXT is a sentence, else 1 with the reason");
    cmd->callback([opts, cmd] {
        opts->check_given = cmd->count("--check") > 0;
        run_grammar(*opts);
    });
}

}  // namespace servelab::cli
