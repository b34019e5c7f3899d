// calibration.h — what the inputs of every linear layer look like on real text.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ and AWQ). Both
// methods quantize a layer knowing its inputs. Neither needs the inputs
// themselves, only two statistics per group of projections that read the
// same rows (activation_observer.h):
//   mean |x_j|         per input channel: AWQ's saliency (awq_search.h)
//   H = (1/n) Σ xᵀx    the second moment: the output error of any weight
//                      change (output_error.h), GPTQ's Hessian (gptq.h)
// They are gathered in one pass of the unquantized model, in exact mode,
// over sequences cut from a calibration text (data/text/, data/README.md).
// Every layer sees the source model's activations, not those of the
// already quantized layers before it, as the GPTQ paper's sequential scheme
// feeds it: one calibration pass instead of one per layer, at the price of
// not letting a layer correct for the errors of the ones before it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/engine/activation_observer.h"

namespace servelab {

struct Model;

// The statistics of the rows one group of projections read.
struct InputStatistics {
    int64_t cols = 0;
    int64_t num_tokens = 0;
    std::vector<double> sum_abs;    // (cols) Σ |x_j|
    std::vector<double> sum_outer;  // (cols, cols) Σ xᵀx

    void add(const float* rows, int64_t num_rows, int64_t row_cols);
    std::vector<float> mean_abs() const;  // (cols)
    std::vector<float> hessian() const;   // (cols, cols) (1/n) Σ xᵀx
};

class CalibrationStatistics : public ActivationObserver {
  public:
    explicit CalibrationStatistics(int64_t num_layers) : layers_(size_t(num_layers)) {}
    void observe(int64_t layer, LinearInput input, const float* rows, int64_t num_tokens,
                 int64_t cols) override;
    const InputStatistics& of(int64_t layer, LinearInput input) const {
        return layers_.at(size_t(layer))[size_t(input)];
    }
    int64_t num_layers() const { return int64_t(layers_.size()); }

  private:
    std::vector<std::array<InputStatistics, kNumLinearInputs>> layers_;
};

struct CalibrationOptions {
    std::string text_path;       // plain UTF-8 text
    int64_t num_sequences = 32;  // sequences run through the model
    int64_t tokens_per_sequence = 256;
};

// Tokenizes the text, cuts num_sequences consecutive sequences from its
// start and runs each through `model` (which is switched to exact matmul
// mode) with the statistics observing. `progress(done, total)` after each.
// Throws servelab::Error when the text is too short.
CalibrationStatistics collect_calibration_statistics(
    Model& model, const CalibrationOptions& options,
    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace servelab
