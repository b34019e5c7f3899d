// quant_dequantize.h — Q4_0 / Q4_1 / Q8_0 device blocks to a bf16 matrix, for cuBLAS.
//
// Part of the CUDA backend (issue 48, quantized weights on the GPU). Past
// 8 tokens a step is no longer a GEMV (quant_gemv.h): each weight is used
// by many tokens, so the tensor cores' GEMM wins, and cuBLAS takes bf16.
// This kernel decodes a whole matrix into a bf16 scratch matrix that
// gemm_bf16 then reads. It moves 0.56–1.06 bytes per weight in and 2 out,
// then the GEMM reads the 2 again: about 2.3x the bytes of a bf16 matrix
// read once. Negligible beside a prefill's FLOPs; for large decode batches
// (64–256 sequences) it is the price of keeping the weights 3.2x smaller,
// and tiles decoded inside a GEMM of our own would avoid it (not built).
//
// One thread per block of 32 weights: a 16-byte load of its codes (two for
// Q8_0), its scales, the CPU dequantizer's arithmetic (quant_block.cuh, so
// the fp32 values are bit-identical to it), four 16-byte stores of bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quant_layout.h"

namespace servelab::cuda {

// out (w.rows, w.cols) bf16, row-major = every weight of w, rounded to bf16.
// out must be 16-byte aligned (cudaMalloc's are).
void dequantize_to_bf16(const QuantMatrixView& w, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace servelab::cuda
