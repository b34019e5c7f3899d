// quantize_model.cpp — see quantize_model.h.
#include "reference/quant/quantize_model.h"

#include <fmt/format.h>
#include <cstddef>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"
#include "reference/model/model.h"
#include "reference/quant/block_packing.h"

namespace servelab {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<float> tensor_as_floats(const GgufTensorInfo& info) {
    std::vector<float> values(size_t(info.num_elements()));
    const int64_t row_bytes = row_size_bytes(info.type, info.row_length());
    for (int64_t r = 0; r < info.num_rows(); ++r) {
        dequantize_row(info.type, info.data + r * row_bytes, values.data() + r * info.row_length(),
                       info.row_length());
    }
    return values;
}

LayerMatrix load_matrix(const GgufFile& file, const std::string& name) {
    const GgufTensorInfo* info = file.find_tensor(name);
    if (info == nullptr || info->dims.size() != 2) {
        throw Error(fmt::format("quantize: the source has no matrix '{}'", name));
    }
    return LayerMatrix{name, info->dims[1], info->dims[0], tensor_as_floats(*info), {}, {}};
}

QuantLayer load_layer(const GgufFile& file, int64_t index) {
    const std::string p = fmt::format("blk.{}.", index);
    QuantLayer layer{load_matrix(file, p + "attn_q.weight"),
                     load_matrix(file, p + "attn_k.weight"),
                     load_matrix(file, p + "attn_v.weight"),
                     load_matrix(file, p + "attn_output.weight"),
                     load_matrix(file, p + "ffn_gate.weight"),
                     load_matrix(file, p + "ffn_up.weight"),
                     load_matrix(file, p + "ffn_down.weight"),
                     {},
                     {},
                     p + "attn_norm.weight",
                     p + "ffn_norm.weight"};
    layer.attn_norm = tensor_as_floats(*file.find_tensor(layer.attn_norm_name));
    layer.ffn_norm = tensor_as_floats(*file.find_tensor(layer.ffn_norm_name));
    return layer;
}

std::vector<uint8_t> float_bytes(const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

uint32_t llama_file_type(GgmlType type) {
    switch (type) {  // llama.cpp's LLAMA_FTYPE_MOSTLY_* numbers
        case GgmlType::kQ4_0:
            return 2;
        case GgmlType::kQ4_1:
            return 3;
        case GgmlType::kQ8_0:
            return 7;
        default:
            return 1;  // F16
    }
}

void check_options(const ModelConfig& config, const QuantizeOptions& options) {
    if (config.is_mla() || config.architecture != "llama") {
        throw Error(fmt::format("quantize: only llama-architecture models, not '{}'{}",
                                config.architecture, config.is_mla() ? " (MLA)" : ""));
    }
    const QuantScheme& scheme = options.scheme;
    if (scheme.bits < 2 || scheme.bits > 8) {
        throw Error(fmt::format("quantize: {} bits; the grids have 2 to 8", scheme.bits));
    }
    if (scheme.group_size < 1) {
        throw Error(fmt::format("quantize: a group size of {}", scheme.group_size));
    }
    if (const std::string why = why_type_cannot_store(options.output_type, scheme); !why.empty()) {
        throw Error("quantize: " + why);
    }
    for (const int64_t cols : {config.dim, config.q_dim(), config.ffn_dim}) {
        if (options.output_type != GgmlType::kF16 && cols % 32 != 0) {
            throw Error(
                fmt::format("quantize: rows of {} weights are not whole 32-weight blocks", cols));
        }
    }
    if (options.method != QuantMethod::kRtn && options.calibration.text_path.empty()) {
        throw Error(fmt::format("quantize: {} needs calibration text (--calibration FILE)",
                                quant_method_name(options.method)));
    }
    if (options.awq_grid < 1) throw Error("quantize: the AWQ grid needs at least one point");
    if (!(options.gptq.damping > 0.0)) throw Error("quantize: GPTQ damping must be > 0");
}

// Before minutes of work, not after: can the output be created where asked?
void check_writable(const std::string& output_path) {
    const std::string probe = output_path + ".partial";
    if (!std::ofstream(probe, std::ios::binary)) {
        throw Error(fmt::format("cannot write '{}': {}", output_path, std::strerror(errno)));
    }
    std::error_code ignored;
    std::filesystem::remove(probe, ignored);
}

}  // namespace

QuantizeReport quantize_model(const std::string& source_path, const std::string& output_path,
                              const QuantizeOptions& options, const QuantizeProgress& progress) {
    Model model = Model::load(source_path);
    const ModelConfig& config = model.config;
    check_options(config, options);
    check_writable(output_path);
    QuantizeReport report;
    report.bits_per_weight = bits_per_weight(options.scheme);

    std::optional<CalibrationStatistics> stats;
    if (options.method != QuantMethod::kRtn) {
        const auto start = Clock::now();
        stats = collect_calibration_statistics(model, options.calibration,
                                               [&](int64_t done, int64_t total) {
                                                   if (progress)
                                                       progress("calibration", done, total);
                                               });
        report.calibration_seconds = seconds_since(start);
    }

    // Every layer's new tensors, by name; written in the source's tensor order.
    const auto quantize_start = Clock::now();
    const GgufFile& file = model.file;
    std::map<std::string, std::pair<GgmlType, std::vector<uint8_t>>> replaced;
    for (int64_t index = 0; index < config.num_layers; ++index) {
        QuantLayer layer = load_layer(file, index);
        quantize_layer(layer, index, config, stats ? &*stats : nullptr, options, report.errors);
        for (const LayerMatrix* m :
             {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up, &layer.down}) {
            replaced[m->name] = {
                options.output_type,
                pack_quantized_rows(options.output_type, m->values.data(), m->params.data(),
                                    m->rows, m->cols, options.scheme)};
            report.quantized_weights += m->rows * m->cols;
        }
        replaced[layer.attn_norm_name] = {GgmlType::kF32, float_bytes(layer.attn_norm)};
        replaced[layer.ffn_norm_name] = {GgmlType::kF32, float_bytes(layer.ffn_norm)};
        if (progress) progress(quant_method_name(options.method), index + 1, config.num_layers);
    }
    report.quantize_seconds = seconds_since(quantize_start);

    const auto write_start = Clock::now();
    GgufWriter writer(file.alignment());
    for (const auto& [key, value] : file.metadata()) {
        if (key == "general.file_type" || key == "general.alignment" ||
            key == "general.quantized_by") {
            continue;  // rewritten below (the alignment by the writer itself)
        }
        writer.add_value(key, value);
    }
    writer.add_uint32("general.file_type", llama_file_type(options.output_type));
    writer.add_string("general.quantized_by",
                      fmt::format("servelab quantize --method {} ({}-bit {}, groups of {})",
                                  quant_method_name(options.method), options.scheme.bits,
                                  options.scheme.symmetric ? "symmetric" : "asymmetric",
                                  options.scheme.group_size));
    for (const GgufTensorInfo& info : file.tensors()) {
        auto found = replaced.find(info.name);
        if (found != replaced.end()) {
            writer.add_tensor(info.name, info.dims, found->second.first,
                              std::move(found->second.second));
        } else {
            writer.add_tensor(info.name, info.dims, info.type,
                              std::vector<uint8_t>(info.data, info.data + info.size_bytes));
        }
    }
    const std::string partial = output_path + ".partial";
    writer.write_file(partial);
    std::error_code error;
    std::filesystem::rename(partial, output_path, error);
    if (error) {
        std::filesystem::remove(partial, error);
        throw Error(fmt::format("cannot write '{}': {}", output_path, error.message()));
    }
    report.write_seconds = seconds_since(write_start);
    report.file_bytes = int64_t(std::filesystem::file_size(output_path));
    return report;
}

}  // namespace servelab
