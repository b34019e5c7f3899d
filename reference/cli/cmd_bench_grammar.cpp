// cmd_bench_grammar.cpp — `servelab bench grammar`: how long a token mask takes, with the
// mask cache and without, for a vocabulary and a set of grammars; no model is run.
//
// Part of the CLI (Lab 12, chapter 11.6: constrained decoding). A
// constrained request pays for one mask per generated token, so the mask's
// cost is the constraint's cost. This compiles each grammar for the
// model's vocabulary (the tokenizer alone is read from the GGUF file; no
// weights are used), then runs seeded random walks: at each step it
// computes the mask from the cache and by the plain trie walk, on the same
// matcher state, checks that they agree, and takes a token drawn uniformly
// among the allowed ones, until the matcher terminates. Past
// --soft-max-tokens a walk closes: it takes an end token when one is
// allowed, else a token after which the output may end, else one holding a
// closing byte (a quote or bracket). Every mask is timed; the report gives p50 and p99 microseconds
// per mask each way, compile milliseconds each way and masks per second.
//   servelab bench grammar --json                        two built-in schemas, a regex
//   servelab bench grammar --json-schema s.json --regex '[0-9]{3}' --cache off
//   servelab bench grammar --vocab-size 4096 --json     the first 4,096 tokens only
// --print-outputs adds each finished walk's text to the JSON (the Python tests
// validate them with jsonschema). Lab 12's throughput case grades the
// student's trie walk by masks_per_s with --cache off.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_matcher.h"
#include "reference/constrained/json_schema_grammar.h"
#include "reference/constrained/regex_grammar.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/tokenizer.h"

namespace servelab::cli {
namespace {

using Clock = std::chrono::steady_clock;

// What a plain `bench grammar` measures (and Lab 12's throughput case): two
// schemas of the kind a response_format carries — an object with free
// strings (where a mask costs most: nearly every token may come next), an
// array of objects with an enum and dates — and a regex. Built in, so the
// figures do not move when data/schemas is fetched again.
const char* const kPersonSchema = R"({"type": "object", "additionalProperties": false,
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    "address": {"type": "object", "additionalProperties": false,
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                "required": ["city"]}},
  "required": ["name", "age"]})";
const char* const kEventsSchema = R"({"type": "array", "minItems": 1, "maxItems": 3,
  "items": {"type": "object", "additionalProperties": false,
            "properties": {"date": {"type": "string", "format": "date"},
                           "level": {"enum": ["info", "warn", "error"]},
                           "message": {"type": "string"}},
            "required": ["date", "level", "message"]}})";
const char* const kDefaultRegex = R"(\d{4}-\d{2}-\d{2} (INFO|WARN|ERROR) [a-z]+( [a-z]+){0,5}\.)";

struct BenchGrammarOptions {
    std::string model = kDefaultModelPath;
    std::vector<std::string> schemas;
    std::vector<std::string> regexes;
    std::string cache = "both";  // on, off, both
    int64_t vocab_size = 0;      // 0: the whole vocabulary
    int64_t walks = 2;
    int64_t soft_max_tokens = 64;
    int64_t max_tokens = 512;
    uint64_t seed = 1;
    bool print_outputs = false;
    OutputOptions output;
};

struct NamedGrammar {
    std::string name;  // the schema's file, or "regex: ..."
    Grammar grammar;
};

// What one grammar's walks measured.
struct GrammarTimes {
    double compile_cached_ms = 0, compile_plain_ms = 0;
    std::vector<double> cached_us, walk_us;  // one per mask
    int64_t tokens = 0, finished = 0, allowed_sum = 0;
    std::vector<std::string> outputs;
    nlohmann::json cache_entries;  // what the cache holds (cache_entries_report)
};

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("bench grammar: cannot read '{}'", path));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::shared_ptr<const TokenVocabulary> load_vocabulary(const std::string& model,
                                                       int64_t vocab_size) {
    const GgufFile file = GgufFile::open(model);
    TokenVocabulary vocabulary = TokenVocabulary::from_tokenizer(Tokenizer::from_gguf(file));
    if (vocab_size > 0 && vocab_size < vocabulary.size()) {
        // The first vocab_size ids: the end tokens among them stay.
        vocabulary.token_bytes.resize(size_t(vocab_size));
        std::erase_if(vocabulary.end_tokens, [&](TokenId t) { return t >= vocab_size; });
    }
    return std::make_shared<const TokenVocabulary>(std::move(vocabulary));
}

