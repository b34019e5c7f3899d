// quant_gemv.cu — see quant_gemv.h.
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_block.cuh"
#include "kernels/cuda/quant_gemv.h"

namespace servelab::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;  // 128 threads: small matrices still spread over many SMs
constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}

__device__ inline int warp_sum(int value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}

__device__ inline float warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
    return value;
}

// y[token, row] in whichever output the call has (the other is null).
__device__ inline void store_output(__nv_bfloat16* y_bf16, float* y_f32, int64_t index,
                                    float value) {
    if (y_f32 != nullptr) {
        y_f32[index] = value;
    } else {
        y_bf16[index] = __float2bfloat16(value);
    }
}

// ---- plain: decode each block to fp32, fp32 dot products -------------------

// One warp per row. acc[] is indexed by constants only (the loops are
// unrolled), so it stays in registers; tokens past num_tokens are skipped.
template <GgmlType kType>
__global__ void quant_gemv_plain_kernel(QuantMatrixView w, const __nv_bfloat16* x, int num_tokens,
                                        __nv_bfloat16* y_bf16, float* y_f32) {
    const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = int(threadIdx.x % 32);
    if (row >= w.rows) return;  // the whole warp: row is the warp's
    const int64_t blocks_per_row = w.cols / kQuantBlockElems;
    float acc[kQuantGemvMaxTokens] = {};
    for (int64_t b = lane; b < blocks_per_row; b += 32) {
        float weights[32];
        decode_quant_block<kType>(w, row * blocks_per_row + b, weights);
#pragma unroll
        for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
            if (t >= num_tokens) break;
            const __nv_bfloat16* xb = x + t * w.cols + b * 32;
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; ++i) sum += weights[i] * __bfloat162float(xb[i]);
            acc[t] += sum;
        }
    }
#pragma unroll
    for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
        if (t >= num_tokens) break;
        const float total = warp_sum(acc[t]);
        if (lane == 0) store_output(y_bf16, y_f32, t * w.rows + row, total);
    }
}

// ---- fast: int8 activations, dp4a ----------------------------------------

// One warp per 32-value block of x (flat over tokens: x and the codes are
// both (num_tokens, cols), so block i is values [32i, 32i + 32) of each).
__global__ void quantize_activations_kernel(const __nv_bfloat16* x, int64_t num_blocks,
                                            QuantizedActivationsView out) {
    const int64_t block = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = int(threadIdx.x % 32);
    if (block >= num_blocks) return;
    const float value = __bfloat162float(x[block * 32 + lane]);
    const float scale = warp_max(fabsf(value)) / 127.0f;
    // An all-zero block has scale 0: codes 0, and its dot products are 0.
    const int code = scale > 0.0f ? max(-127, min(127, __float2int_rn(value / scale))) : 0;
    out.codes[block * 32 + lane] = int8_t(code);
    const int code_sum = warp_sum(code);
    if (lane == 0) out.scales[block] = make_float2(scale, scale * float(code_sum));
}

// Rows per warp, by tokens: reuses each activation load for several rows
// once there are enough tokens that L1 traffic would bind (quant_gemv.h).
__host__ __device__ constexpr int rows_per_warp(int tokens) {
    return tokens <= 2 ? 1 : (tokens <= 4 ? 2 : 4);
}

// Σ q·c over one block: weight codes (4 words: Q4; 8 words: Q8_0) against
// activation codes x_lo (values 0..15) and x_hi (16..31), four bytes at a time.
template <GgmlType kType>
__device__ inline int block_dot(const int* codes, const int4& x_lo, const int4& x_hi) {
    const int x_words[8] = {x_lo.x, x_lo.y, x_lo.z, x_lo.w, x_hi.x, x_hi.y, x_hi.z, x_hi.w};
    int sum = 0;
    if constexpr (kType == GgmlType::kQ8_0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = __dp4a(codes[i], x_words[i], sum);
    } else {
        // Word i's low nibbles are weights 4i..4i+3, its high nibbles 16+4i..16+4i+3.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sum = __dp4a(codes[i] & 0x0F0F0F0F, x_words[i], sum);
            sum = __dp4a((codes[i] >> 4) & 0x0F0F0F0F, x_words[i + 4], sum);
        }
    }
    return sum;
}

