// block_packing.h — quantized weights as the bytes of a GGUF tensor.
//
// Part of Lab 10, weight quantization. The methods produce, per weight
// matrix, the values their codes stand for and each group's parameters
// (group_quantizer.h). A GGUF file stores 32-weight blocks:
//   Q4_0  fp16 d, 16 bytes of 4-bit codes (q + 8)        4.5 bits per weight
//   Q4_1  fp16 d, fp16 m, 16 bytes of 4-bit codes          5.0 bits per weight
//   Q8_0  fp16 d, 32 int8 codes                            8.5 bits per weight
// (low nibbles hold a block's weights 0..15, high nibbles 16..31). A group
// of 64 or 128 stores its parameters again in each of its blocks, so the
// file is the same size at any group size; only a format with one scale
// per group (as GPTQ and AWQ kernels use) would save the difference, which
// bits_per_weight counts. Grids llama.cpp has no kernel for (2 or 3 bits, or
// a group of other than a multiple of 32) are written as F16 values: a
// fake-quantized file, right for measuring quality and no smaller or faster.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/ggml_types.h"
#include "reference/quant/group_quantizer.h"

namespace servelab {

// Whether `type` stores `scheme` exactly: Q4_0 = 4 bits symmetric, Q4_1 =
// 4 bits asymmetric, Q8_0 = 8 bits symmetric, each with a group size that is
// a multiple of 32; F16 stores any (fake quantization). The empty string
// when it does, else why not.
std::string why_type_cannot_store(GgmlType type, const QuantScheme& scheme);

// The tensor bytes of values (rows, cols) whose groups have `params`
// (rows, cols / group_size). Throws servelab::Error when the type cannot
// store the scheme, or when a value is not on its group's grid.
std::vector<uint8_t> pack_quantized_rows(GgmlType type, const float* values,
                                         const GroupParams* params, int64_t rows, int64_t cols,
                                         const QuantScheme& scheme);

}  // namespace servelab
