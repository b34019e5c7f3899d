// cmd_quantize.cpp — `servelab quantize`: write a quantized GGUF by RTN, AWQ or GPTQ.
//
// Part of the CLI (Lab 10, weight quantization; reference/quant/quantize_model.h).
//   servelab quantize -m SRC.gguf -o OUT.gguf --method awq --type q4_0
//   servelab quantize -m SRC.gguf -o OUT.gguf --method gptq --type fake --bits 3 --group-size 64
// Progress goes to stderr; a summary (or, with --json, one JSON object) to stdout.
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <optional>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/stage_progress.h"
#include "reference/quant/quantize_model.h"

namespace servelab::cli {
namespace {

constexpr const char* kDefaultCalibrationText = "data/text/kjv_calibration.txt";

struct QuantizeCommandOptions {
    std::string model = kDefaultModelPath;
    std::string out;
    std::string method = "rtn";
    std::string type = "q4_0";
    std::optional<int> bits;
    bool symmetric = false;
    int64_t group_size = 32;
    int threads = 0;
    std::string calibration = kDefaultCalibrationText;
    QuantizeOptions quantize;  // the method's knobs; the scheme is resolved from the above
    OutputOptions output;
};

// The storage type and the grid it implies ("fake": F16 values of any grid).
void resolve_type(const QuantizeCommandOptions& opts, QuantizeOptions& q) {
    if (opts.type == "fake") {
        q.output_type = GgmlType::kF16;
        q.scheme.bits = opts.bits.value_or(3);
        q.scheme.symmetric = opts.symmetric;
    } else {
        const GgmlType type = opts.type == "q4_0"   ? GgmlType::kQ4_0
                              : opts.type == "q4_1" ? GgmlType::kQ4_1
                              : opts.type == "q8_0"
                                  ? GgmlType::kQ8_0
                                  : throw Error(fmt::format("quantize: unknown --type '{}' (q4_0, "
                                                            "q4_1, q8_0, fake)",
                                                            opts.type));
        q.output_type = type;
        q.scheme.bits = type == GgmlType::kQ8_0 ? 8 : 4;
        q.scheme.symmetric = type != GgmlType::kQ4_1;
        if (opts.bits && *opts.bits != q.scheme.bits) {
            throw Error(
                fmt::format("quantize: --type {} stores {} bits; --bits {} needs --type fake",
                            opts.type, q.scheme.bits, *opts.bits));
        }
        if (opts.symmetric && !q.scheme.symmetric) {
            throw Error(
                "quantize: --type q4_1 is asymmetric; --symmetric needs q4_0, q8_0 or fake");
        }
    }
    q.scheme.group_size = opts.group_size;
}

nlohmann::json report_json(const QuantizeCommandOptions& opts, const QuantizeOptions& q,
                           const QuantizeReport& r) {
    double rtn = 0.0;
    double method = 0.0;
    for (const LayerError& e : r.errors) {
        rtn += e.rtn_error;
        method += e.method_error;
    }
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerError& e : r.errors) {
        layers.push_back({{"layer", e.layer},
                          {"input", std::string(linear_input_name(e.input))},
                          {"rtn_output_error", e.rtn_error},
                          {"output_error", e.method_error},
                          {"awq_alpha", e.awq_alpha}});
    }
    return {{"source", opts.model},
            {"output", opts.out},
            {"method", opts.method},
            {"type", opts.type},
            {"bits", q.scheme.bits},
            {"symmetric", q.scheme.symmetric},
            {"group_size", q.scheme.group_size},
            {"bits_per_weight", r.bits_per_weight},
            {"file_bytes", r.file_bytes},
            {"quantized_weights", r.quantized_weights},
            {"calibration_seconds", r.calibration_seconds},
            {"quantize_seconds", r.quantize_seconds},
            {"write_seconds", r.write_seconds},
            {"total_rtn_output_error", rtn},
            {"total_output_error", method},
            {"layers", layers}};
}

void print_quantize_summary(const QuantizeCommandOptions& opts, const QuantizeOptions& q,
                            const QuantizeReport& report, const nlohmann::json& j) {
    std::printf("wrote %s: %s %d-bit %s, groups of %lld (%.3f bits per weight), %.1f MB\n",
                opts.out.c_str(), opts.method.c_str(), q.scheme.bits,
                q.scheme.symmetric ? "symmetric" : "asymmetric", (long long)q.scheme.group_size,
                report.bits_per_weight, double(report.file_bytes) / 1e6);
    std::printf("time: calibration %.1f s, quantization %.1f s, writing %.1f s\n",
                report.calibration_seconds, report.quantize_seconds, report.write_seconds);
    if (!report.errors.empty()) {
        const double rtn = j["total_rtn_output_error"];
        const double method = j["total_output_error"];
        std::printf("output error over the calibration inputs: %s %.4g, rtn %.4g (%.1f%%)\n",
                    opts.method.c_str(), method, rtn, rtn > 0 ? 100.0 * method / rtn : 0.0);
    }
}

void run_quantize(const QuantizeCommandOptions& opts) {
    QuantizeOptions q = opts.quantize;
    q.method = parse_quant_method(opts.method);
    resolve_type(opts, q);
    if (q.method != QuantMethod::kRtn) q.calibration.text_path = opts.calibration;
    if (opts.threads > 0) omp_set_num_threads(opts.threads);
    StageProgress progress("quantize", spdlog::get_level() <= spdlog::level::info);
    const QuantizeReport report = quantize_model(
        opts.model, opts.out, q, [&](std::string_view stage, int64_t done, int64_t total) {
            progress.update(stage, done, total);
        });
    const nlohmann::json j = report_json(opts, q, report);
    if (opts.output.json) {
        print_json(j);
    } else {
        print_quantize_summary(opts, q, report, j);
    }
}

// The method's knobs: calibration for AWQ and GPTQ, AWQ's grid, GPTQ's damping and block.
void add_quantize_method_knobs(CLI::App& cmd, QuantizeCommandOptions& opts) {
    cmd.add_option("--calibration", opts.calibration, "calibration text for awq and gptq")
        ->capture_default_str();
    cmd.add_option("--calibration-sequences", opts.quantize.calibration.num_sequences)
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
        ->capture_default_str();
    cmd.add_option("--calibration-tokens", opts.quantize.calibration.tokens_per_sequence,
                   "tokens per calibration sequence")
        ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
        ->capture_default_str();
    cmd.add_option("--awq-grid", opts.quantize.awq_grid, "AWQ: exponents tried in [0, 1)")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd.add_option("--gptq-damping", opts.quantize.gptq.damping,
                   "GPTQ: λ as a fraction of mean(diag H)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd.add_option("--gptq-block", opts.quantize.gptq.block_size, "GPTQ: columns per lazy batch")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
}

}  // namespace

void add_quantize(CLI::App& app) {
    auto opts = std::make_shared<QuantizeCommandOptions>();
    CLI::App* cmd = app.add_subcommand(
        "quantize", "write a quantized GGUF from a GGUF by RTN, AWQ or GPTQ (Lab 10)");
    cmd->add_option("-m,--model", opts->model, "source GGUF (its weights dequantized to fp32)")
        ->capture_default_str();
    cmd->add_option("-o,--out", opts->out, "the GGUF to write")->required();
    cmd->add_option("--method", opts->method, "rtn, awq or gptq")->capture_default_str();
    cmd->add_option("--type", opts->type,
                    "storage: q4_0 (4-bit symmetric), q4_1 (4-bit asymmetric), q8_0, or fake "
                    "(F16 values of any grid: 2-8 bits, any group size)")
        ->capture_default_str();
    cmd->add_option("--bits", opts->bits, "bits per code with --type fake (default 3)")
        ->check(CLI::Range(2, 8));
    cmd->add_flag("--symmetric", opts->symmetric,
                  "with --type fake: codes around zero, no offset (default: min-offset)");
    cmd->add_option("--group-size", opts->group_size,
                    "weights of a row sharing one scale (a multiple of 32 for q4_0/q4_1/q8_0)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    add_quantize_method_knobs(*cmd, *opts);
    cmd->add_option("-t,--threads", opts->threads, "CPU threads (0 = all cores)")
        ->check(CLI::Range(0, 4096))
        ->capture_default_str();
    opts->output.add_to(*cmd, "print the report as one JSON object");
    cmd->callback([opts] { run_quantize(*opts); });
}

}  // namespace servelab::cli
