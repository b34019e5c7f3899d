// calibration.cpp — see calibration.h.
#include "reference/quant/calibration.h"

#include <fmt/format.h>
#include <cstddef>

#include <cmath>
#include <fstream>
#include <iterator>

#include "kernels/common/error.h"
#include "kernels/cpu/matmul.h"
#include "reference/engine/model_runner.h"
#include "reference/model/model.h"

namespace servelab {

void InputStatistics::add(const float* rows, int64_t num_rows, int64_t row_cols) {
    if (cols == 0) {
        cols = row_cols;
        sum_abs.assign(size_t(cols), 0.0);
        sum_outer.assign(size_t(cols * cols), 0.0);
    }
    if (row_cols != cols) {
        throw Error(fmt::format("calibration: rows of {} values after rows of {}", row_cols, cols));
    }
    // Σ xᵀx over these rows is Xᵀ·X: one matmul of Xᵀ with itself (y = a·bᵀ with a = b = Xᵀ).
    // matmul_plain, not the tiled matmul: its sums run in one fixed order on
    // every CPU, while the tiled one splits them into as many partial sums as
    // the machine's vector width. GPTQ rounds straight from this matrix's
    // inverse, so a last-bit difference changes the file `servelab quantize`
    // writes; with the plain loops the same input gives the same bytes on an
    // AVX2 and an AVX-512 machine (the goldens are keyed by those bytes).
    std::vector<float> transposed(size_t(cols * num_rows));
    for (int64_t t = 0; t < num_rows; ++t) {
        for (int64_t j = 0; j < cols; ++j) {
            transposed[size_t(j * num_rows + t)] = rows[t * cols + j];
            sum_abs[size_t(j)] += std::fabs(rows[t * cols + j]);
        }
    }
    std::vector<float> outer(size_t(cols * cols));
    matmul_plain(transposed.data(), transposed.data(), outer.data(), cols, num_rows, cols);
    for (size_t k = 0; k < outer.size(); ++k) sum_outer[k] += outer[k];
    num_tokens += num_rows;
}

std::vector<float> InputStatistics::mean_abs() const {
    std::vector<float> mean(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) mean[size_t(j)] = float(sum_abs[size_t(j)] / num_tokens);
    return mean;
}

std::vector<float> InputStatistics::hessian() const {
    std::vector<float> h(sum_outer.size());
    for (size_t k = 0; k < h.size(); ++k) h[k] = float(sum_outer[k] / double(num_tokens));
    return h;
}

void CalibrationStatistics::observe(int64_t layer, LinearInput input, const float* rows,
                                    int64_t num_tokens, int64_t cols) {
    layers_.at(size_t(layer))[size_t(input)].add(rows, num_tokens, cols);
}

CalibrationStatistics collect_calibration_statistics(
    Model& model, const CalibrationOptions& options,
    const std::function<void(int64_t, int64_t)>& progress) {
    std::ifstream file(options.text_path, std::ios::binary);
    if (!file) throw Error(fmt::format("calibration: cannot read '{}'", options.text_path));
    const std::string text(std::istreambuf_iterator<char>(file), {});
    const std::vector<TokenId> tokens = model.tokenizer.encode(text, false);
    const int64_t needed = options.num_sequences * options.tokens_per_sequence;
    if (options.num_sequences <= 0 || options.tokens_per_sequence <= 1) {
        throw Error("calibration: need at least one sequence of at least two tokens");
    }
    if (int64_t(tokens.size()) < needed) {
        throw Error(fmt::format("calibration: '{}' has {} tokens; {} sequences of {} need {}",
                                options.text_path, tokens.size(), options.num_sequences,
                                options.tokens_per_sequence, needed));
    }
    if (options.tokens_per_sequence > model.config.context_length) {
        throw Error(fmt::format("calibration: sequences of {} tokens exceed the context of {}",
                                options.tokens_per_sequence, model.config.context_length));
    }
    model.weights.set_matmul_mode(MatmulMode::kExact);
    CalibrationStatistics statistics(model.config.num_layers);
    ModelRunner runner(model.config, model.weights);
    runner.set_activation_observer(&statistics);
    for (int64_t s = 0; s < options.num_sequences; ++s) {
        const auto first = tokens.begin() + s * options.tokens_per_sequence;
        const std::vector<TokenId> sequence(first, first + options.tokens_per_sequence);
        runner.forward({sequence, 0, LogitsFor::kLastToken});
        if (progress) progress(s + 1, options.num_sequences);
    }
    return statistics;
}

}  // namespace servelab
