// gemm.cu — see gemm.h.
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"

namespace servelab::cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* call) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    throw Error(std::string("cuBLAS: ") + call + " failed: " + cublasGetStatusString(status));
}

void gemm(const CublasHandle& cublas, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y,
          cudaDataType_t y_type, int64_t y_row_stride, int64_t num_tokens, int64_t in_features,
          int64_t out_features, cudaStream_t stream) {
    if (y_row_stride < out_features) {
        throw Error("gemm: a row stride of y shorter than its " + std::to_string(out_features) +
                    " outputs");
    }
    if (num_tokens == 0 || out_features == 0) return;
    // Only when it changes: cublasSetStream also drops a workspace set with
    // cublasSetWorkspace, which CUDA graph capture needs (no allocation
    // may happen while a stream is being captured).
    cudaStream_t current = nullptr;
    check_cublas(cublasGetStream(cublas.get(), &current), "cublasGetStream");
    if (current != stream) check_cublas(cublasSetStream(cublas.get(), stream), "cublasSetStream");
    const float alpha = 1.0f, beta = 0.0f;
    // Column-major: yᵀ (out × tokens) = op(W_cm) (out × in) · x_cm (in × tokens),
    // where W_cm (in × out) and x_cm (in × tokens) are the row-major arrays as stored.
    check_cublas(cublasGemmEx(cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, int(out_features),
                              int(num_tokens), int(in_features), &alpha, w, CUDA_R_16BF,
                              int(in_features), x, CUDA_R_16BF, int(in_features), &beta, y, y_type,
                              int(y_row_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

}  // namespace

CublasHandle::CublasHandle() {
    check_cublas(cublasCreate(&handle_), "cublasCreate");
}

CublasHandle::~CublasHandle() {
    if (handle_ != nullptr) cublasDestroy(handle_);
}

void gemm_bf16(const CublasHandle& cublas, const __nv_bfloat16* x, const __nv_bfloat16* w,
               __nv_bfloat16* y, int64_t num_tokens, int64_t in_features, int64_t out_features,
               cudaStream_t stream) {
    gemm(cublas, x, w, y, CUDA_R_16BF, out_features, num_tokens, in_features, out_features, stream);
}

void gemm_bf16_f32_out(const CublasHandle& cublas, const __nv_bfloat16* x, const __nv_bfloat16* w,
                       float* y, int64_t num_tokens, int64_t in_features, int64_t out_features,
                       cudaStream_t stream) {
    gemm(cublas, x, w, y, CUDA_R_32F, out_features, num_tokens, in_features, out_features, stream);
}

void gemm_bf16_strided(const CublasHandle& cublas, const __nv_bfloat16* x, const __nv_bfloat16* w,
                       __nv_bfloat16* y, int64_t y_row_stride, int64_t num_tokens,
                       int64_t in_features, int64_t out_features, cudaStream_t stream) {
    gemm(cublas, x, w, y, CUDA_R_16BF, y_row_stride, num_tokens, in_features, out_features, stream);
}

void gemm_bf16_f32_out_strided(const CublasHandle& cublas, const __nv_bfloat16* x,
                               const __nv_bfloat16* w, float* y, int64_t y_row_stride,
                               int64_t num_tokens, int64_t in_features, int64_t out_features,
                               cudaStream_t stream) {
    gemm(cublas, x, w, y, CUDA_R_32F, y_row_stride, num_tokens, in_features, out_features, stream);
}

}  // namespace servelab::cuda
