// quant_dequantize.cu — see quant_dequantize.h.
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_block.cuh"
#include "kernels/cuda/quant_dequantize.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 256;

// Thread i decodes block i of the matrix (row by row), which is also where
// its 32 bf16 values go: block i of the output is elements [32i, 32i + 32).
template <GgmlType kType>
__global__ void dequantize_kernel(QuantMatrixView w, int64_t num_blocks, __nv_bfloat16* out) {
    const int64_t block = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (block >= num_blocks) return;
    float weights[32];
    decode_quant_block<kType>(w, block, weights);
    uint4 packed[4];  // 32 bf16 = four 16-byte stores
    __nv_bfloat16* values = reinterpret_cast<__nv_bfloat16*>(packed);
#pragma unroll
    for (int i = 0; i < 32; ++i) values[i] = __float2bfloat16(weights[i]);
    uint4* dst = reinterpret_cast<uint4*>(out + block * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = packed[i];
}

template <GgmlType kType>
void launch(const QuantMatrixView& w, int64_t num_blocks, __nv_bfloat16* out, cudaStream_t stream) {
    const int grid = int((num_blocks + kThreads - 1) / kThreads);
    dequantize_kernel<kType><<<grid, kThreads, 0, stream>>>(w, num_blocks, out);
}

}  // namespace

void dequantize_to_bf16(const QuantMatrixView& w, __nv_bfloat16* out, cudaStream_t stream) {
    if (!has_native_gpu_layout(w.type) || w.cols % 32 != 0 || w.rows < 0) {
        throw Error("dequantize_to_bf16: the matrix is not Q4_0, Q4_1 or Q8_0 in whole blocks");
    }
    const int64_t num_blocks = w.rows * w.blocks_per_row();
    if (num_blocks == 0) return;
    switch (w.type) {
        case GgmlType::kQ4_0:
            launch<GgmlType::kQ4_0>(w, num_blocks, out, stream);
            break;
        case GgmlType::kQ4_1:
            launch<GgmlType::kQ4_1>(w, num_blocks, out, stream);
            break;
        default:
            launch<GgmlType::kQ8_0>(w, num_blocks, out, stream);
            break;
    }
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