Grammar schema_grammar(const std::string& text, const std::string& name) {
    const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
    if (schema.is_discarded()) throw Error(fmt::format("bench grammar: '{}' is not JSON", name));
    return json_schema_grammar(schema);
}

std::vector<NamedGrammar> load_grammars(const BenchGrammarOptions& opts) {
    std::vector<NamedGrammar> grammars;
    if (opts.schemas.empty() && opts.regexes.empty()) {
        grammars.push_back({"builtin: person", schema_grammar(kPersonSchema, "person")});
        grammars.push_back({"builtin: events", schema_grammar(kEventsSchema, "events")});
        grammars.push_back({std::string("regex: ") + kDefaultRegex, regex_grammar(kDefaultRegex)});
        return grammars;
    }
    for (const std::string& path : opts.schemas) {
        grammars.push_back({path, schema_grammar(read_file(path), path)});
    }
    for (const std::string& regex : opts.regexes) {
        grammars.push_back({"regex: " + regex, regex_grammar(regex)});
    }
    return grammars;
}

double milliseconds_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What the mask cache holds, over the grammar's byte positions: how many
// tokens each entry accepts outright and how many it leaves to be checked
// at run time (the context-dependent ones, XGrammar's few).
nlohmann::json cache_entries_report(const CompiledGrammar& compiled) {
    const Grammar& grammar = compiled.grammar();
    int64_t positions = 0, accepted = 0, dependent = 0, max_dependent = 0, refined = 0;
    for (int32_t e = 0; e < int32_t(grammar.num_elements()); ++e) {
        if (grammar.element(e).kind != GrammarElement::Kind::kBytes) continue;
        const PositionMasks& entry = compiled.position_masks(e);
        ++positions;
        accepted += entry.accepted.count();
        dependent += int64_t(entry.dependent.size());
        max_dependent = std::max(max_dependent, int64_t(entry.dependent.size()));
        refined += int64_t(entry.refined.size());
    }
    const double n = positions > 0 ? double(positions) : 1.0;
    return {{"positions", positions},
            {"accepted_mean", double(accepted) / n},
            {"dependent_mean", double(dependent) / n},
            {"dependent_max", max_dependent},
            {"refined_entries", refined}};
}

std::shared_ptr<const CompiledGrammar> timed_compile(
    const Grammar& grammar, const std::shared_ptr<const TokenVocabulary>& vocabulary,
    bool mask_cache, double& ms) {
    GrammarCompileOptions options;
    options.mask_cache = mask_cache;
    options.time_limit = std::chrono::milliseconds(600000);  // a benchmark waits
    const Clock::time_point start = Clock::now();
    auto compiled = CompiledGrammar::compile(grammar, vocabulary, options);
    ms = milliseconds_since(start);
    return compiled;
}

// Fills `mask` by `fill` (a member of GrammarMatcher); returns microseconds.
double timed_mask(const GrammarMatcher& matcher, TokenBitmask& mask,
                  void (GrammarMatcher::*fill)(TokenBitmask&) const) {
    const Clock::time_point start = Clock::now();
    (matcher.*fill)(mask);
    return milliseconds_since(start) * 1000;
}

// A token drawn uniformly among those `mask` allows. Closing, among the
// first non-empty of: the end tokens allowed; the tokens after which the
// output may end (tried on a fork); those holding a closing byte (a quote or
// a bracket); all allowed.
TokenId draw_token(const TokenBitmask& mask, const GrammarMatcher& matcher, bool closing,
                   std::mt19937_64& rng) {
    const TokenVocabulary& vocabulary = matcher.compiled().vocabulary();
    std::vector<TokenId> allowed, ends, enders, closers;
    GrammarMatcher trial = matcher.fork();  // tries each token, then gives it back
    for (TokenId t = 0; t < mask.size(); ++t) {
        if (!mask.test(t)) continue;
        allowed.push_back(t);
        if (!closing) continue;
        const std::string& bytes = vocabulary.token_bytes[size_t(t)];
        if (bytes.empty()) ends.push_back(t);  // the mask allows no other token without bytes
        if (bytes.find_first_of("\"}]") != std::string::npos) closers.push_back(t);
        if (!bytes.empty() && trial.accept_token(t)) {
            if (trial.can_terminate()) enders.push_back(t);
            trial.rollback(1);
        }
    }
    for (const std::vector<TokenId>* pool : {&ends, &enders, &closers, &allowed}) {
        if (!pool->empty()) return (*pool)[size_t(rng() % pool->size())];
    }
    throw Error("bench grammar: a mask allows no token");
}

