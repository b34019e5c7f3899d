// quant_layout.h — how Q4_0, Q4_1 and Q8_0 weights lie in GPU memory.
//
// Part of the CUDA backend (issue 48, quantized weights on the GPU; chapter
// 11.7's block formats, on a GPU). A GGUF row is a run of blocks of 32
// weights, each block its fp16 scale d (Q4_1: then its fp16 offset m) and
// its codes (kernels/cpu/ggml_types.h, kernels/cpu/dequantize.cpp):
//   Q4_0: d | 16 bytes of 4-bit codes      18 bytes   w = d·(q − 8)
//   Q4_1: d m | 16 bytes of 4-bit codes    20 bytes   w = d·q + m
//   Q8_0: d | 32 int8 codes                34 bytes   w = d·q
// Those sizes are no multiple of 16, so a GGUF block's codes start at any
// 2-byte boundary and a thread cannot fetch them in one 16-byte load (the
// widest a GPU thread issues, and what a memory-bound kernel wants: fewer
// instructions per byte). The device layout splits each matrix in two
// arrays of the same bytes:
//   codes   (rows, blocks_per_row, code_bytes): each block's codes as GGUF
//           stores them (Q4: byte j holds weight j in its low nibble and
//           weight j + 16 in its high one), 16 or 32 bytes, so every block
//           starts on a 16-byte boundary;
//   scales  (rows, blocks_per_row, scale_halves): each block's fp16 d, and
//           for Q4_1 its m right after (one 4-byte load fetches both).
// No byte is added or dropped: the device holds exactly the file's bytes,
// reordered. Rows are whole blocks (cols a multiple of 32), as GGUF requires.
//
// The packing is host code, run once at load (reference/device/cuda_weights.h),
// and checked against the CPU dequantizer in tests/unit/cuda_quant_layout_test.cpp;
// unpack_quant_matrix is the layout's reference decoder, for those tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ggml_types.h"

namespace servelab::cuda {

constexpr int64_t kQuantBlockElems = 32;  // weights per block, every format here

// Whether `type` has a native device layout (Q4_0, Q4_1, Q8_0).
bool has_native_gpu_layout(GgmlType type);
// Bytes of codes per block: 16 (Q4_0, Q4_1) or 32 (Q8_0).
int64_t quant_code_bytes(GgmlType type);
// fp16 values per block in `scales`: 2 (Q4_1: d, m) or 1 (Q4_0, Q8_0: d).
int64_t quant_scale_halves(GgmlType type);

// One matrix in the device layout, on the host (packed, before upload).
struct PackedQuantMatrix {
    GgmlType type = GgmlType::kQ4_1;
    int64_t rows = 0;
    int64_t cols = 0;
    std::vector<uint8_t> codes;    // rows × cols/32 × quant_code_bytes(type)
    std::vector<uint16_t> scales;  // rows × cols/32 × quant_scale_halves(type), fp16 bits
};

// The device layout of a matrix held as GGUF blocks: `gguf_bytes` points
// at `num_bytes` = rows × row_size_bytes(type, cols) bytes. Throws servelab::Error for a
// type without a device layout, cols not a multiple of 32, or a byte count
// that is not the shape's.
PackedQuantMatrix pack_quant_matrix(GgmlType type, const uint8_t* gguf_bytes, size_t num_bytes,
                                    int64_t rows, int64_t cols);

// Every weight of a packed matrix as fp32 (rows × cols), decoded from the
// device layout alone: the reference the GPU kernels are tested against.
std::vector<float> unpack_quant_matrix(const PackedQuantMatrix& packed);

// A packed matrix as the kernels take it: device pointers and its shape.
// `codes` must be 16-byte aligned and `scales` 4-byte aligned (cudaMalloc's
// are 256-byte aligned; a view of whole rows of one keeps both).
struct QuantMatrixView {
    GgmlType type = GgmlType::kQ4_1;
    const uint8_t* codes = nullptr;
    const uint16_t* scales = nullptr;  // fp16 bits
    int64_t rows = 0;
    int64_t cols = 0;
    // Host only (kernels compute cols / kQuantBlockElems themselves).
    int64_t blocks_per_row() const { return cols / kQuantBlockElems; }
    // Bytes a pass over every weight reads: codes plus scales.
    int64_t bytes() const {
        return rows * blocks_per_row() * (quant_code_bytes(type) + 2 * quant_scale_halves(type));
    }
};

}  // namespace servelab::cuda
