// cmd_bench_quantize.cpp — `servelab bench quantize`: how fast RTN, AWQ and GPTQ quantize a layer.
//
// Part of the CLI (Lab 10, weight quantization; chapter 11.7). Quantizing
// a model is done once, but its cost decides what a user can afford: RTN
// takes a fraction of a second for SmolLM2, AWQ and GPTQ minutes, and both
// grow with the layer's width (AWQ's search evaluates the output error
// once per exponent tried; GPTQ walks the columns of every row). This
// times the same code `servelab quantize` runs (quantize_layer.h) on one
// layer of the model's shapes — random weights and random calibration
// activations with a few outlier channels, so no calibration pass is timed
// — once per method, and reports seconds and weights per second.
//   servelab bench quantize --json                  SmolLM2's shapes, every method
//   servelab bench quantize --method gptq --repeats 3
// Lab 10's throughput case grades the student's quantizer by
// all_methods_weights_per_s against the reference's.
#include <fmt/format.h>
#include <omp.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/experiments/serving_metrics.h"
#include "reference/model/gguf_reader.h"
#include "reference/quant/quantize_layer.h"

namespace servelab::cli {
namespace {

struct BenchQuantizeOptions {
    std::string model = kDefaultModelPath;
    std::string method = "all";
    std::string type = "q4_0";
    int64_t group_size = 32;
    int64_t tokens = 256;
    int awq_grid = 20;
    RepeatOptions repeat{.repeats = 1};
    int threads = 0;
    uint64_t seed = 1;
    OutputOptions output;
};

// Random weights of the layer's shapes (normal, a layer's typical scale).
LayerMatrix random_matrix(const std::string& name, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 0.05f);
    LayerMatrix m{name, rows, cols, std::vector<float>(size_t(rows * cols)), {}, {}};
    for (float& w : m.weights) w = normal(rng);
    return m;
}

QuantLayer random_layer(const ModelConfig& c, std::mt19937& rng) {
    QuantLayer layer{random_matrix("q", c.q_dim(), c.dim, rng),
                     random_matrix("k", c.kv_dim(), c.dim, rng),
                     random_matrix("v", c.kv_dim(), c.dim, rng),
                     random_matrix("o", c.dim, c.q_dim(), rng),
                     random_matrix("gate", c.ffn_dim, c.dim, rng),
                     random_matrix("up", c.ffn_dim, c.dim, rng),
                     random_matrix("down", c.dim, c.ffn_dim, rng),
                     std::vector<float>(size_t(c.dim), 1.0f),
                     std::vector<float>(size_t(c.dim), 1.0f),
                     "attn_norm",
                     "ffn_norm"};
    return layer;
}

// Calibration statistics of layer 0 from random activations: normal, with
// four channels of each input 20 times larger, as real ones have.
CalibrationStatistics random_statistics(const ModelConfig& c, int64_t tokens, std::mt19937& rng) {
    CalibrationStatistics stats(1);
    const std::pair<LinearInput, int64_t> inputs[] = {{LinearInput::kAttentionIn, c.dim},
                                                      {LinearInput::kAttentionOut, c.q_dim()},
                                                      {LinearInput::kMlpIn, c.dim},
                                                      {LinearInput::kMlpHidden, c.ffn_dim}};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const auto& [input, cols] : inputs) {
        std::vector<float> rows(size_t(tokens * cols));
        for (float& x : rows) x = normal(rng);
        for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t j = 0; j < 4; ++j) rows[size_t(t * cols + j * (cols / 4))] *= 20.0f;
        }
        stats.observe(0, input, rows.data(), tokens, cols);
    }
    return stats;
}

QuantizeOptions quantize_options(const BenchQuantizeOptions& opts, QuantMethod method) {
    QuantizeOptions q;
    q.method = method;
    q.scheme.group_size = opts.group_size;
    if (opts.type == "q4_0") {
        q.scheme.bits = 4;
        q.scheme.symmetric = true;
    } else if (opts.type == "q4_1") {
        q.scheme.bits = 4;
        q.scheme.symmetric = false;
    } else if (opts.type == "q8_0") {
        q.scheme.bits = 8;
        q.scheme.symmetric = true;
    } else {
        throw Error(
            fmt::format("bench quantize: unknown --type '{}' (q4_0, q4_1, q8_0)", opts.type));
    }
    q.awq_grid = opts.awq_grid;
    return q;
}

