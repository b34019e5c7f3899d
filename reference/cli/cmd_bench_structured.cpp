// cmd_bench_structured.cpp — `servelab bench structured`: what enforcing a JSON schema costs.
//
// Part of the CLI (Lab 12, chapter 11.6: constrained decoding). For each
// schema of a collection (data/schemas/, SchemaStore's, by default) the model
// is asked in a chat turn for a JSON object valid under it, the schema in the
// prompt. Each prompt runs in two arms, interleaved round by round, greedy, at
// each --batch (requests in flight at once; a finished request's place is
// taken by the next prompt):
//   constrained    the schema enforced, as response_format json_schema does,
//                  up to --max-tokens tokens;
//   unconstrained  no grammar, and exactly as many tokens as the constrained
//                  output of the same prompt (min_tokens = max_tokens). Both
//                  arms then decode the same batches step for step and differ
//                  only by the grammar's work: the mask before each sample,
//                  the matcher after. Left to stop by itself the unconstrained
//                  output would be longer or shorter, and at batch 16 that
//                  changes the batches more than the masks change the steps.
// Reported per batch: decode tok/s of each arm over the steps that only
// decode (median of the rounds) and their ratio (median of the rounds'
// ratios); the mask time per token, p50/p99 (StepOutput::grammar_mask_us);
// and the share of constrained outputs that finished with "stop" and parse
// as JSON. Per schema: the grammar's compile time (the schema's conversion
// and its mask cache, GrammarCache::get). Whether the outputs are valid under
// their schemas is for an independent judge, Python's jsonschema:
// tools/reports/structured_report.py reads them from --outputs.
// The prompts' keys and values are computed once before the rounds and kept
// in the prefix cache, so the rounds spend their time decoding.
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/machine_info.h"
#include "reference/engine/engine.h"
#include "reference/engine/request_builder.h"
#include "reference/experiments/serving_metrics.h"

