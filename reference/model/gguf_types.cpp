// gguf_types.cpp — the names of GGUF metadata value types, for messages and `servelab info`.
//
// Part of the model loader (all labs). The tensor types' block layouts are in
// kernels/cpu/ggml_types.cpp.
#include "reference/model/gguf_types.h"

namespace servelab {

std::string_view gguf_value_type_name(GgufValueType type) {
    switch (type) {
        case GgufValueType::kUint8:
            return "uint8";
        case GgufValueType::kInt8:
            return "int8";
        case GgufValueType::kUint16:
            return "uint16";
        case GgufValueType::kInt16:
            return "int16";
        case GgufValueType::kUint32:
            return "uint32";
        case GgufValueType::kInt32:
            return "int32";
        case GgufValueType::kFloat32:
            return "float32";
        case GgufValueType::kBool:
            return "bool";
        case GgufValueType::kString:
            return "string";
        case GgufValueType::kArray:
            return "array";
        case GgufValueType::kUint64:
            return "uint64";
        case GgufValueType::kInt64:
            return "int64";
        case GgufValueType::kFloat64:
            return "float64";
    }
    return "unknown";
}

}  // namespace servelab
