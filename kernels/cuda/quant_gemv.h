// quant_gemv.h — y = x · Wᵀ for decode batches of 1 to 8 tokens, reading Q4_0 / Q4_1 / Q8_0 blocks.
//
// Part of the CUDA backend (issue 48, quantized weights on the GPU; chapter
// 11.7 on a GPU, and Lab 8's GPU track). The contract of gemm.h: x is
// (num_tokens, cols), W (rows, cols) in quant_layout.h's device layout, y
// (num_tokens, rows), row-major. A decode step multiplies a handful of
// token rows by every weight once, so it is bound by the bytes of W it
// reads: a Q4_1 weight is 0.625 bytes against bf16's 2, so reading the
// blocks themselves is up to 3.2x less traffic than the bf16 copy
// (gemm.h). Two versions, as everywhere in kernels/:
//
// Plain (quant_gemv_plain): one warp per output row; its lanes take the
//   row's blocks in turn (lane i: blocks i, i + 32, …), decode each block
//   to 32 fp32 weights in registers (quant_block.cuh) and multiply them by
//   the bf16 activations in fp32. Every token's dot product is made from
//   the one load of the weights. Simple, exact (the CPU's dequantized
//   weights, fp32 sums), and compute-heavy: 32 conversions and 32 FMAs per
//   block and token, plus 32 bf16 activation loads. At 8 tokens that is
//   more arithmetic than the memory system needs time for.
//
// Fast (quantize_activations_int8 + quant_gemv_fast): the activations are
//   quantized first, once per input (every projection that reads it shares
//   them), to int8 per 32-value block: d_x = max|x| / 127, c = round(x / d_x),
//   and s_x = d_x · Σc kept beside d_x. Then a block's dot product is
//   integer: four-byte dot products (__dp4a, 4 multiply-adds per
//   instruction) of the weight codes against the activation codes, and
//     Σ w·x ≈ d·d_x·Σ q·c + m·s_x        (Q4_1; Q4_0: m = −8d; Q8_0: m = 0),
//   the scheme of kernels/cpu/quant_matmul_fast.h. Per block and token
//   that is 8 dp4a and two 16-byte activation loads instead of 32 FMAs and
//   32 conversions. The bandwidth reasoning:
//   - weights: each lane fetches a block's 16 code bytes (Q8_0: 32) in
//     one 16-byte load (quant_layout.h aligns them), a warp 512 contiguous
//     bytes per load instruction: every 32-byte sector it touches is used
//     whole. The fp16 scales are a second, smaller coalesced stream (2–4
//     bytes per block: 6% of Q8_0's bytes, 11% of Q4_0's, 20% of Q4_1's);
//   - activations: every row reads all of x (as int8: 32 bytes per block
//     and token), from L1/L2, not HBM. At 8 tokens that is 256 bytes of L1
//     traffic per 16 bytes of weights, more than L1 can serve at HBM's
//     rate; so each warp takes several rows (kRows: 1 for ≤ 2 tokens, 2
//     for ≤ 4, 4 beyond) and reuses each activation load for all of them;
//   - enough bytes in flight: a warp has kRows × 512 bytes of weights
//     outstanding per iteration, and the grid has rows / kRows warps; for
//     the 1B and 8B shapes (2048–14336 rows) that fills every SM.
//   Where a row has fewer than 32 blocks (cols < 1024: SmolLM2's 576), some
//   lanes idle; such a model is launch-bound, not bandwidth-bound.
//   The cost is the activations' rounding, at most d_x / 2 per value
//   (tests/unit/cuda_quant_gemv_test.cpp bounds the result by it).
//
// Pointers are device pointers; `stream` may be 0. Launch errors and bad
// shapes throw servelab::Error. Launch-only (CUDA-graph capturable).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quant_layout.h"

namespace servelab::cuda {

constexpr int64_t kQuantGemvMaxTokens = 8;  // larger batches: quant_dequantize.h + cuBLAS

// Activations quantized to int8 per 32-value block: the fast GEMV's input.
struct QuantizedActivationsView {
    int8_t* codes = nullptr;   // (num_tokens, cols), 16-byte aligned
    float2* scales = nullptr;  // (num_tokens, cols / 32): (d_x, d_x · Σ codes)
    int64_t num_tokens = 0;
    int64_t cols = 0;
};

// y (bf16) = x · Wᵀ, fp32 sums; 1 ≤ num_tokens ≤ kQuantGemvMaxTokens.
void quant_gemv_plain(const QuantMatrixView& w, const __nv_bfloat16* x, __nv_bfloat16* y,
                      int64_t num_tokens, cudaStream_t stream);
// The same with fp32 output (the logits).
void quant_gemv_plain_f32_out(const QuantMatrixView& w, const __nv_bfloat16* x, float* y,
                              int64_t num_tokens, cudaStream_t stream);

// out = x (num_tokens, cols; cols a multiple of 32) quantized per block.
// out must have room for num_tokens × cols codes and num_tokens × cols / 32 scales.
void quantize_activations_int8(const __nv_bfloat16* x, const QuantizedActivationsView& out,
                               cudaStream_t stream);

// y (bf16) = x · Wᵀ from quantized activations; x.cols == w.cols,
// 1 ≤ x.num_tokens ≤ kQuantGemvMaxTokens.
void quant_gemv_fast(const QuantMatrixView& w, const QuantizedActivationsView& x, __nv_bfloat16* y,
                     cudaStream_t stream);
void quant_gemv_fast_f32_out(const QuantMatrixView& w, const QuantizedActivationsView& x, float* y,
                             cudaStream_t stream);

}  // namespace servelab::cuda
