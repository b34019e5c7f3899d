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
#include "reference/parallel/communicator.h"
#include "reference/parallel/tensor_parallel.h"

namespace servelab {

// y_shard (num_rows, out_shard_dim) = x (num_rows, in_dim) · w_shardᵀ, where
// w_shard (out_shard_dim, in_dim) is this rank's rows of W.
void column_parallel_linear(const float* x, const float* w_shard, float* y_shard, int64_t num_rows,
                            int64_t in_dim, int64_t out_shard_dim);

// y (num_rows, out_dim) = the sum over ranks of x_shard (num_rows,
// in_shard_dim) · w_shardᵀ, where w_shard (out_dim, in_shard_dim) is this
// rank's columns of W. Every rank ends with the same, whole y.
void row_parallel_linear(const float* x_shard, const float* w_shard, float* y, int64_t num_rows,
                         int64_t in_shard_dim, int64_t out_dim, Communicator& comm);

// out (tokens.size(), dim) = embedding rows of `tokens`. table_shard holds
// rows [shard.vocab_begin, shard.vocab_end) of the table; every rank ends
// with every row.
void vocab_parallel_embedding(std::span<const TokenId> tokens, const float* table_shard,
                              const TensorParallelShard& shard, int64_t dim, float* out,
                              Communicator& comm);

// logits (num_rows, vocab_size) = x (num_rows, dim) · headᵀ, where
// head_shard holds rows [shard.vocab_begin, shard.vocab_end) of the head.
// Every rank ends with the whole rows.
void vocab_parallel_logits(const float* x, const float* head_shard, int64_t num_rows, int64_t dim,
                           const TensorParallelShard& shard, int64_t vocab_size, float* logits,
                           Communicator& comm);

}  // namespace servelab
