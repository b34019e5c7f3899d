// quantize_model.h — `servelab quantize`: a GGUF in, a quantized GGUF out, by RTN, AWQ or GPTQ.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ and AWQ; 11.8,
// quantization under both throughput and cost). The source's weights are
// dequantized to fp32 and re-quantized layer by layer (quantize_layer.h:
// RTN, AWQ or GPTQ), after one pass of calibration text through the
// source model for AWQ and GPTQ (calibration.h). The seven projections of
// each layer are quantized; the embedding table (which is also SmolLM2's
// output head), the norms and every metadata key, the tokenizer among
// them, are copied, so llama.cpp reads the result as it reads any GGUF.
// For SmolLM2 the "full precision" source is itself the Q4_1 file
// dequantized: what is measured is the loss of re-quantizing those
// weights, not of quantizing a model trained in fp16.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/quant/quantize_layer.h"

namespace servelab {

struct QuantizeReport {
    double calibration_seconds = 0.0;
    double quantize_seconds = 0.0;
    double write_seconds = 0.0;
    int64_t file_bytes = 0;
    int64_t quantized_weights = 0;   // weights of the projections re-quantized
    double bits_per_weight = 0.0;    // of the method's grid (group_quantizer.h)
    std::vector<LayerError> errors;  // awq and gptq
};

// Progress: (what, done, total), after each calibration sequence and each layer.
using QuantizeProgress = std::function<void(std::string_view, int64_t, int64_t)>;

// Throws servelab::Error for an option the output type cannot store, a
// model that is not a llama-family dense model, missing calibration data,
// or an I/O failure. The output is written to a temporary name and renamed,
// so a failed run leaves no half-written model behind.
QuantizeReport quantize_model(const std::string& source_path, const std::string& output_path,
                              const QuantizeOptions& options,
                              const QuantizeProgress& progress = {});

}  // namespace servelab
