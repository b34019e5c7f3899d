// gguf_types.h — the enums of the GGUF file format.
//
// Part of the model loader (all labs). Values are fixed by the GGUF spec: they
// are what is stored on disk, so they must never be renumbered. The tensor
// types and their block layouts (GgmlType, ggml_type_traits) are the kernels'
// as much as the file's, so they live below, in kernels/cpu/ggml_types.h.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/cpu/ggml_types.h"

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

std::string_view gguf_value_type_name(GgufValueType type);

// Where tensor data starts and each tensor is placed, in bytes, when the file
// has no "general.alignment" key (the spec's default).
inline constexpr uint64_t kGgufDefaultAlignment = 32;

}  // namespace servelab
