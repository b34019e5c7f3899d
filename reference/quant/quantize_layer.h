// quantize_layer.h — one llama layer's seven projections quantized by RTN, AWQ or GPTQ.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ and AWQ). What
// `servelab quantize` does to each layer (quantize_model.h), and what
// `servelab bench quantize` times on one layer:
//   rtn   every projection rounded to nearest in groups (group_quantizer.h)
//   awq   per-input-channel scales searched on calibration statistics
//         (awq_search.h) for each group of projections that reads one input
//         (q, k, v; o; gate, up; down), folded into the op before it
//         (awq_folding.h), then RTN
//   gptq  column by column with error compensation (gptq.h), once per group
//         of projections that reads one input: they share its Hessian
// The layer's weights come in as fp32; out come, per projection, the values
// the codes stand for and each group's parameters, ready to be packed into
// GGUF blocks (block_packing.h), and for AWQ the two norms with the scales
// folded in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/ggml_types.h"
#include "reference/engine/activation_observer.h"
#include "reference/model/model_config.h"
#include "reference/quant/calibration.h"
#include "reference/quant/gptq.h"
#include "reference/quant/group_quantizer.h"

namespace servelab {

enum class QuantMethod { kRtn, kAwq, kGptq };
QuantMethod parse_quant_method(std::string_view name);  // "rtn", "awq", "gptq"
std::string_view quant_method_name(QuantMethod method);

struct QuantizeOptions {
    QuantMethod method = QuantMethod::kRtn;
    GgmlType output_type = GgmlType::kQ4_0;  // Q4_0, Q4_1, Q8_0, or F16 (fake quantization)
    QuantScheme scheme{.bits = 4, .symmetric = true, .group_size = 32};
    CalibrationOptions calibration;  // awq and gptq
    int awq_grid = 20;               // exponents tried: 0, 1/grid, …
    GptqOptions gptq;
};

// A projection being quantized: its weights, then what they became.
struct LayerMatrix {
    std::string name;  // the GGUF tensor name
    int64_t rows = 0;
    int64_t cols = 0;
    std::vector<float> weights;       // (rows, cols): the source's, then scaled by AWQ
    std::vector<float> values;        // (rows, cols): what the quantized codes stand for
    std::vector<GroupParams> params;  // (rows, num_groups(cols))
};

// The seven projections and two norms of one layer.
struct QuantLayer {
    LayerMatrix q, k, v, o, gate, up, down;
    std::vector<float> attn_norm, ffn_norm;  // AWQ divides them by the scales
    std::string attn_norm_name, ffn_norm_name;
};

// Per layer and group of projections: how far each method's weights move the
// outputs over the calibration inputs (output_error.h), RTN's for comparison.
struct LayerError {
    int64_t layer = 0;
    LinearInput input = LinearInput::kAttentionIn;
    double rtn_error = 0.0;
    double method_error = 0.0;
    double awq_alpha = 0.0;  // awq only
};

// Quantizes layer `index` by options.method; `stats` (the calibration
// statistics) is needed by awq and gptq, ignored by rtn. Appends one
// LayerError per input to `errors` (awq and gptq).
void quantize_layer(QuantLayer& layer, int64_t index, const ModelConfig& config,
                    const CalibrationStatistics* stats, const QuantizeOptions& options,
                    std::vector<LayerError>& errors);

}  // namespace servelab
