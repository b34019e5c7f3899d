// quantize_layer.cpp — see quantize_layer.h.
#include "reference/quant/quantize_layer.h"

#include <fmt/format.h>

#include <cstddef>

#include "kernels/common/error.h"
#include "reference/quant/awq_folding.h"
#include "reference/quant/awq_search.h"
#include "reference/quant/output_error.h"

namespace servelab {
namespace {

// The rows of several matrices that read the same input, one under another.
std::vector<float> stacked(std::initializer_list<const LayerMatrix*> parts) {
    std::vector<float> all;
    for (const LayerMatrix* m : parts) all.insert(all.end(), m->weights.begin(), m->weights.end());
    return all;
}

// Hands the rows of a stacked result back to the matrices they came from.
void unstack(std::initializer_list<LayerMatrix*> parts, const std::vector<float>& values,
             const std::vector<GroupParams>& params, const QuantScheme& scheme) {
    int64_t row = 0;
    for (LayerMatrix* m : parts) {
        const int64_t groups = scheme.num_groups(m->cols);
        m->values.assign(values.begin() + row * m->cols,
                         values.begin() + (row + m->rows) * m->cols);
        m->params.assign(params.begin() + row * groups, params.begin() + (row + m->rows) * groups);
        row += m->rows;
    }
}

void quantize_rtn(std::initializer_list<LayerMatrix*> parts, const QuantScheme& scheme) {
    for (LayerMatrix* m : parts) {
        m->values.resize(m->weights.size());
        m->params.resize(size_t(m->rows * scheme.num_groups(m->cols)));
        rtn_quantize_matrix(m->weights.data(), m->values.data(), m->params.data(), m->rows, m->cols,
                            scheme);
    }
}

double rtn_error(const std::vector<float>& weights, int64_t rows, int64_t cols,
                 const std::vector<float>& hessian, const QuantScheme& scheme) {
    std::vector<float> delta(weights.size());
    rtn_quantize_matrix(weights.data(), delta.data(), nullptr, rows, cols, scheme);
    for (size_t k = 0; k < delta.size(); ++k) delta[k] = weights[k] - delta[k];
    return output_error(delta.data(), rows, cols, hessian.data());
}

// AWQ: search the four groups' scales in the order the layer computes them,
// fold each, then RTN of everything.
void quantize_layer_awq(QuantLayer& l, int64_t index, const ModelConfig& config,
                        const CalibrationStatistics& stats, const QuantizeOptions& options,
                        std::vector<LayerError>& errors) {
    const QuantScheme& scheme = options.scheme;
    auto search = [&](const std::vector<float>& w, int64_t rows, int64_t cols, LinearInput input,
                      const std::vector<float>& mean_abs) {
        const InputStatistics& s = stats.of(index, input);
        const std::vector<float> hessian = s.hessian();
        AwqScales found = awq_search_scales(w.data(), rows, cols, mean_abs.data(), hessian.data(),
                                            scheme, options.awq_grid);
        errors.push_back({index, input, found.rtn_output_error, found.output_error, found.alpha});
        return found.scales;
    };
    const int64_t dim = config.dim;

    const int64_t qkv_rows = l.q.rows + l.k.rows + l.v.rows;
    const std::vector<float> s_qkv =
        search(stacked({&l.q, &l.k, &l.v}), qkv_rows, dim, LinearInput::kAttentionIn,
               stats.of(index, LinearInput::kAttentionIn).mean_abs());
    for (LayerMatrix* m : {&l.q, &l.k, &l.v})
        scale_columns(m->weights, m->rows, m->cols, s_qkv.data());
    divide_elements(l.attn_norm, s_qkv.data());

    const std::vector<float> tied =
        tie_scales_to_kv_heads(stats.of(index, LinearInput::kAttentionOut).mean_abs(),
                               config.num_heads, config.num_kv_heads, config.head_dim);
    const std::vector<float> s_o =
        search(l.o.weights, l.o.rows, l.o.cols, LinearInput::kAttentionOut, tied);
    scale_columns(l.o.weights, l.o.rows, l.o.cols, s_o.data());
    const std::vector<float> s_v =
        kv_head_scales(s_o, config.num_heads, config.num_kv_heads, config.head_dim);
    divide_rows(l.v.weights, l.v.rows, l.v.cols, s_v.data());

    const std::vector<float> s_gate_up =
        search(stacked({&l.gate, &l.up}), l.gate.rows + l.up.rows, dim, LinearInput::kMlpIn,
               stats.of(index, LinearInput::kMlpIn).mean_abs());
    for (LayerMatrix* m : {&l.gate, &l.up}) {
        scale_columns(m->weights, m->rows, m->cols, s_gate_up.data());
    }
    divide_elements(l.ffn_norm, s_gate_up.data());

    const std::vector<float> s_down =
        search(l.down.weights, l.down.rows, l.down.cols, LinearInput::kMlpHidden,
               stats.of(index, LinearInput::kMlpHidden).mean_abs());
    scale_columns(l.down.weights, l.down.rows, l.down.cols, s_down.data());
    divide_rows(l.up.weights, l.up.rows, l.up.cols, s_down.data());

    quantize_rtn({&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}, scheme);
}

// GPTQ: one run per group of projections that share an input (and so a Hessian).
void quantize_layer_gptq(QuantLayer& l, int64_t index, const CalibrationStatistics& stats,
                         const QuantizeOptions& options, std::vector<LayerError>& errors) {
    const QuantScheme& scheme = options.scheme;
    auto run = [&](std::initializer_list<LayerMatrix*> parts, LinearInput input) {
        std::vector<float> w;
        int64_t rows = 0;
        for (LayerMatrix* m : parts) {
            w.insert(w.end(), m->weights.begin(), m->weights.end());
            rows += m->rows;
        }
        const int64_t cols = (*parts.begin())->cols;
        const std::vector<float> hessian = stats.of(index, input).hessian();
        GptqResult result =
            gptq_quantize_matrix(w.data(), rows, cols, hessian.data(), scheme, options.gptq);
        std::vector<float> delta(w.size());
        for (size_t k = 0; k < w.size(); ++k) delta[k] = w[k] - result.values[k];
        errors.push_back({index, input, rtn_error(w, rows, cols, hessian, scheme),
                          output_error(delta.data(), rows, cols, hessian.data()), 0.0});
        unstack(parts, result.values, result.params, scheme);
    };
    run({&l.q, &l.k, &l.v}, LinearInput::kAttentionIn);
    run({&l.o}, LinearInput::kAttentionOut);
    run({&l.gate, &l.up}, LinearInput::kMlpIn);
    run({&l.down}, LinearInput::kMlpHidden);
}

}  // namespace

QuantMethod parse_quant_method(std::string_view name) {
    if (name == "rtn") return QuantMethod::kRtn;
    if (name == "awq") return QuantMethod::kAwq;
    if (name == "gptq") return QuantMethod::kGptq;
    throw Error(fmt::format("unknown quantization method '{}' (rtn, awq, gptq)", name));
}

std::string_view quant_method_name(QuantMethod method) {
    switch (method) {
        case QuantMethod::kRtn:
            return "rtn";
        case QuantMethod::kAwq:
            return "awq";
        case QuantMethod::kGptq:
            return "gptq";
    }
    return "?";
}

void quantize_layer(QuantLayer& layer, int64_t index, const ModelConfig& config,
                    const CalibrationStatistics* stats, const QuantizeOptions& options,
                    std::vector<LayerError>& errors) {
    if (options.method != QuantMethod::kRtn && stats == nullptr) {
        throw Error(fmt::format("quantize: {} needs calibration statistics",
                                quant_method_name(options.method)));
    }
    switch (options.method) {
        case QuantMethod::kRtn:
            quantize_rtn(
                {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up, &layer.down},
                options.scheme);
            break;
        case QuantMethod::kAwq:
            quantize_layer_awq(layer, index, config, *stats, options, errors);
            break;
        case QuantMethod::kGptq:
            quantize_layer_gptq(layer, index, *stats, options, errors);
            break;
    }
}

}  // namespace servelab