// One walk from the start until the matcher terminates (or max_tokens).
void run_walk(const std::shared_ptr<const CompiledGrammar>& compiled,
              const BenchGrammarOptions& opts, std::mt19937_64& rng, GrammarTimes& times) {
    GrammarMatcher matcher(compiled);
    const TokenVocabulary& vocabulary = compiled->vocabulary();
    TokenBitmask cached(vocabulary.size()), walked(vocabulary.size());
    const bool with_cache = compiled->has_mask_cache();
    const bool with_walk = opts.cache != "on";
    std::string output;
    for (int64_t step = 0; step < opts.max_tokens && !matcher.is_terminated(); ++step) {
        if (with_cache) {
            times.cached_us.push_back(
                timed_mask(matcher, cached, &GrammarMatcher::fill_next_token_bitmask));
        }
        if (with_walk) {
            times.walk_us.push_back(
                timed_mask(matcher, walked, &GrammarMatcher::fill_next_token_bitmask_by_walk));
        }
        if (with_cache && with_walk && !(cached == walked)) {
            throw Error(
                fmt::format("bench grammar: the cached mask and the trie walk disagree "
                            "after {} tokens ({} against {} allowed)",
                            step, cached.count(), walked.count()));
        }
        const TokenBitmask& mask = with_cache ? cached : walked;
        times.allowed_sum += mask.count();
        const TokenId token = draw_token(mask, matcher, step >= opts.soft_max_tokens, rng);
        if (!matcher.accept_token(token)) {
            throw Error(
                fmt::format("bench grammar: the matcher refused token {}, which its "
                            "mask allowed",
                            token));
        }
        output += vocabulary.token_bytes[size_t(token)];
        ++times.tokens;
    }
    // Only whole sentences are kept: a walk cut at max_tokens may end
    // inside a UTF-8 character, which JSON cannot carry.
    if (matcher.is_terminated()) {
        ++times.finished;
        times.outputs.push_back(std::move(output));
    }
}

GrammarTimes measure(const NamedGrammar& named,
                     const std::shared_ptr<const TokenVocabulary>& vocabulary,
                     const BenchGrammarOptions& opts, uint64_t seed) {
    GrammarTimes times;
    std::shared_ptr<const CompiledGrammar> walked_only;
    if (opts.cache != "on") {
        walked_only = timed_compile(named.grammar, vocabulary, false, times.compile_plain_ms);
    }
    std::shared_ptr<const CompiledGrammar> compiled = walked_only;
    if (opts.cache != "off") {
        compiled = timed_compile(named.grammar, vocabulary, true, times.compile_cached_ms);
        times.cache_entries = cache_entries_report(*compiled);
    }
    std::mt19937_64 rng(seed);
    for (int64_t w = 0; w < opts.walks; ++w) run_walk(compiled, opts, rng, times);
    return times;
}

double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    return values[std::min(values.size() - 1, size_t(p * double(values.size())))];
}

double sum_of(const std::vector<double>& values) {
    double total = 0;
    for (const double v : values) total += v;
    return total;
}

// {p50_us, p99_us, masks, masks_per_s} of one set of mask times.
nlohmann::json mask_stats(const std::vector<double>& us) {
    const double total_s = sum_of(us) / 1e6;
    return {{"masks", us.size()},
            {"p50_us", percentile(us, 0.50)},
            {"p99_us", percentile(us, 0.99)},
            {"mean_us", us.empty() ? 0.0 : sum_of(us) / double(us.size())},
            {"masks_per_s", total_s > 0 ? double(us.size()) / total_s : 0.0}};
}

nlohmann::json grammar_report(const NamedGrammar& named, const GrammarTimes& t,
                              const BenchGrammarOptions& opts) {
    nlohmann::json row = {
        {"grammar", named.name},
        {"rules", named.grammar.num_rules()},
        {"tokens", t.tokens},
        {"walks", opts.walks},
        {"finished", t.finished},
        {"allowed_tokens_mean", t.tokens ? double(t.allowed_sum) / double(t.tokens) : 0.0}};
    if (opts.cache != "off") {
        row["compile_ms_cached"] = t.compile_cached_ms;
        row["cached"] = mask_stats(t.cached_us);
        row["cache_entries"] = t.cache_entries;
    }
    if (opts.cache != "on") {
        row["compile_ms_plain"] = t.compile_plain_ms;
        row["walk"] = mask_stats(t.walk_us);
    }
    if (opts.print_outputs) row["outputs"] = t.outputs;
    return row;
}