// kRows rows per warp, kTokens tokens; lanes take the rows' blocks in turn.
// Rows past the end (the last warp's) load the last row again and store nothing.
template <GgmlType kType, int kTokens>
__global__ void quant_gemv_fast_kernel(QuantMatrixView w, QuantizedActivationsView x,
                                       __nv_bfloat16* y_bf16, float* y_f32) {
    constexpr int kRows = rows_per_warp(kTokens);
    constexpr int kWords = kType == GgmlType::kQ8_0 ? 8 : 4;
    const int64_t first_row = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * kRows;
    const int lane = int(threadIdx.x % 32);
    if (first_row >= w.rows) return;
    const int64_t blocks_per_row = w.cols / kQuantBlockElems;
    float acc[kRows][kTokens] = {};
#pragma unroll 2
    for (int64_t b = lane; b < blocks_per_row; b += 32) {
        int codes[kRows][kWords];
        float d[kRows], m[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int64_t block = min(first_row + r, w.rows - 1) * blocks_per_row + b;
            const int4* src = reinterpret_cast<const int4*>(w.codes + block * kWords * 4);
#pragma unroll
            for (int part = 0; part < kWords / 4; ++part) {
                const int4 v = src[part];
                codes[r][4 * part] = v.x;
                codes[r][4 * part + 1] = v.y;
                codes[r][4 * part + 2] = v.z;
                codes[r][4 * part + 3] = v.w;
            }
            if constexpr (kType == GgmlType::kQ4_1) {
                // d and m side by side: one 4-byte load (d at the lower address).
                const uint32_t dm = *reinterpret_cast<const uint32_t*>(w.scales + block * 2);
                d[r] = half_bits_to_float(uint16_t(dm & 0xFFFFu));
                m[r] = half_bits_to_float(uint16_t(dm >> 16));
            } else if constexpr (kType == GgmlType::kQ4_0) {
                d[r] = half_bits_to_float(w.scales[block]);
                m[r] = -8.0f * d[r];
            } else {
                d[r] = half_bits_to_float(w.scales[block]);
                m[r] = 0.0f;
            }
        }
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
            const int4* xc = reinterpret_cast<const int4*>(x.codes + t * x.cols + b * 32);
            const int4 x_lo = xc[0], x_hi = xc[1];
            const float2 s = x.scales[t * blocks_per_row + b];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const int q_dot_c = block_dot<kType>(codes[r], x_lo, x_hi);
                acc[r][t] += d[r] * s.x * float(q_dot_c) + m[r] * s.y;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
            const float total = warp_sum(acc[r][t]);
            if (lane == 0 && first_row + r < w.rows) {
                store_output(y_bf16, y_f32, t * w.rows + first_row + r, total);
            }
        }
    }
}

void check_shape(const QuantMatrixView& w, int64_t num_tokens, const char* name) {
    if (!has_native_gpu_layout(w.type) || w.cols % 32 != 0 || w.rows < 0) {
        throw Error(std::string(name) + ": the matrix is not Q4_0, Q4_1 or Q8_0 in whole blocks");
    }
    if (num_tokens < 1 || num_tokens > kQuantGemvMaxTokens) {
        throw Error(std::string(name) + ": " + std::to_string(num_tokens) +
                    " tokens; the GEMV takes 1 to 8 (dequantize and use cuBLAS beyond)");
    }
}

