// cuda_weights.h — the model's weights in GPU memory, as bf16.
//
// Part of the CUDA backend (issue 7). The GGUF's tensors are dequantized to
// fp32 at load (reference/model/model_weights.h) and rounded once more, to
// bf16, on the way to the device: half the bytes of fp32, which is what a
// memory-bound decode step pays for, and the input type of the tensor cores'
// bf16 GEMMs (fp32 accumulation keeps the sums accurate). The norms' weights
// are bf16 too; the kernels widen them to fp32 before use.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"

namespace servelab {

struct CudaLayerWeights {
    cuda::DeviceBuffer<__nv_bfloat16> attn_norm, wq, wk, wv, wo;
    cuda::DeviceBuffer<__nv_bfloat16> ffn_norm, w_gate, w_up, w_down;
};

struct CudaWeights {
    cuda::DeviceBuffer<__nv_bfloat16> token_embedding{0};
    std::vector<CudaLayerWeights> layers;
    cuda::DeviceBuffer<__nv_bfloat16> output_norm{0};
    cuda::DeviceBuffer<__nv_bfloat16> output{0};  // empty when tied to the embedding

    const __nv_bfloat16* output_matrix() const {
        return output.size() == 0 ? token_embedding.data() : output.data();
    }
    int64_t bytes() const;

    // Throws servelab::Error for an MLA model (the GPU runner is MHA/GQA/MQA
    // only) or when device memory runs out.
    static CudaWeights upload(const ModelConfig& config, const ModelWeights& weights);
};

}  // namespace servelab