namespace servelab::cli {
namespace {

// The user turn of every prompt, the schema (compact JSON) after it.
constexpr const char* kStructuredInstruction =
    "Reply with one JSON object that is valid under the JSON schema below, and nothing "
    "else.\n\nJSON schema: ";

struct StructuredBenchOptions {
    ModelOptions model;
    std::vector<std::string> schemas = {"data/schemas"};  // files, or folders of *.json
    int64_t limit = 16;                                   // the first N schemas; 0 = all
    int32_t max_tokens = 128;
    std::vector<int64_t> batches = {1, 16};
    RepeatOptions repeat{.repeats = 3};
    std::string outputs_path;  // JSON lines, one per output of the last round
    // Past this a compile is refused. Longer than the server's limit
    // (GrammarCompileOptions::time_limit), so that a slow schema is measured
    // and reported rather than refused.
    int64_t compile_limit_ms = 120000;
    OutputOptions output;
};

// One schema: its prompt and its compiled grammar.
struct StructuredCase {
    std::string schema_file;
    std::vector<TokenId> prompt;
    std::shared_ptr<const CompiledGrammar> grammar;
    double compile_ms = 0;
};

struct StructuredOutput {
    std::vector<TokenId> tokens;  // generated, an end token included
    std::string text;
    FinishReason finish_reason = FinishReason::kLength;
};

// One arm at one batch, one round.
struct StructuredRun {
    double decode_ms = 0;  // steps that computed no prompt token
    int64_t decode_tokens = 0;
    int64_t decode_steps = 0;
    int64_t prefill_tokens = 0;                        // computed (the prefix cache's misses)
    std::vector<double> mask_us;                       // every mask of the run
    std::vector<std::vector<double>> mask_us_by_case;  // at batch 1 only
    std::vector<StructuredOutput> outputs;             // by case
    double tokens_per_s() const { return decode_ms > 0 ? 1000.0 * decode_tokens / decode_ms : 0; }
};

struct StructuredBatch {
    int64_t batch = 1;
    std::vector<StructuredRun> constrained;  // by round
    std::vector<StructuredRun> unconstrained;
};

// --schemas as files: a folder gives its *.json, sorted by name; then --limit.
std::vector<std::string> structured_schema_files(const StructuredBenchOptions& opts) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    for (const std::string& given : opts.schemas) {
        std::error_code error;
        if (!fs::is_directory(given, error)) {
            files.push_back(given);
            continue;
        }
        std::vector<std::string> in_folder;
        for (const fs::directory_entry& entry : fs::directory_iterator(given, error)) {
            if (entry.path().extension() == ".json") in_folder.push_back(entry.path().string());
        }
        if (in_folder.empty()) {
            throw Error(fmt::format("bench structured: no *.json schema in {}", given));
        }
        std::sort(in_folder.begin(), in_folder.end());
        files.insert(files.end(), in_folder.begin(), in_folder.end());
    }
    if (files.empty()) throw Error("bench structured: --schemas names no schema");
    if (opts.limit > 0 && int64_t(files.size()) > opts.limit) files.resize(size_t(opts.limit));
    return files;
}

// A schema file, read and checked to be JSON (before the model loads: bad
// input fails at once); `compact` is what the prompt and the grammar get.
struct StructuredSchema {
    std::string file;
    std::string compact;
};

std::vector<StructuredSchema> read_structured_schemas(const StructuredBenchOptions& opts) {
    std::vector<StructuredSchema> schemas;
    for (const std::string& file : structured_schema_files(opts)) {
        std::ifstream in(file, std::ios::binary);
        if (!in) throw Error(fmt::format("bench structured: cannot read schema {}", file));
        const std::string text{std::istreambuf_iterator<char>(in), {}};
        const nlohmann::json schema = nlohmann::json::parse(text, nullptr, false);
        if (schema.is_discarded()) {
            throw Error(fmt::format("bench structured: {} is not JSON", file));
        }
        schemas.push_back({file, schema.dump()});
    }
    return schemas;
}

// Asks for a schema's grammar (timed: a cache miss compiles it) and builds
// its prompt through the front door, which checks that the prompt and
// --max-tokens fit the context. Throws RequestError naming what the
// converter or the compiler refused.
StructuredCase load_structured_case(const StructuredSchema& schema, const RequestBuilder& builder,
                                    int32_t max_tokens) {
    RequestSpec spec;
    spec.kind = RequestSpec::PromptKind::kChat;
    spec.messages = {{"user", kStructuredInstruction + schema.compact}};
    spec.params.max_tokens = max_tokens;
    spec.constraint.kind = ConstraintSpec::Kind::kJsonSchema;
    spec.constraint.text = schema.compact;
    spec.constraint.param = schema.file;
    StructuredCase loaded;
    loaded.schema_file = schema.file;
    const auto start = std::chrono::steady_clock::now();
    builder.compile(spec.constraint);
    loaded.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EngineRequest request = builder.build(spec);  // the grammar now from the cache
    loaded.prompt = std::move(request.prompt);
    loaded.grammar = request.params.grammar;
    return loaded;
}

// The cases of the schemas that compile. One that does not (a keyword the
// converter refuses, a grammar over the matcher's limits, a prompt too long)
// is left out of the arms, with a warning, and listed in `refused`: one
// schema of a collection does not stop the others being measured. None
// compiling is an error.
std::vector<StructuredCase> load_structured_cases(const std::vector<StructuredSchema>& schemas,
                                                  const RequestBuilder& builder, int32_t max_tokens,
                                                  nlohmann::json& refused) {
    std::vector<StructuredCase> cases;
    for (const StructuredSchema& schema : schemas) {
        try {
            cases.push_back(load_structured_case(schema, builder, max_tokens));
        } catch (const RequestError& e) {
            spdlog::warn("{}: left out: {}", schema.file, e.what());
            refused.push_back({{"schema", schema.file}, {"reason", e.what()}});
            continue;
        }
        spdlog::info("{}: {} prompt tokens, grammar compiled in {:.1f} ms", schema.file,
                     cases.back().prompt.size(), cases.back().compile_ms);
    }
    if (cases.empty()) {
        throw Error(fmt::format("bench structured: no schema compiled; {}: {}",
                                refused[0]["schema"].get<std::string>(),
                                refused[0]["reason"].get<std::string>()));
    }
    return cases;
}

// Runs every case through `engine`, at most `batch` in flight, each with its
// own `params`.
StructuredRun run_structured_arm(Engine& engine, const std::vector<StructuredCase>& cases,
                                 const std::vector<SamplingParams>& params, int64_t batch) {
    StructuredRun run;
    run.outputs.resize(cases.size());
    if (batch == 1) run.mask_us_by_case.resize(cases.size());
    std::map<int64_t, size_t> case_of;  // request id → case
    size_t next = 0;
    while (next < cases.size() || engine.has_unfinished()) {
        while (next < cases.size() && engine.num_unfinished() < batch) {
            case_of[engine.add_request(cases[next].prompt, params[next])] = next;
            ++next;
        }
        const auto start = std::chrono::steady_clock::now();
        StepOutput out = engine.step();
        const double step_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        run.mask_us.insert(run.mask_us.end(), out.grammar_mask_us.begin(),
                           out.grammar_mask_us.end());
        if (batch == 1) {  // the one request in flight is the last one added
            std::vector<double>& mine = run.mask_us_by_case[next - 1];
            mine.insert(mine.end(), out.grammar_mask_us.begin(), out.grammar_mask_us.end());
        }
        for (FinishedRequest& f : out.finished) {
            StructuredOutput& o = run.outputs[case_of.at(f.request_id)];
            o.tokens = std::move(f.result.tokens);
            o.text = std::move(f.result.text);
            o.finish_reason = f.result.finish_reason;
        }
        run.prefill_tokens += out.num_prefill_tokens;
        if (out.num_prefill_tokens > 0) continue;  // the same prompts in both arms
        run.decode_ms += step_ms;
        run.decode_tokens += int64_t(out.tokens.size());
        ++run.decode_steps;
    }
    return run;
}

std::vector<SamplingParams> constrained_params(const std::vector<StructuredCase>& cases,
                                               int32_t max_tokens) {
    std::vector<SamplingParams> params(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
        params[i].max_tokens = max_tokens;
        params[i].grammar = cases[i].grammar;
    }
    return params;
}

// No grammar, and each output as long as the constrained one was.
std::vector<SamplingParams> length_matched_params(const StructuredRun& constrained) {
    std::vector<SamplingParams> params(constrained.outputs.size());
    for (size_t i = 0; i < params.size(); ++i) {
        const int32_t tokens = int32_t(std::max<size_t>(1, constrained.outputs[i].tokens.size()));
        params[i].max_tokens = tokens;
        params[i].min_tokens = tokens;
    }
    return params;
}

// The arms of every batch, interleaved round by round (the arm that goes
// first alternates; the first round's constrained arm goes first, since the
// unconstrained one takes its lengths).
std::vector<StructuredBatch> run_structured_rounds(const StructuredBenchOptions& opts,
                                                   Engine& engine,
                                                   const std::vector<StructuredCase>& cases) {
    std::vector<StructuredBatch> batches;
    for (int64_t batch : opts.batches) {
        batches.emplace_back();
        batches.back().batch = batch;
    }
    const std::vector<SamplingParams> constrained = constrained_params(cases, opts.max_tokens);
    for (int round = 0; round < opts.repeat.repeats; ++round) {
        for (StructuredBatch& b : batches) {
            for (int turn = 0; turn < 2; ++turn) {
                const bool constrained_turn = (turn == 0) == (round % 2 == 0);
                spdlog::info("round {}/{}, batch {}, {}", round + 1, opts.repeat.repeats, b.batch,
                             constrained_turn ? "constrained" : "unconstrained");
                if (constrained_turn) {
                    b.constrained.push_back(
                        run_structured_arm(engine, cases, constrained, b.batch));
                } else {
                    b.unconstrained.push_back(run_structured_arm(
                        engine, cases, length_matched_params(b.constrained.back()), b.batch));
                }
            }
        }
    }
    return batches;
}

// Constrained outputs of a run: how many finished with "stop", and how many
// of those parse as JSON.
std::pair<int64_t, int64_t> stop_and_json_counts(const StructuredRun& run) {
    int64_t stopped = 0, parsed = 0;
    for (const StructuredOutput& o : run.outputs) {
        if (o.finish_reason != FinishReason::kStop) continue;
        ++stopped;
        if (nlohmann::json::accept(o.text)) ++parsed;
    }
    return {stopped, parsed};
}

nlohmann::json mask_summary(const std::vector<double>& mask_us) {
    double sum = 0, most = 0;
    for (double us : mask_us) {
        sum += us;
        most = std::max(most, us);
    }
    return {{"count", mask_us.size()},
            {"p50_us", percentile(mask_us, 50)},
            {"p99_us", percentile(mask_us, 99)},
            {"mean_us", mask_us.empty() ? 0.0 : sum / double(mask_us.size())},
            {"max_us", most}};
}

nlohmann::json report_structured_batch(const StructuredBatch& b) {
    std::vector<double> constrained_rates, unconstrained_rates, ratios, masks;
    int64_t tokens = 0, steps = 0;
    for (size_t r = 0; r < b.constrained.size(); ++r) {
        const StructuredRun& c = b.constrained[r];
        const StructuredRun& u = b.unconstrained[r];
        constrained_rates.push_back(c.tokens_per_s());
        unconstrained_rates.push_back(u.tokens_per_s());
        ratios.push_back(u.tokens_per_s() > 0 ? c.tokens_per_s() / u.tokens_per_s() : 0.0);
        masks.insert(masks.end(), c.mask_us.begin(), c.mask_us.end());
        tokens += c.decode_tokens;
        steps += c.decode_steps;
    }
    const auto [stopped, parsed] = stop_and_json_counts(b.constrained.back());
    return {
        {"batch", b.batch},
        {"constrained_tokens_per_s", percentile(constrained_rates, 50)},
        {"unconstrained_tokens_per_s", percentile(unconstrained_rates, 50)},
        {"ratio", percentile(ratios, 50)},
        {"ratios", ratios},
        {"rows_per_decode_step", steps > 0 ? double(tokens) / double(steps) : 0.0},
        // Prompt tokens the last round computed: a few per prompt when the
        // prefix cache kept them.
        {"prefill_tokens_last_round",
         {{"constrained", b.constrained.back().prefill_tokens},
          {"unconstrained", b.unconstrained.back().prefill_tokens}}},
        {"mask", mask_summary(masks)},
        {"outputs", b.constrained.back().outputs.size()},
        {"finished_stop", stopped},
        {"stop_parses_as_json", parsed},
    };
}

// Per schema: compile time, and at batch 1 (where each step is one
// request's) its masks over every round and its last constrained output.
nlohmann::json report_structured_cases(const std::vector<StructuredCase>& cases,
                                       const std::vector<StructuredBatch>& batches) {
    nlohmann::json rows = nlohmann::json::array();
    const StructuredBatch* single = nullptr;
    for (const StructuredBatch& b : batches) {
        if (b.batch == 1) single = &b;
    }
    const StructuredBatch& shown = single != nullptr ? *single : batches.front();
    for (size_t i = 0; i < cases.size(); ++i) {
        const StructuredOutput& o = shown.constrained.back().outputs[i];
        nlohmann::json row = {{"schema", cases[i].schema_file},
                              {"prompt_tokens", cases[i].prompt.size()},
                              {"compile_ms", cases[i].compile_ms},
                              {"output_tokens", o.tokens.size()},
                              {"finish_reason", finish_reason_name(o.finish_reason)},
                              {"parses_as_json", nlohmann::json::accept(o.text)}};
        if (single != nullptr) {
            std::vector<double> masks;
            for (const StructuredRun& run : single->constrained) {
                const std::vector<double>& mine = run.mask_us_by_case[i];
                masks.insert(masks.end(), mine.begin(), mine.end());
            }
            row["mask"] = mask_summary(masks);
        }
        rows.push_back(row);
    }
    return rows;
}

// --outputs: one JSON line per output of the last round, every batch and arm;
// at batch 1 a constrained output's masks too, one per token (which tokens
// meet a slow mask).
void write_structured_outputs(const std::string& path, const std::vector<StructuredCase>& cases,
                              const std::vector<StructuredBatch>& batches) {
    std::ofstream out(path);
    if (!out) throw Error(fmt::format("bench structured: cannot write --outputs {}", path));
    for (const StructuredBatch& b : batches) {
        for (const bool constrained : {true, false}) {
            const StructuredRun& run = constrained ? b.constrained.back() : b.unconstrained.back();
            for (size_t i = 0; i < cases.size(); ++i) {
                const StructuredOutput& o = run.outputs[i];
                nlohmann::json line = {
                    {"schema", cases[i].schema_file},
                    {"arm", constrained ? "constrained" : "unconstrained"},
                    {"batch", b.batch},
                    {"finish_reason", finish_reason_name(o.finish_reason)},
                    {"output_tokens", o.tokens.size()},
                    {"text", o.text},
                    {"output_token_ids", o.tokens},
                    {"prompt_tokens", cases[i].prompt},
                };
                if (constrained && !run.mask_us_by_case.empty())
                    line["mask_us"] = run.mask_us_by_case[i];
                out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
            }
        }
    }
    if (!out) throw Error(fmt::format("bench structured: writing {} failed", path));
}

void print_structured_table(const StructuredBenchOptions& opts, const nlohmann::json& report) {
    const nlohmann::json& compile = report["compile_ms"];
    std::printf("%s, greedy, %zu schemas, <= %d tokens each, %d threads, median of %d rounds\n",
                report["model"].get<std::string>().c_str(), report["per_schema"].size(),
                opts.max_tokens, omp_get_max_threads(), opts.repeat.repeats);
    std::printf(
        "grammar compile: p50 %.1f ms, max %.1f ms (%s); %lld over the server's %.0f ms limit; "
        "vocabulary %.0f ms, once\n",
        compile["p50"].get<double>(), compile["max"].get<double>(),
        compile["slowest"].get<std::string>().c_str(),
        (long long)compile["over_server_limit"].get<int64_t>(),
        compile["server_limit_ms"].get<double>(), report["vocabulary_ms"].get<double>());
    for (const nlohmann::json& r : report["refused"]) {
        std::printf("left out: %s: %s\n", r["schema"].get<std::string>().c_str(),
                    r["reason"].get<std::string>().c_str());
    }
    std::printf("%5s %13s %15s %7s %9s %9s %9s %10s %12s\n", "batch", "constrained",
                "unconstrained", "ratio", "mask p50", "mask p99", "mask max", "rows/step",
                "stop & JSON");
    for (const nlohmann::json& r : report["batches"]) {
        const nlohmann::json& mask = r["mask"];
        const std::string valid =
            fmt::format("{}/{} of {}", r["stop_parses_as_json"].get<int64_t>(),
                        r["finished_stop"].get<int64_t>(), r["outputs"].get<int64_t>());
        std::printf(
            "%5lld %9.1f t/s %11.1f t/s %6.3fx %6.1f us %6.1f us %6.0f us %10.2f %12s\n",
            (long long)r["batch"].get<int64_t>(), r["constrained_tokens_per_s"].get<double>(),
            r["unconstrained_tokens_per_s"].get<double>(), r["ratio"].get<double>(),
            mask["p50_us"].get<double>(), mask["p99_us"].get<double>(),
            mask["max_us"].get<double>(), r["rows_per_decode_step"].get<double>(), valid.c_str());
    }
    std::printf(
        "decode tok/s over the steps that only decode; the unconstrained arm generates as many "
        "tokens\nas the constrained one did per prompt; ratio = constrained / unconstrained "
        "(median of rounds);\nstop & JSON: constrained outputs that parse as JSON / that finished "
        "with stop / all. (--json for\nevery figure and every schema; --outputs FILE for the "
        "texts)\n");
}

// Compile times over the cases: p50, max and the slowest schema, and how
// many the server would refuse (compiling past its time limit).
nlohmann::json compile_summary(const std::vector<StructuredCase>& cases) {
    const double server_limit_ms = double(GrammarCompileOptions{}.time_limit.count());
    std::vector<double> times;
    size_t slowest = 0;
    int64_t over_server_limit = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        times.push_back(cases[i].compile_ms);
        if (cases[i].compile_ms > cases[slowest].compile_ms) slowest = i;
        if (cases[i].compile_ms > server_limit_ms) ++over_server_limit;
    }
    return {{"p50", percentile(times, 50)},
            {"max", cases[slowest].compile_ms},
            {"slowest", cases[slowest].schema_file},
            {"server_limit_ms", server_limit_ms},
            {"over_server_limit", over_server_limit}};
}