int64_t layer_weights(const ModelConfig& c) {
    return c.dim * (2 * c.q_dim() + 2 * c.kv_dim() + 3 * c.ffn_dim);
}

void run_bench_quantize(const BenchQuantizeOptions& opts) {
    if (opts.threads > 0) omp_set_num_threads(opts.threads);
    const ModelConfig config = ModelConfig::from_gguf(GgufFile::open(opts.model));
    if (config.is_mla()) throw Error("bench quantize: llama-architecture models only, not MLA");
    std::vector<QuantMethod> methods;
    if (opts.method == "all") {
        methods = {QuantMethod::kRtn, QuantMethod::kAwq, QuantMethod::kGptq};
    } else {
        methods = {parse_quant_method(opts.method)};
    }
    std::mt19937 rng(uint32_t(opts.seed));
    const QuantLayer source = random_layer(config, rng);
    const CalibrationStatistics stats = random_statistics(config, opts.tokens, rng);
    const int64_t weights = layer_weights(config);

    nlohmann::json report = {{"model", opts.model},           {"type", opts.type},
                             {"group_size", opts.group_size}, {"calibration_tokens", opts.tokens},
                             {"awq_grid", opts.awq_grid},     {"threads", omp_get_max_threads()},
                             {"layer_weights", weights},      {"repeats", opts.repeat.repeats}};
    double total_s = 0.0;
    for (const QuantMethod method : methods) {
        const QuantizeOptions q = quantize_options(opts, method);
        std::vector<double> seconds;
        for (int r = 0; r < opts.repeat.repeats; ++r) {
            QuantLayer layer = source;  // AWQ scales the weights in place
            std::vector<LayerError> errors;
            const auto start = std::chrono::steady_clock::now();
            quantize_layer(layer, 0, config, &stats, q, errors);
            seconds.push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        const double median_s = percentile(seconds, 50);
        total_s += median_s;
        const std::string name(quant_method_name(method));
        report[name + "_seconds"] = median_s;
        report[name + "_weights_per_s"] = double(weights) / median_s;
        if (!opts.output.json) {
            std::printf("%-5s %8.3f s per layer  %10.0f weights/s\n", name.c_str(), median_s,
                        double(weights) / median_s);
        }
    }
    report["all_methods_weights_per_s"] = double(weights) * double(methods.size()) / total_s;
    if (opts.output.json) {
        print_json(report);
        return;
    }
    std::printf("one layer of %s's shapes: %lld weights, %s, groups of %lld, %d threads\n",
                opts.model.c_str(), (long long)weights, opts.type.c_str(),
                (long long)opts.group_size, omp_get_max_threads());
}

}  // namespace

void add_bench_quantize(CLI::App& bench) {
    auto opts = std::make_shared<BenchQuantizeOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "quantize", "time RTN, AWQ and GPTQ on one layer of the model's shapes (Lab 10)");
    cmd->add_option("-m,--model", opts->model, "GGUF whose layer shapes to use")
        ->capture_default_str();
    cmd->add_option("--method", opts->method, "rtn, awq, gptq or all")->capture_default_str();
    cmd->add_option("--type", opts->type, "q4_0, q4_1 or q8_0")->capture_default_str();
    cmd->add_option("--group-size", opts->group_size, "weights sharing a scale (multiple of 32)")
        ->check(CLI::Range(int64_t(32), int64_t(1) << 16))
        ->capture_default_str();
    cmd->add_option("--tokens", opts->tokens, "calibration tokens per input")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
        ->capture_default_str();
    cmd->add_option("--awq-grid", opts->awq_grid, "AWQ: exponents tried")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    opts->repeat.add_to(*cmd, "runs per method (the median is reported)", 1000);
    cmd->add_option("-t,--threads", opts->threads, "CPU threads (0 = all cores)")
        ->check(CLI::Range(0, 4096))
        ->capture_default_str();
    cmd->add_option("--seed", opts->seed, "seed of the random layer")->capture_default_str();
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_bench_quantize(*opts); });
}

}  // namespace servelab::cli
