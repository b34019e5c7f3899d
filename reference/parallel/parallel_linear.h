// parallel_linear.h — the layers of a tensor-parallel model (Lab 7).
//
// Part of Lab 7 (chapter 11.7; Megatron-LM, Shoeybi et al. 2019). A linear
// layer y = x·Wᵀ with W of shape (out, in) splits across N ranks two ways:
//   column-parallel: rank r holds rows [o_r, o_r+1) of W (a slice of the
//     OUTPUT features) and computes that slice of y from the whole x. No
//     communication: the slices are what the next layer needs (heads for
//     attention, ffn features for SwiGLU);
//   row-parallel: rank r holds columns [i_r, i_r+1) of W (a slice of the
//     INPUT features) and multiplies the matching slice of x: a partial sum
//     of the whole y. One all-reduce adds the N partial sums.
// Pairing them — column then row — is the trick: the slice a column-parallel
// layer produces is exactly the slice the row-parallel layer consumes, so a
// whole attention block or MLP costs one all-reduce.
#pragma once

#include <cstdint>
#include <span>

#include "reference/model/tokenizer.h"
#include "reference/model/weight_matrix.h"
#include "reference/parallel/communicator.h"
#include "reference/parallel/tensor_parallel.h"

namespace servelab {

// Weights are WeightMatrix (reference/model/weight_matrix.h): quantized or
// fp32, w.multiply(x, y, num_rows) computes y = x · wᵀ either way, and
// w.rows() / w.cols() are the shard's own sizes.

// y_shard (num_rows, w_shard.rows()) = x (num_rows, w_shard.cols()) · w_shardᵀ,
// where w_shard is this rank's rows of W (its output features).
void column_parallel_linear(const float* x, const WeightMatrix& w_shard, float* y_shard,
                            int64_t num_rows);

// y (num_rows, w_shard.rows()) = the sum over ranks of x_shard (num_rows,
// w_shard.cols()) · w_shardᵀ, where w_shard is this rank's columns of W (its
// input features). Every rank ends with the same, whole y.
void row_parallel_linear(const float* x_shard, const WeightMatrix& w_shard, float* y,
                         int64_t num_rows, Communicator& comm);

// out (tokens.size(), table_shard.cols()) = embedding rows of `tokens`.
// table_shard holds rows [shard.vocab_begin, shard.vocab_end) of the table;
// every rank ends with every row.
void vocab_parallel_embedding(std::span<const TokenId> tokens, const WeightMatrix& table_shard,
                              const TensorParallelShard& shard, float* out, Communicator& comm);

// logits (num_rows, vocab_size) = x (num_rows, dim) · headᵀ, where
// head_shard holds rows [shard.vocab_begin, shard.vocab_end) of the head.
// Every rank ends with the whole rows.
void vocab_parallel_logits(const float* x, const WeightMatrix& head_shard, int64_t num_rows,
                           const TensorParallelShard& shard, int64_t vocab_size, float* logits,
                           Communicator& comm);

}  // namespace servelab