// An engine whose pool holds every prompt with its output, so the prefix
// cache keeps the prompts from round to round; its cache is filled here.
std::unique_ptr<Engine> make_structured_engine(const StructuredBenchOptions& opts,
                                               const Model& model, ModelRunner& runner,
                                               const std::vector<StructuredCase>& cases) {
    EngineConfig config;
    int64_t num_blocks = 0;
    for (const StructuredCase& c : cases) {
        num_blocks += (int64_t(c.prompt.size()) + opts.max_tokens) / config.block_size + 2;
    }
    config.num_kv_blocks = num_blocks;
    spdlog::info("KV pool: {} blocks of {} tokens for {} prompts", num_blocks, config.block_size,
                 cases.size());
    auto engine = std::make_unique<Engine>(model, runner, config);
    const int64_t widest = *std::max_element(opts.batches.begin(), opts.batches.end());
    std::vector<SamplingParams> one_token(cases.size());
    for (SamplingParams& p : one_token) p.max_tokens = 1;
    spdlog::info("computing the {} prompts once, for the prefix cache", cases.size());
    run_structured_arm(*engine, cases, one_token, widest);
    return engine;
}

void run_bench_structured(const StructuredBenchOptions& opts) {
    const std::vector<StructuredSchema> schemas = read_structured_schemas(opts);
    const Model model = opts.model.load();
    ModelRunner runner(model.config, model.weights, opts.model.runner_options());
    RequestBuilderOptions builder_options;
    builder_options.grammar.time_limit = std::chrono::milliseconds(opts.compile_limit_ms);
    const RequestBuilder builder(model, builder_options);
    auto start = std::chrono::steady_clock::now();
    builder.grammars();  // the vocabulary's byte strings, once for every grammar
    const double vocabulary_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    nlohmann::json refused = nlohmann::json::array();
    const std::vector<StructuredCase> cases =
        load_structured_cases(schemas, builder, opts.max_tokens, refused);
    const std::unique_ptr<Engine> engine = make_structured_engine(opts, model, runner, cases);
    const std::vector<StructuredBatch> batches = run_structured_rounds(opts, *engine, cases);
    if (!opts.outputs_path.empty()) write_structured_outputs(opts.outputs_path, cases, batches);

    nlohmann::json report = {
        {"model", model.config.name},
        {"max_tokens", opts.max_tokens},
        {"repeats", opts.repeat.repeats},
        {"cpu", cpu_model_name()},
        {"threads", omp_get_max_threads()},
        {"date", utc_date()},
        {"vocabulary_ms", vocabulary_ms},
        {"compile_ms", compile_summary(cases)},
        {"refused", refused},
        {"batches", nlohmann::json::array()},
        {"per_schema", report_structured_cases(cases, batches)},
    };
    for (const StructuredBatch& b : batches)
        report["batches"].push_back(report_structured_batch(b));
    if (opts.output.json) {
        print_json(report);
    } else {
        print_structured_table(opts, report);
    }
}

}  // namespace

