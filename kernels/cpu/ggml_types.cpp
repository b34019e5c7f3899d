// ggml_types.cpp — the block layouts of the ggml tensor types.
//
// Part of the CPU kernels and the model loader (all labs). The block sizes
// below are facts of the on-disk formats; the reader uses them to compute how
// many bytes a tensor takes, and the dequantizer to walk a row block by block.
#include "kernels/cpu/ggml_types.h"

namespace servelab {

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t raw_type) {
    switch (static_cast<GgmlType>(raw_type)) {
        // Plain floats: a "block" is one value.
        case GgmlType::kF32:
            return GgmlTypeTraits{"F32", 1, 4};
        case GgmlType::kF16:
            return GgmlTypeTraits{"F16", 1, 2};
        case GgmlType::kBF16:
            return GgmlTypeTraits{"BF16", 1, 2};
        // 32 values: fp16 scale d + 32 signed bytes.
        case GgmlType::kQ8_0:
            return GgmlTypeTraits{"Q8_0", 32, 2 + 32};
        // 32 values: fp16 scale d + 16 bytes of 4-bit codes.
        case GgmlType::kQ4_0:
            return GgmlTypeTraits{"Q4_0", 32, 2 + 16};
        // 32 values: fp16 scale d + fp16 offset m + 16 bytes of 4-bit codes.
        case GgmlType::kQ4_1:
            return GgmlTypeTraits{"Q4_1", 32, 2 + 2 + 16};
        // 256 values: fp16 d + fp16 dmin + 12 bytes of 6-bit scales/mins + 128 bytes of codes.
        case GgmlType::kQ4_K:
            return GgmlTypeTraits{"Q4_K", 256, 2 + 2 + 12 + 128};
        // 256 values: 128 bytes low nibbles + 64 bytes high 2-bit pairs + 16 scales + fp16 d.
        case GgmlType::kQ6_K:
            return GgmlTypeTraits{"Q6_K", 256, 128 + 64 + 16 + 2};
    }
    // Any other tag (including real ggml types servelab cannot decode).
    return std::nullopt;
}

GgmlTypeTraits ggml_type_traits(GgmlType type) {
    // Every enumerator is in the table above, so this cannot be empty.
    return *ggml_type_traits(static_cast<uint32_t>(type));
}

}  // namespace servelab
