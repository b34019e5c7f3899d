// kv_view.h — a read-only view of one cached tensor, in any KV element type.
//
// Lab 3 (chapter 11.3, KV-cache quantization). A KV cache stores, per token,
// `num_heads` vectors of `head_dim` elements. Storing them in fewer bits
// shrinks the cache: fp16/bf16 halve it; int8 and fp8 quarter it, at the
// price of one fp32 scale per (token, head) — the symmetric per-token,
// per-head scheme — so that each small vector uses the full code range.
// Attention reads the rows through kv_row(), which dequantizes one row at a
// time into a small buffer: the cache stays small, the math stays fp32.
#pragma once

#include <cstdint>
#include <string>

namespace servelab {

enum class KvDtype { kF32, kF16, kBF16, kInt8, kFp8E4M3 };

// Bytes of one stored element (scales not included).
int64_t kv_dtype_bytes(KvDtype dtype);
// int8 and fp8 store one fp32 scale per (token, head); the float types none.
bool kv_dtype_has_scales(KvDtype dtype);
std::string kv_dtype_name(KvDtype dtype);  // "f32", "f16", "bf16", "int8", "fp8"
// Parses the names above; throws servelab::Error otherwise.
KvDtype parse_kv_dtype(const std::string& name);

// (num_tokens, num_heads, head_dim) elements, token-major, plus for scaled
// types (num_tokens, num_heads) fp32 scales.
struct KvView {
    KvDtype dtype = KvDtype::kF32;
    const uint8_t* data = nullptr;
    const float* scales = nullptr;  // null for the float types
    int64_t num_heads = 0;
    int64_t head_dim = 0;
};

// The row of (token, head) as floats. For fp32 this is a pointer into the
// cache; otherwise the row is dequantized into `scratch` (head_dim floats)
// and `scratch` is returned.
const float* kv_row(const KvView& view, int64_t token, int64_t head, float* scratch);

// Encodes one row of head_dim floats into `dst` (head_dim elements of the
// view's type) and returns its scale (1 for the float types).
float kv_encode_row(KvDtype dtype, const float* row, int64_t head_dim, uint8_t* dst);

}  // namespace servelab
