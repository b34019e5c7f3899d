// cuda_weights.cpp — see cuda_weights.h.
#include "reference/device/cuda_weights.h"

#include "kernels/common/error.h"

namespace servelab {
namespace {

cuda::DeviceBuffer<__nv_bfloat16> to_device_bf16(const std::vector<float>& host) {
    std::vector<__nv_bfloat16> rounded(host.size());
    for (size_t i = 0; i < host.size(); ++i) rounded[i] = __float2bfloat16(host[i]);
    cuda::DeviceBuffer<__nv_bfloat16> buffer(rounded.size());
    buffer.upload(rounded);
    return buffer;
}

// The GPU multiplies bf16 with cuBLAS, so quantized blocks are decoded once
// here, on the way up.
cuda::DeviceBuffer<__nv_bfloat16> to_device_bf16(const WeightMatrix& matrix) {
    return to_device_bf16(matrix.to_floats());
}

}  // namespace

int64_t CudaWeights::bytes() const {
    size_t elements = token_embedding.size() + output_norm.size() + output.size();
    for (const CudaLayerWeights& l : layers) {
        for (const auto* b : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate,
                              &l.w_up, &l.w_down}) {
            elements += b->size();
        }
    }
    return int64_t(elements * sizeof(__nv_bfloat16));
}

CudaWeights CudaWeights::upload(const ModelConfig& config, const ModelWeights& weights) {
    if (config.is_mla()) throw Error("--device cuda: MLA models run on the CPU only for now");
    CudaWeights out;
    out.token_embedding = to_device_bf16(weights.token_embedding);
    for (const LayerWeights& l : weights.layers) {
        out.layers.push_back({to_device_bf16(l.attn_norm), to_device_bf16(l.wq),
                              to_device_bf16(l.wk), to_device_bf16(l.wv), to_device_bf16(l.wo),
                              to_device_bf16(l.ffn_norm), to_device_bf16(l.w_gate),
                              to_device_bf16(l.w_up), to_device_bf16(l.w_down)});
    }
    out.output_norm = to_device_bf16(weights.output_norm);
    if (!weights.output.empty()) out.output = to_device_bf16(weights.output);
    return out;
}

}  // namespace servelab
