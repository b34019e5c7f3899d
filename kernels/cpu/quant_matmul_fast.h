// quant_matmul_fast.h — fast mode: activations quantized to int8 too.
//
// CPU kernel (issue 11; the kernels lab's last step). quant_matmul keeps the
// activations fp32, so every weight code is converted to float before it is
// multiplied: about 14 cycles per 32-weight Q4_1 block on the 2-core
// machine, which makes batch-1 decode compute-bound at half the memory
// bandwidth. Quantizing each 32-value block of the activations to int8 (a
// scale d_x = max|x| / 127 and codes c = round(x / d_x), as llama.cpp's Q8_1)
// lets one AVX2 instruction (maddubs) multiply 32 weight codes by 32
// activation codes and add them in pairs:
//   Σ w·x ≈ d·d_x·Σ q·c + m·(d_x·Σ c)      (Q4_1; Q4_0: m = −8d; Q8_0: m = 0)
// The cost is the activations' rounding error, at most d_x / 2 per value;
// docs/perf.md measures what it does to the golden prompts' logits.
//
// Kernels, chosen at run time by what the CPU has: AVX2 (maddubs + madd),
// AVX-VNNI (dpbusd: both in one instruction) in tiles of 4 rows × 2 tokens,
// AVX-512 VNNI (two blocks per instruction, 4 rows × 4 tokens) for steps of
// 4 tokens or more, and portable loops everywhere else (ARM64 today). These
// read the GGUF layout; with AVX-512 VNNI the engine repacks its weights
// and uses kernels/cpu/quant_matmul_repacked.h instead, with the same
// quantized activations.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/quant_matmul.h"

namespace servelab {

// num_tokens × (cols / 32) blocks of int8 activations. Reused across calls:
// quantize_activations only grows the buffers, so steady decoding allocates
// nothing.
struct QuantizedActivations {
    int64_t num_tokens = 0;
    int64_t cols = 0;
    std::vector<int8_t> codes;       // num_tokens × cols
    std::vector<float> scales;       // d_x, one per block
    std::vector<float> scaled_sums;  // d_x · Σ c, one per block (the offset term)
};

// x: (num_tokens, cols), cols a multiple of 32.
void quantize_activations(const float* x, int64_t num_tokens, int64_t cols,
                          QuantizedActivations& out);

// Sizes `out` for num_tokens × cols (cols a multiple of 32; buffers only grow).
void resize_activations(QuantizedActivations& out, int64_t num_tokens, int64_t cols);
// One block of 32 values → its codes, d_x and d_x·Σc, exactly as
// quantize_activations does it: for fused kernels that quantize values they
// have just produced (kernels/cpu/fused_rmsnorm_quantize.h).
void quantize_activation_block(const float* values, int8_t* codes, float* scale, float* scaled_sum);

// Whether quant_matmul_fast has an integer kernel for `type` (Q4_0, Q4_1, Q8_0).
bool has_fast_kernel(GgmlType type);

// y (num_tokens, w.rows) = dequantized activations · Wᵀ.
void quant_matmul_fast(const QuantizedActivations& x, const QuantMatrix& w, float* y,
                       QuantKernels kernels = QuantKernels::kBest);

}  // namespace servelab
