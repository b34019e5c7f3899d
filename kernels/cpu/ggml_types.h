// ggml_types.h — the ggml tensor types and the block layout of each.
//
// Part of the CPU kernels and the model loader (all labs). A quantized
// weight row is stored as consecutive blocks; the kernels walk it block by
// block (dequantize.h, quant_matmul.h) and the GGUF reader sizes tensors
// with the same layouts (reference/model/gguf_types.h adds the file format's
// own enums). The tags are what a GGUF file stores on disk, fixed by ggml:
// they must never be renumbered.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace servelab {

// The storage type of one tensor. Only the types servelab can dequantize are
// listed; any other tag in a file is reported as "unsupported tensor type".
enum class GgmlType : uint32_t {
    kF32 = 0,
    kF16 = 1,
    kQ4_0 = 2,
    kQ4_1 = 3,
    kQ8_0 = 8,
    kQ4_K = 12,
    kQ6_K = 14,
    kBF16 = 30,
};

// Block layout of a type: `block_elems` consecutive values of a row are
// stored together in `block_bytes` bytes (1 value per block for plain floats).
struct GgmlTypeTraits {
    std::string_view name;
    int64_t block_elems;
    int64_t block_bytes;
};

// The traits of a raw on-disk type tag, or nullopt when servelab does not know it.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t raw_type);
GgmlTypeTraits ggml_type_traits(GgmlType type);

}  // namespace servelab
