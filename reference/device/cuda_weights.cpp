// cuda_weights.cpp — see cuda_weights.h.
#include "reference/device/cuda_weights.h"

#include <algorithm>

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

// The bf16 kind multiplies with cuBLAS, so quantized blocks are decoded
// once here, on the way up.
cuda::DeviceBuffer<__nv_bfloat16> to_device_bf16(const WeightMatrix& matrix) {
    return to_device_bf16(matrix.to_floats());
}

template <typename T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& host) {
    cuda::DeviceBuffer<T> buffer(host.size());
    buffer.upload(host);
    return buffer;
}

// A projection as `kind` keeps it: its blocks where native applies to its
// type, bf16 otherwise.
CudaMatrix to_device_matrix(const WeightMatrix& matrix, GpuWeights kind) {
    CudaMatrix out;
    out.rows = matrix.rows();
    out.cols = matrix.cols();
    if (kind == GpuWeights::kNative && cuda::has_native_gpu_layout(matrix.type())) {
        const std::vector<uint8_t>& blocks = matrix.blocks();
        const cuda::PackedQuantMatrix packed = cuda::pack_quant_matrix(
            matrix.type(), blocks.data(), blocks.size(), matrix.rows(), matrix.cols());
        out.native_type = matrix.type();
        out.codes = to_device(packed.codes);
        out.scales = to_device(packed.scales);
        return out;
    }
    out.bf16 = to_device_bf16(matrix);
    return out;
}

}  // namespace

int64_t CudaMatrix::bytes() const {
    return int64_t(bf16.size() * sizeof(__nv_bfloat16) + codes.size() +
                   scales.size() * sizeof(uint16_t));
}

int64_t CudaWeights::bytes() const {
    int64_t total = int64_t((token_embedding.size() + output_norm.size()) * sizeof(__nv_bfloat16));
    total += output.bytes();
    for (const CudaLayerWeights& l : layers) {
        total += int64_t((l.attn_norm.size() + l.ffn_norm.size()) * sizeof(__nv_bfloat16));
        for (const CudaMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            total += m->bytes();
        }
    }
    return total;
}

int64_t CudaWeights::largest_layer_native_elements() const {
    int64_t largest = 0;
    for (const CudaLayerWeights& l : layers) {
        for (const CudaMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            if (m->is_native()) largest = std::max(largest, m->rows * m->cols);
        }
    }
    // A model whose only native matrix is its head still needs a chunk of it.
    if (largest == 0 && output.is_native()) {
        largest = std::min(output.rows, int64_t(4096)) * output.cols;
    }
    return largest;
}

int64_t CudaWeights::widest_native_cols() const {
    int64_t widest = output.is_native() ? output.cols : 0;
    for (const CudaLayerWeights& l : layers) {
        for (const CudaMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            if (m->is_native()) widest = std::max(widest, m->cols);
        }
    }
    return widest;
}

CudaWeights CudaWeights::upload(const ModelConfig& config, const ModelWeights& weights,
                                GpuWeights kind) {
    if (config.is_mla()) throw Error("--device cuda: MLA models run on the CPU only for now");
    CudaWeights out;
    out.kind = kind;
    out.token_embedding = to_device_bf16(weights.token_embedding);
    for (const LayerWeights& l : weights.layers) {
        CudaLayerWeights layer;
        layer.attn_norm = to_device_bf16(l.attn_norm);
        layer.wq = to_device_matrix(l.wq, kind);
        layer.wk = to_device_matrix(l.wk, kind);
        layer.wv = to_device_matrix(l.wv, kind);
        layer.wo = to_device_matrix(l.wo, kind);
        layer.ffn_norm = to_device_bf16(l.ffn_norm);
        layer.w_gate = to_device_matrix(l.w_gate, kind);
        layer.w_up = to_device_matrix(l.w_up, kind);
        layer.w_down = to_device_matrix(l.w_down, kind);
        out.layers.push_back(std::move(layer));
    }
    out.output_norm = to_device_bf16(weights.output_norm);
    if (!weights.output.empty()) out.output = to_device_matrix(weights.output, kind);
    return out;
}

int64_t cuda_tensor_bytes(GgmlType type, int64_t num_elements, bool is_embedding, GpuWeights kind) {
    if (kind == GpuWeights::kNative && !is_embedding && cuda::has_native_gpu_layout(type)) {
        // The file's bytes: 18, 20 or 34 per block of 32.
        const int64_t block_bytes =
            cuda::quant_code_bytes(type) + 2 * cuda::quant_scale_halves(type);
        return num_elements / cuda::kQuantBlockElems * block_bytes;
    }
    return 2 * num_elements;
}

}  // namespace servelab
