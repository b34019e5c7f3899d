// quant_layout.cu — see quant_layout.h. Host code only: the packing and its reference decoder.
//
// Self-contained on purpose (no kernels/cpu/*.cpp symbols): the kernel
// benchmark links the CUDA kernels alone, and packs its random matrices here.
#include <cuda_fp16.h>

#include <cstring>
#include <string>

#include "kernels/common/error.h"
#include "kernels/cuda/quant_layout.h"

namespace servelab::cuda {
namespace {

// A GGUF block's size: its scales, then its codes.
int64_t gguf_block_bytes(GgmlType type) {
    return 2 * quant_scale_halves(type) + quant_code_bytes(type);
}

float half_bits_to_float(uint16_t bits) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
}

}  // namespace

bool has_native_gpu_layout(GgmlType type) {
    return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ8_0;
}

int64_t quant_code_bytes(GgmlType type) {
    return type == GgmlType::kQ8_0 ? 32 : 16;
}

int64_t quant_scale_halves(GgmlType type) {
    return type == GgmlType::kQ4_1 ? 2 : 1;
}

PackedQuantMatrix pack_quant_matrix(GgmlType type, const uint8_t* gguf_bytes, size_t num_bytes,
                                    int64_t rows, int64_t cols) {
    if (!has_native_gpu_layout(type)) {
        throw Error("pack_quant_matrix: tensor type " + std::to_string(uint32_t(type)) +
                    " has no native GPU layout (Q4_0, Q4_1 and Q8_0 only)");
    }
    if (rows < 0 || cols < 0 || cols % kQuantBlockElems != 0) {
        throw Error("pack_quant_matrix: a (" + std::to_string(rows) + ", " + std::to_string(cols) +
                    ") matrix is not whole 32-weight blocks per row");
    }
    const int64_t num_blocks = rows * (cols / kQuantBlockElems);
    const int64_t block_bytes = gguf_block_bytes(type);
    if (int64_t(num_bytes) != num_blocks * block_bytes) {
        throw Error("pack_quant_matrix: " + std::to_string(num_bytes) + " bytes for a matrix of " +
                    std::to_string(num_blocks) + " blocks of " + std::to_string(block_bytes));
    }
    const int64_t code_bytes = quant_code_bytes(type);
    const int64_t scale_halves = quant_scale_halves(type);
    PackedQuantMatrix packed{type, rows, cols,
                             std::vector<uint8_t>(size_t(num_blocks * code_bytes)),
                             std::vector<uint16_t>(size_t(num_blocks * scale_halves))};
    // Blocks keep their order (row by row, left to right): only each block's
    // scales and codes go to separate arrays.
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = gguf_bytes + b * block_bytes;
        for (int64_t h = 0; h < scale_halves; ++h) {
            // fp16 little-endian, as GGUF stores it, whatever the host's order.
            packed.scales[size_t(b * scale_halves + h)] =
                uint16_t(block[2 * h] | (block[2 * h + 1] << 8));
        }
        std::memcpy(packed.codes.data() + b * code_bytes, block + 2 * scale_halves,
                    size_t(code_bytes));
    }
    return packed;
}

std::vector<float> unpack_quant_matrix(const PackedQuantMatrix& packed) {
    const int64_t num_blocks = packed.rows * (packed.cols / kQuantBlockElems);
    const int64_t code_bytes = quant_code_bytes(packed.type);
    const int64_t scale_halves = quant_scale_halves(packed.type);
    std::vector<float> out(size_t(num_blocks * kQuantBlockElems));
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* codes = packed.codes.data() + b * code_bytes;
        const float d = half_bits_to_float(packed.scales[size_t(b * scale_halves)]);
        float* w = out.data() + b * kQuantBlockElems;
        if (packed.type == GgmlType::kQ8_0) {
            for (int i = 0; i < 32; ++i) w[i] = d * float(int8_t(codes[i]));
            continue;
        }
        // Q4: byte j holds weight j (low nibble) and weight j + 16 (high).
        const float m = packed.type == GgmlType::kQ4_1
                            ? half_bits_to_float(packed.scales[size_t(b * scale_halves + 1)])
                            : 0.0f;
        const int centre = packed.type == GgmlType::kQ4_0 ? 8 : 0;
        for (int j = 0; j < 16; ++j) {
            const float low = d * float((codes[j] & 0x0F) - centre);
            const float high = d * float((codes[j] >> 4) - centre);
            w[j] = low + m;
            w[j + 16] = high + m;
        }
    }
    return out;
}

}  // namespace servelab::cuda
