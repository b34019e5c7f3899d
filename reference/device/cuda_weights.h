// cuda_weights.h — the model's weights in GPU memory: bf16, or the file's own quantized blocks.
//
// Part of the CUDA backend (issues 7 and 48). Two kinds (`--gpu-weights`):
//   bf16: the GGUF's tensors are dequantized to fp32 at load
//     (reference/model/model_weights.h) and rounded once more, to bf16, on
//     the way to the device: half the bytes of fp32, and the input type of
//     the tensor cores' bf16 GEMMs (fp32 accumulation keeps the sums
//     accurate). Every projection is a cuBLAS call (kernels/cuda/gemm.h).
//   native (the default): the projections stored as Q4_0, Q4_1 or Q8_0
//     keep the file's blocks, in the device layout of
//     kernels/cuda/quant_layout.h (the same bytes, scales apart from codes),
//     so a decode step reads 0.56–1.06 bytes per weight instead of 2. The
//     runner multiplies them with the quantized GEMV up to 8 tokens
//     (kernels/cuda/quant_gemv.h) and by dequantizing to bf16 for cuBLAS
//     beyond (kernels/cuda/quant_dequantize.h). Every other tensor — F32,
//     F16, BF16 and K-quant matrices, the token embedding (a lookup table,
//     gathered by row) and the norms — is bf16 as above.
// The norms' weights are bf16 either way; the kernels widen them to fp32.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/quant_layout.h"
#include "reference/device/gpu_weights.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"

namespace servelab {

// One projection (rows, cols) on the device: bf16 values, or, when native,
// Q4_0/Q4_1/Q8_0 blocks in quant_layout.h's layout (exactly one is held).
struct CudaMatrix {
    int64_t rows = 0;
    int64_t cols = 0;
    cuda::DeviceBuffer<__nv_bfloat16> bf16{0};  // (rows, cols); empty when native
    GgmlType native_type = GgmlType::kF32;      // the blocks' type when native
    cuda::DeviceBuffer<uint8_t> codes{0};       // native: rows × cols/32 × 16 or 32
    cuda::DeviceBuffer<uint16_t> scales{0};     // native: rows × cols/32 × 1 or 2, fp16

    bool is_native() const { return codes.size() > 0; }
    cuda::QuantMatrixView native_view() const {
        return {native_type, codes.data(), scales.data(), rows, cols};
    }
    int64_t bytes() const;
};

struct CudaLayerWeights {
    cuda::DeviceBuffer<__nv_bfloat16> attn_norm{0};
    CudaMatrix wq, wk, wv, wo;
    cuda::DeviceBuffer<__nv_bfloat16> ffn_norm{0};
    CudaMatrix w_gate, w_up, w_down;
};

struct CudaWeights {
    GpuWeights kind = GpuWeights::kBf16;
    cuda::DeviceBuffer<__nv_bfloat16> token_embedding{0};  // bf16 always: gathered by row
    std::vector<CudaLayerWeights> layers;
    cuda::DeviceBuffer<__nv_bfloat16> output_norm{0};
    CudaMatrix output;  // empty (rows == 0) when tied to the embedding

    bool output_is_tied() const { return output.rows == 0; }
    int64_t bytes() const;
    // The most weights of any native matrix of a layer (0 when none is):
    // the runner's bf16 scratch for dequantize-then-cuBLAS holds this many;
    // a larger matrix (an untied output head) goes through it in row chunks.
    int64_t largest_layer_native_elements() const;
    // The most columns of any native matrix: the GEMV's quantized activations.
    int64_t widest_native_cols() const;

    // Throws servelab::Error for an MLA model (the GPU runner is MHA/GQA/MQA
    // only) or when device memory runs out.
    static CudaWeights upload(const ModelConfig& config, const ModelWeights& weights,
                              GpuWeights kind = GpuWeights::kNative);
};

// Bytes the device will hold for one tensor of the model file, of `type`
// and `num_elements`, as `kind` uploads it: for sizing the KV pool beside
// the weights (summed over the file's tensors). `is_embedding` marks the
// token embedding, which stays bf16.
int64_t cuda_tensor_bytes(GgmlType type, int64_t num_elements, bool is_embedding, GpuWeights kind);

}  // namespace servelab
