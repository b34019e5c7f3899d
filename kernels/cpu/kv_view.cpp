// kv_view.cpp — see kv_view.h.
#include "kernels/cpu/kv_view.h"

#include <cstring>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/kv_quant.h"

namespace servelab {

int64_t kv_dtype_bytes(KvDtype dtype) {
    switch (dtype) {
        case KvDtype::kF32:
            return 4;
        case KvDtype::kF16:
        case KvDtype::kBF16:
            return 2;
        case KvDtype::kInt8:
        case KvDtype::kFp8E4M3:
            return 1;
    }
    return 4;
}

bool kv_dtype_has_scales(KvDtype dtype) {
    return dtype == KvDtype::kInt8 || dtype == KvDtype::kFp8E4M3;
}

std::string kv_dtype_name(KvDtype dtype) {
    switch (dtype) {
        case KvDtype::kF32:
            return "f32";
        case KvDtype::kF16:
            return "f16";
        case KvDtype::kBF16:
            return "bf16";
        case KvDtype::kInt8:
            return "int8";
        case KvDtype::kFp8E4M3:
            return "fp8";
    }
    return "?";
}

KvDtype parse_kv_dtype(const std::string& name) {
    for (KvDtype dtype :
         {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kFp8E4M3}) {
        if (name == kv_dtype_name(dtype)) return dtype;
    }
    throw Error("unknown KV cache type '" + name + "' (expected f32, f16, bf16, int8 or fp8)");
}

const float* kv_row(const KvView& view, int64_t token, int64_t head, float* scratch) {
    const int64_t row_index = token * view.num_heads + head;
    const int64_t n = view.head_dim;
    const uint8_t* row = view.data + row_index * n * kv_dtype_bytes(view.dtype);
    switch (view.dtype) {
        case KvDtype::kF32:
            return reinterpret_cast<const float*>(row);
        case KvDtype::kF16:
        case KvDtype::kBF16: {
            const bool is_f16 = view.dtype == KvDtype::kF16;
            for (int64_t i = 0; i < n; ++i) {
                uint16_t bits;
                std::memcpy(&bits, row + 2 * i, 2);
                scratch[i] = is_f16 ? fp16_to_float(bits) : bf16_to_float(bits);
            }
            return scratch;
        }
        case KvDtype::kInt8:
            dequantize_int8_row(reinterpret_cast<const int8_t*>(row), view.scales[row_index], n,
                                scratch);
            return scratch;
        case KvDtype::kFp8E4M3:
            dequantize_fp8_row(row, view.scales[row_index], n, scratch);
            return scratch;
    }
    return scratch;
}

float kv_encode_row(KvDtype dtype, const float* row, int64_t head_dim, uint8_t* dst) {
    switch (dtype) {
        case KvDtype::kF32:
            std::memcpy(dst, row, size_t(head_dim) * sizeof(float));
            return 1.0f;
        case KvDtype::kF16:
        case KvDtype::kBF16:
            for (int64_t i = 0; i < head_dim; ++i) {
                const uint16_t bits =
                    dtype == KvDtype::kF16 ? float_to_fp16(row[i]) : float_to_bf16(row[i]);
                std::memcpy(dst + 2 * i, &bits, 2);
            }
            return 1.0f;
        case KvDtype::kInt8:
            return quantize_int8_row(row, head_dim, reinterpret_cast<int8_t*>(dst));
        case KvDtype::kFp8E4M3:
            return quantize_fp8_row(row, head_dim, dst);
    }
    return 1.0f;
}

}  // namespace servelab
