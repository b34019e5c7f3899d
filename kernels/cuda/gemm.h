// gemm.h — the projections on the GPU through cuBLAS: y = x · Wᵀ in bf16, accumulated in fp32.
//
// Part of the CUDA backend (issue 7; the matmuls that take most of a forward
// pass, chapter 11.2). The same contract as kernels/cpu/matmul.h: x is
// (num_tokens, in_features), W (out_features, in_features) as GGUF stores
// it, y (num_tokens, out_features), all row-major. We do not write our own
// GEMM: cuBLAS's is tuned for each chip (on Hopper its bf16 path uses the
// tensor cores' wgmma instructions).
//
// cuBLAS is column-major. A row-major matrix read column-major is its
// transpose, so the row-major y = x · Wᵀ is the column-major
// yᵀ = W · xᵀ, which is one cublasGemmEx call: op(A) = Wᵀ-as-stored
// (CUBLAS_OP_T on the column-major view of W), B = the column-major view of x.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdint>

namespace servelab::cuda {

// One cuBLAS handle (its workspace and stream binding), created once.
class CublasHandle {
  public:
    CublasHandle();
    ~CublasHandle();
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;
    cublasHandle_t get() const { return handle_; }

  private:
    cublasHandle_t handle_ = nullptr;
};

// y (bf16) = x · Wᵀ, fp32 accumulation.
void gemm_bf16(const CublasHandle& cublas, const __nv_bfloat16* x, const __nv_bfloat16* w,
               __nv_bfloat16* y, int64_t num_tokens, int64_t in_features, int64_t out_features,
               cudaStream_t stream);
// y (fp32) = x · Wᵀ: for the logits, which the sampler reads in fp32.
void gemm_bf16_f32_out(const CublasHandle& cublas, const __nv_bfloat16* x, const __nv_bfloat16* w,
                       float* y, int64_t num_tokens, int64_t in_features, int64_t out_features,
                       cudaStream_t stream);
// The same two into columns of a wider y: token t's outputs go to
// y[t * y_row_stride .. + out_features) (y_row_stride >= out_features).
// For a matrix multiplied in row chunks (quant_dequantize.h: W's rows
// [r, r + n) give y's columns [r, r + n), so y points at column r).
void gemm_bf16_strided(const CublasHandle& cublas, const __nv_bfloat16* x, const __nv_bfloat16* w,
                       __nv_bfloat16* y, int64_t y_row_stride, int64_t num_tokens,
                       int64_t in_features, int64_t out_features, cudaStream_t stream);
void gemm_bf16_f32_out_strided(const CublasHandle& cublas, const __nv_bfloat16* x,
                               const __nv_bfloat16* w, float* y, int64_t y_row_stride,
                               int64_t num_tokens, int64_t in_features, int64_t out_features,
                               cudaStream_t stream);

}  // namespace servelab::cuda