void add_bench_structured(CLI::App& bench) {
    auto opts = std::make_shared<StructuredBenchOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "structured",
        "JSON-schema-constrained decoding against unconstrained, per batch: mask time, decode "
        "speed, valid outputs (Lab 12)");
    opts->model.add_to(*cmd);
    cmd->add_option("--schemas", opts->schemas,
                    "JSON schema files, or folders of them (their *.json, by name)")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--limit", opts->limit, "the first N schemas (0: all)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--max-tokens", opts->max_tokens, "generated tokens per output, at most")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("--batch", opts->batches, "requests in flight at once; one run per value")
        ->delimiter(',')
        ->check(CLI::Range(int64_t(1), int64_t(256)))
        ->capture_default_str();
    cmd->add_option("--outputs", opts->outputs_path,
                    "write the last round's outputs here, one JSON line each (schema, arm, "
                    "batch, finish reason, text, prompt tokens)");
    cmd->add_option("--compile-limit-ms", opts->compile_limit_ms,
                    "refuse a schema whose grammar takes longer to compile (the server's limit "
                    "is 5000)")
        ->check(CLI::Range(int64_t(1), int64_t(3600000)))
        ->capture_default_str();
    opts->repeat.add_to(*cmd, "interleaved rounds (medians)", 100);
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_bench_structured(*opts); });
}

}  // namespace servelab::cli
