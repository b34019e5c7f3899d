// quant_block.cuh — one Q4_0 / Q4_1 / Q8_0 block of the device layout, decoded in registers.
//
// Part of the CUDA backend (issue 48, quantized weights on the GPU). Device
// code shared by the plain GEMV (quant_gemv.cu) and the dequantize-to-bf16
// kernel (quant_dequantize.cu); the layout is quant_layout.h's. The
// arithmetic is the CPU dequantizer's, operation for operation, with
// __fmul_rn / __fadd_rn so that nvcc cannot fuse d·q + m into one FMA:
// the weights come out bit-identical to kernels/cpu/dequantize.cpp's, and a
// test may compare them exactly.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cpu/ggml_types.h"
#include "kernels/cuda/quant_layout.h"

namespace servelab::cuda {

__device__ inline float half_bits_to_float(uint16_t bits) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
}

// The 32 weights of block `block` (counted over the whole matrix, row by
// row) into w[0..31]. Codes arrive in 16-byte loads (quant_layout.h aligns them).
template <GgmlType kType>
__device__ inline void decode_quant_block(const QuantMatrixView& m, int64_t block, float w[32]) {
    constexpr int kHalves = kType == GgmlType::kQ4_1 ? 2 : 1;
    const float d = half_bits_to_float(m.scales[block * kHalves]);
    if constexpr (kType == GgmlType::kQ8_0) {
        const uint4* codes = reinterpret_cast<const uint4*>(m.codes + block * 32);
        const uint4 parts[2] = {codes[0], codes[1]};
        const int8_t* q = reinterpret_cast<const int8_t*>(parts);
#pragma unroll
        for (int i = 0; i < 32; ++i) w[i] = __fmul_rn(float(q[i]), d);
    } else {
        const uint4 packed = *reinterpret_cast<const uint4*>(m.codes + block * 16);
        const uint8_t* q = reinterpret_cast<const uint8_t*>(&packed);
        // Byte j: weight j in the low nibble, weight j + 16 in the high one.
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            if constexpr (kType == GgmlType::kQ4_0) {
                w[j] = __fmul_rn(d, float(int(q[j] & 0x0F) - 8));
                w[j + 16] = __fmul_rn(d, float(int(q[j] >> 4) - 8));
            } else {
                const float offset = half_bits_to_float(m.scales[block * 2 + 1]);
                w[j] = __fadd_rn(__fmul_rn(d, float(q[j] & 0x0F)), offset);
                w[j + 16] = __fadd_rn(__fmul_rn(d, float(q[j] >> 4)), offset);
            }
        }
    }
}

}  // namespace servelab::cuda
