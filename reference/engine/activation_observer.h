// activation_observer.h — a window onto the inputs of every linear layer of a forward pass.
//
// Part of the engine, used by Lab 10's calibration (chapter 11.7, GPTQ and
// AWQ: both quantize a layer knowing what its inputs look like on real
// text; reference/quant/calibration.h). A ModelRunner given an observer
// (ModelRunner::set_activation_observer) shows it, layer by layer, the fp32
// rows each group of projections reads. It only looks: the pass computes
// the same logits with or without one. Observing needs the fp32 rows, so it
// needs exact matmul mode (weight_matrix.h), where they always exist.
#pragma once

#include <cstdint>
#include <string_view>

namespace servelab {

// Which projections read the rows.
enum class LinearInput {
    kAttentionIn,   // rmsnorm(x): read by wq, wk, wv
    kAttentionOut,  // the heads' outputs, concatenated: read by wo
    kMlpIn,         // rmsnorm(x): read by w_gate, w_up
    kMlpHidden,     // silu(gate) · up: read by w_down
};
inline constexpr int kNumLinearInputs = 4;

std::string_view linear_input_name(LinearInput input);

class ActivationObserver {
  public:
    virtual ~ActivationObserver() = default;
    // rows: (num_tokens, cols) row-major, valid during the call only.
    virtual void observe(int64_t layer, LinearInput input, const float* rows, int64_t num_tokens,
                         int64_t cols) = 0;
};

}  // namespace servelab
