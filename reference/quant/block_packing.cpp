// block_packing.cpp — see block_packing.h.
#include "reference/quant/block_packing.h"

#include <fmt/format.h>
#include <cstddef>

#include <cmath>
#include <cstring>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"

namespace servelab {
namespace {

constexpr int64_t kBlock = 32;

void put_fp16(uint8_t* out, float value) {
    const uint16_t h = float_to_fp16(value);
    out[0] = uint8_t(h);
    out[1] = uint8_t(h >> 8);
}

// The code of `value` on its group's grid; the value must lie on it (up to
// float rounding of code · scale + offset).
int code_of(float value, const GroupParams& params, const QuantScheme& scheme) {
    const int code = quantize_weight(value, params, scheme);
    const float back = dequantize_code(code, params);
    if (std::fabs(back - value) > 1e-3f * std::fabs(params.scale) + 1e-30f) {
        throw Error(
            fmt::format("block packing: {} is not on its group's grid (nearest {})", value, back));
    }
    return code;
}

}  // namespace

std::string why_type_cannot_store(GgmlType type, const QuantScheme& scheme) {
    const std::string grid =
        fmt::format("{}-bit {}", scheme.bits, scheme.symmetric ? "symmetric" : "asymmetric");
    auto needs = [&](int bits, bool symmetric) -> std::string {
        if (scheme.bits != bits || scheme.symmetric != symmetric) {
            return fmt::format("{} stores {}-bit {} codes, not {}", ggml_type_traits(type).name,
                               bits, symmetric ? "symmetric" : "asymmetric", grid);
        }
        if (scheme.group_size % kBlock != 0) {
            return fmt::format(
                "{} blocks hold 32 weights: a group of {} does not fill whole blocks",
                ggml_type_traits(type).name, scheme.group_size);
        }
        return "";
    };
    switch (type) {
        case GgmlType::kQ4_0:
            return needs(4, true);
        case GgmlType::kQ4_1:
            return needs(4, false);
        case GgmlType::kQ8_0:
            return needs(8, true);
        case GgmlType::kF16:
            return "";
        default:
            return fmt::format("servelab quantize does not write {}", ggml_type_traits(type).name);
    }
}

std::vector<uint8_t> pack_quantized_rows(GgmlType type, const float* values,
                                         const GroupParams* params, int64_t rows, int64_t cols,
                                         const QuantScheme& scheme) {
    if (const std::string why = why_type_cannot_store(type, scheme); !why.empty()) {
        throw Error("block packing: " + why);
    }
    std::vector<uint8_t> bytes(size_t(rows * row_size_bytes(type, cols)));
    if (type == GgmlType::kF16) {
        for (int64_t k = 0; k < rows * cols; ++k) put_fp16(bytes.data() + 2 * k, values[k]);
        return bytes;
    }
    const int64_t block_bytes = ggml_type_traits(type).block_bytes;
    const int64_t groups_per_row = scheme.num_groups(cols);
    uint8_t* out = bytes.data();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t first = 0; first < cols; first += kBlock, out += block_bytes) {
            const float* x = values + r * cols + first;
            const GroupParams& p = params[r * groups_per_row + first / scheme.group_size];
            int codes[kBlock];
            for (int64_t i = 0; i < kBlock; ++i) codes[i] = code_of(x[i], p, scheme);
            put_fp16(out, p.scale);
            if (type == GgmlType::kQ8_0) {
                for (int64_t i = 0; i < kBlock; ++i) out[2 + i] = uint8_t(int8_t(codes[i]));
                continue;
            }
            uint8_t* nibbles = out + 2;
            if (type == GgmlType::kQ4_1) {
                put_fp16(out + 2, p.offset);
                nibbles = out + 4;
            }
            const int centre = type == GgmlType::kQ4_0 ? 8 : 0;  // Q4_0 stores q + 8
            for (int64_t j = 0; j < kBlock / 2; ++j) {
                nibbles[j] = uint8_t((codes[j] + centre) | ((codes[j + 16] + centre) << 4));
            }
        }
    }
    return bytes;
}

}  // namespace servelab
