// gguf_types.h — the enums of the GGUF file format and of ggml tensor types.
//
// Part of the model loader (all labs). Values are fixed by the GGUF spec: they
// are what is stored on disk, so they must never be renumbered.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace servelab {

// The type tag of one metadata value.
enum class GgufValueType : uint32_t {
    kUint8 = 0,
    kInt8 = 1,
    kUint16 = 2,
    kInt16 = 3,
    kUint32 = 4,
    kInt32 = 5,
    kFloat32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kUint64 = 10,
    kInt64 = 11,
    kFloat64 = 12,
};

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

std::string_view gguf_value_type_name(GgufValueType type);

}  // namespace servelab