int grid_for(int64_t warps) {
    return int((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

template <GgmlType kType>
void launch_plain(const QuantMatrixView& w, const __nv_bfloat16* x, int64_t num_tokens,
                  __nv_bfloat16* y_bf16, float* y_f32, cudaStream_t stream) {
    quant_gemv_plain_kernel<kType><<<grid_for(w.rows), kWarpsPerBlock * 32, 0, stream>>>(
        w, x, int(num_tokens), y_bf16, y_f32);
}

void plain(const QuantMatrixView& w, const __nv_bfloat16* x, int64_t num_tokens,
           __nv_bfloat16* y_bf16, float* y_f32, cudaStream_t stream) {
    check_shape(w, num_tokens, "quant_gemv_plain");
    if (w.rows == 0) return;
    switch (w.type) {
        case GgmlType::kQ4_0:
            launch_plain<GgmlType::kQ4_0>(w, x, num_tokens, y_bf16, y_f32, stream);
            break;
        case GgmlType::kQ4_1:
            launch_plain<GgmlType::kQ4_1>(w, x, num_tokens, y_bf16, y_f32, stream);
            break;
        default:
            launch_plain<GgmlType::kQ8_0>(w, x, num_tokens, y_bf16, y_f32, stream);
            break;
    }
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

template <GgmlType kType, int kTokens>
void launch_fast(const QuantMatrixView& w, const QuantizedActivationsView& x, __nv_bfloat16* y_bf16,
                 float* y_f32, cudaStream_t stream) {
    constexpr int64_t kRows = rows_per_warp(kTokens);
    quant_gemv_fast_kernel<kType, kTokens>
        <<<grid_for((w.rows + kRows - 1) / kRows), kWarpsPerBlock * 32, 0, stream>>>(w, x, y_bf16,
                                                                                     y_f32);
}

// The kernel for x.num_tokens (1..8): each count is its own instantiation,
// so the accumulators are a register array of exactly that many.
template <GgmlType kType>
void fast_for_type(const QuantMatrixView& w, const QuantizedActivationsView& x,
                   __nv_bfloat16* y_bf16, float* y_f32, cudaStream_t stream) {
    switch (x.num_tokens) {
        case 1:
            launch_fast<kType, 1>(w, x, y_bf16, y_f32, stream);
            break;
        case 2:
            launch_fast<kType, 2>(w, x, y_bf16, y_f32, stream);
            break;
        case 3:
            launch_fast<kType, 3>(w, x, y_bf16, y_f32, stream);
            break;
        case 4:
            launch_fast<kType, 4>(w, x, y_bf16, y_f32, stream);
            break;
        case 5:
            launch_fast<kType, 5>(w, x, y_bf16, y_f32, stream);
            break;
        case 6:
            launch_fast<kType, 6>(w, x, y_bf16, y_f32, stream);
            break;
        case 7:
            launch_fast<kType, 7>(w, x, y_bf16, y_f32, stream);
            break;
        default:
            launch_fast<kType, 8>(w, x, y_bf16, y_f32, stream);
            break;
    }
}

void fast(const QuantMatrixView& w, const QuantizedActivationsView& x, __nv_bfloat16* y_bf16,
          float* y_f32, cudaStream_t stream) {
    check_shape(w, x.num_tokens, "quant_gemv_fast");
    if (x.cols != w.cols) {
        throw Error("quant_gemv_fast: activations of " + std::to_string(x.cols) +
                    " columns against a matrix of " + std::to_string(w.cols));
    }
    if (w.rows == 0) return;
    switch (w.type) {
        case GgmlType::kQ4_0:
            fast_for_type<GgmlType::kQ4_0>(w, x, y_bf16, y_f32, stream);
            break;
        case GgmlType::kQ4_1:
            fast_for_type<GgmlType::kQ4_1>(w, x, y_bf16, y_f32, stream);
            break;
        default:
            fast_for_type<GgmlType::kQ8_0>(w, x, y_bf16, y_f32, stream);
            break;
    }
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void quant_gemv_plain(const QuantMatrixView& w, const __nv_bfloat16* x, __nv_bfloat16* y,
                      int64_t num_tokens, cudaStream_t stream) {
    plain(w, x, num_tokens, y, nullptr, stream);
}

void quant_gemv_plain_f32_out(const QuantMatrixView& w, const __nv_bfloat16* x, float* y,
                              int64_t num_tokens, cudaStream_t stream) {
    plain(w, x, num_tokens, nullptr, y, stream);
}

void quantize_activations_int8(const __nv_bfloat16* x, const QuantizedActivationsView& out,
                               cudaStream_t stream) {
    if (out.cols % 32 != 0 || out.num_tokens < 0) {
        throw Error("quantize_activations_int8: " + std::to_string(out.cols) +
                    " columns is not whole 32-value blocks");
    }
    const int64_t num_blocks = out.num_tokens * out.cols / 32;
    if (num_blocks == 0) return;
    quantize_activations_kernel<<<grid_for(num_blocks), kWarpsPerBlock * 32, 0, stream>>>(
        x, num_blocks, out);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

void quant_gemv_fast(const QuantMatrixView& w, const QuantizedActivationsView& x, __nv_bfloat16* y,
                     cudaStream_t stream) {
    fast(w, x, y, nullptr, stream);
}

void quant_gemv_fast_f32_out(const QuantMatrixView& w, const QuantizedActivationsView& x, float* y,
                             cudaStream_t stream) {
    fast(w, x, nullptr, y, stream);
}

}  // namespace servelab::cuda