void print_table(const nlohmann::json& report) {
    std::printf("vocabulary: %lld tokens (%s)\n", (long long)report["vocab_size"].get<int64_t>(),
                report["model"].get<std::string>().c_str());
    std::printf("%-44s %8s %8s %9s %9s %9s %9s %9s\n", "grammar", "tokens", "compile", "cache p50",
                "cache p99", "compile", "walk p50", "walk p99");
    std::printf("%-44s %8s %8s %9s %9s %9s %9s %9s\n", "", "", "ms", "us", "us", "plain ms", "us",
                "us");
    for (const nlohmann::json& row : report["grammars"]) {
        const auto field = [&](const char* group, const char* key) {
            return row.contains(group) ? row[group][key].get<double>() : 0.0;
        };
        std::string name = row["grammar"].get<std::string>();
        if (name.size() > 44) name = name.substr(0, 41) + "...";
        std::printf("%-44s %8lld %8.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", name.c_str(),
                    (long long)row["tokens"].get<int64_t>(), row.value("compile_ms_cached", 0.0),
                    field("cached", "p50_us"), field("cached", "p99_us"),
                    row.value("compile_ms_plain", 0.0), field("walk", "p50_us"),
                    field("walk", "p99_us"));
    }
    if (report.contains("cached")) {
        std::printf("all grammars, cached: %.0f masks/s\n",
                    report["cached"]["masks_per_s"].get<double>());
    }
    if (report.contains("walk")) {
        std::printf("all grammars, walk:   %.0f masks/s\n",
                    report["walk"]["masks_per_s"].get<double>());
    }
}

void run_bench_grammar(const BenchGrammarOptions& opts) {
    const auto vocabulary = load_vocabulary(opts.model, opts.vocab_size);
    const std::vector<NamedGrammar> grammars = load_grammars(opts);
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> all_cached, all_walk;
    for (size_t g = 0; g < grammars.size(); ++g) {
        const GrammarTimes t = measure(grammars[g], vocabulary, opts, opts.seed + g);
        rows.push_back(grammar_report(grammars[g], t, opts));
        all_cached.insert(all_cached.end(), t.cached_us.begin(), t.cached_us.end());
        all_walk.insert(all_walk.end(), t.walk_us.begin(), t.walk_us.end());
    }
    nlohmann::json report = {{"model", opts.model},
                             {"vocab_size", vocabulary->size()},
                             {"cache", opts.cache},
                             {"seed", opts.seed},
                             {"grammars", rows}};
    if (opts.cache != "off") report["cached"] = mask_stats(all_cached);
    if (opts.cache != "on") report["walk"] = mask_stats(all_walk);
    // The headline: masks per second of the mode measured (the walk's when both).
    report["masks_per_s"] = report[opts.cache == "on" ? "cached" : "walk"]["masks_per_s"];
    if (opts.output.json) {
        print_json(report);
        return;
    }
    print_table(report);
}

}  // namespace

void add_bench_grammar(CLI::App& bench) {
    auto opts = std::make_shared<BenchGrammarOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "grammar",
        "time token masks with and without the mask cache, for a vocabulary and some grammars "
        "(no model run; Lab 12)");
    cmd->add_option("-m,--model", opts->model, "the GGUF whose vocabulary is used")
        ->capture_default_str();
    cmd->add_option("--json-schema", opts->schemas, "a JSON schema file (repeat it)");
    cmd->add_option("--regex", opts->regexes, "a regex (repeat it)");
    cmd->add_option("--cache", opts->cache,
                    "on: cached masks only; off: trie walks only; both: each state both ways, "
                    "checked equal")
        ->check(CLI::IsMember({"on", "off", "both"}))
        ->capture_default_str();
    cmd->add_option("--vocab-size", opts->vocab_size,
                    "keep the vocabulary's first N tokens (0 = all)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 24))
        ->capture_default_str();
    cmd->add_option("--walks", opts->walks, "random walks per grammar")
        ->check(CLI::Range(int64_t(1), int64_t(100000)))
        ->capture_default_str();
    cmd->add_option("--soft-max-tokens", opts->soft_max_tokens,
                    "past this many tokens a walk closes as soon as it can")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--max-tokens", opts->max_tokens, "a walk stops here, finished or not")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--seed", opts->seed, "of the walks (grammar i uses seed + i)")
        ->capture_default_str();
    cmd->add_flag("--print-outputs", opts->print_outputs,
                  "add each finished walk's text to the JSON");
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_bench_grammar(*opts); });
}

}  // namespace servelab::cli
