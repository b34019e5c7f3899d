// argmax_kernels.h — greedy sampling on the GPU: the index of each row's largest logit.
//
// Part of the CUDA backend (issue 7; greedy decoding, chapter 11.2). Only the
// token ids travel back to the host, not the vocab-sized logits. Ties go to
// the smallest index, as on the CPU (std::max_element), so greedy outputs
// can be compared token for token.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::cuda {

// out[r] = argmax over logits[r, 0..vocab_size).
void argmax_rows_f32(const float* logits, int32_t* out, int64_t rows, int64_t vocab_size,
                     cudaStream_t stream);

}  // namespace servelab::cuda
