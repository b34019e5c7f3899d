// gemv_steps.h — the quantized GEMV of one decode token, optimized step by step.
//
// Lab 8 (the kernels lab; issue 11: decode is memory-bound, the roofline).
// Every decode step multiplies each weight matrix by one activation vector:
//
//     y[r] = Σ_c W[r][c] · x[c]        W: (rows, cols) in Q4_1, x: (cols) fp32
//
// A Q4_1 block holds 32 weights in 20 bytes (fp16 d, fp16 m, 16 bytes of
// 4-bit codes q; w = d·q + m), so each weight costs 0.625 bytes and 2 flops:
// about 3.2 flop/byte, far below what a CPU computes per byte it can read.
// A good kernel therefore runs at the machine's memory bandwidth, and the
// steps below are the road from a scalar loop to there. Each step computes
// the same y (up to float summation order) as quant_matmul_plain; the
// production kernel the lab is graded against is quant_matmul.
//
//   step 0  scalar     decode a block into 32 floats, then a dot product (given)
//   step 1  unrolled   four rows per pass with independent accumulators; the
//                      block algebra Σ w·x = d·Σ q·x + m·Σ x
//   step 2  threads    step 1's passes split over OpenMP threads
//   step 3  SIMD       one thread, AVX2+FMA: a block is four vectors of 8 lanes
//   step 4  blocked    all together: each thread streams one contiguous chunk
//                      of rows, four rows per pass share every x load and Σ x
//
// Steps 3 and 4 use AVX2+FMA where the CPU has it (checked at run time, as
// quant_matmul does) and fall back to steps 1 and 2 elsewhere (ARM64 today).
// All steps take one token; w.type must be Q4_1 (else servelab::Error).
// x: (w.cols) floats, y: (w.rows) floats; y must not alias x.
#pragma once

#include "kernels/cpu/quant_matmul.h"

namespace servelab {

void gemv_step0_scalar(const float* x, const QuantMatrix& w, float* y);
void gemv_step1_unrolled(const float* x, const QuantMatrix& w, float* y);
void gemv_step2_threads(const float* x, const QuantMatrix& w, float* y);
void gemv_step3_simd(const float* x, const QuantMatrix& w, float* y);
void gemv_step4_blocked(const float* x, const QuantMatrix& w, float* y);

}  // namespace servelab
