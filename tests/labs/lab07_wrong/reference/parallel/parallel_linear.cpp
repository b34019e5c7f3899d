// KNOWN-WRONG implementation for the grader self-test (tests/labs/README.md): the
// vocab-parallel embedding leaves the rows of tokens another rank holds untouched instead
// of zeroing them, so the all-reduce adds whatever the buffer held (the last step's
// residual stream) to the embedding. Harmless at N = 1, wrong at every N > 1.
// parallel_linear.cpp — column-, row- and vocab-parallel layers (Lab 7; see parallel_linear.h).
//
// Where the all-reduces go is the whole design: a column-parallel layer
// never communicates; a row-parallel layer always ends with one all-reduce;
// the vocab-parallel embedding needs one (each token's row lives on one
// rank) and the head one all-gather (each rank has a slice of every row's
// logits). Placing an all-reduce anywhere else is either wrong (after a
// column-parallel layer it would add different features together) or waste.
#include "reference/parallel/parallel_linear.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace servelab {

void column_parallel_linear(const float* x, const float* w_shard, float* y_shard, int64_t num_rows,
                            int64_t in_dim, int64_t out_shard_dim) {
    // BEGIN SOLUTION lab07
    // HINT: this rank's slice of the output is an ordinary matmul with its rows of W
    matmul(x, w_shard, y_shard, num_rows, in_dim, out_shard_dim);
    // END SOLUTION
}

void row_parallel_linear(const float* x_shard, const float* w_shard, float* y, int64_t num_rows,
                         int64_t in_shard_dim, int64_t out_dim, Communicator& comm) {
    // BEGIN SOLUTION lab07
    // HINT: multiply this rank's input slice by its columns of W: a partial sum of y
    // HINT: then add every rank's partial sums (comm.all_reduce_sum over all of y)
    matmul(x_shard, w_shard, y, num_rows, in_shard_dim, out_dim);
    comm.all_reduce_sum(std::span(y, size_t(num_rows * out_dim)));
    // END SOLUTION
}

void vocab_parallel_embedding(std::span<const TokenId> tokens, const float* table_shard,
                              const TensorParallelShard& shard, int64_t dim, float* out,
                              Communicator& comm) {
    // BEGIN SOLUTION lab07
    // HINT: row t is table_shard's row (token - vocab_begin) when this rank holds the token,
    // HINT: zeros otherwise: exactly one rank holds each token, so a sum completes every row
    for (size_t t = 0; t < tokens.size(); ++t) {
        float* row = out + int64_t(t) * dim;
        const int64_t id = tokens[t];
        if (id >= shard.vocab_begin && id < shard.vocab_end) {
            const float* source = table_shard + (id - shard.vocab_begin) * dim;
            std::copy(source, source + dim, row);
        }
    }
    comm.all_reduce_sum(std::span(out, tokens.size() * size_t(dim)));
    // END SOLUTION
}

void vocab_parallel_logits(const float* x, const float* head_shard, int64_t num_rows, int64_t dim,
                           const TensorParallelShard& shard, int64_t vocab_size, float* logits,
                           Communicator& comm) {
    // BEGIN SOLUTION lab07
    // HINT: compute this rank's (num_rows, vocab_rows) logits, all_gather them with
    // HINT: counts num_rows * shard.vocab_counts[r], then place rank r's block in
    // HINT: columns [its vocab_begin, its vocab_end) of each row
    const int64_t local_vocab = shard.vocab_rows();
    if (shard.num_ranks == 1) {  // the whole head: nothing to gather
        matmul(x, head_shard, logits, num_rows, dim, local_vocab);
        return;
    }
    std::vector<float> local(size_t(num_rows * local_vocab));
    matmul(x, head_shard, local.data(), num_rows, dim, local_vocab);
    // The gather concatenates whole blocks, rank after rank: (rows, v_0),
    // (rows, v_1), …; each row of the result interleaves them.
    std::vector<int64_t> counts;
    for (int64_t count : shard.vocab_counts) counts.push_back(num_rows * count);
    std::vector<float> blocks(size_t(num_rows * vocab_size));
    comm.all_gather(local, blocks, counts);
    const float* block = blocks.data();
    int64_t column = 0;
    for (int64_t count : shard.vocab_counts) {
        for (int64_t row = 0; row < num_rows; ++row) {
            std::copy(block + row * count, block + (row + 1) * count,
                      logits + row * vocab_size + column);
        }
        block += num_rows * count;
        column += count;
    }
    // END SOLUTION
}

}  // namespace servelab
