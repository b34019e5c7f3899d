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

namespace servelab {

void column_parallel_linear(const float* x, const WeightMatrix& w_shard, float* y_shard,
                            int64_t num_rows) {
    // BEGIN SOLUTION lab07
    // HINT: this rank's slice of the output is an ordinary product with its rows of W
    w_shard.multiply(x, y_shard, num_rows);
    // END SOLUTION
}

void row_parallel_linear(const float* x_shard, const WeightMatrix& w_shard, float* y,
                         int64_t num_rows, Communicator& comm) {
    // BEGIN SOLUTION lab07
    // HINT: multiply this rank's input slice by its columns of W: a partial sum of y
    // HINT: then add every rank's partial sums (comm.all_reduce_sum over all of y)
    w_shard.multiply(x_shard, y, num_rows);
    comm.all_reduce_sum(std::span(y, size_t(num_rows * w_shard.rows())));
    // END SOLUTION
}

void vocab_parallel_embedding(std::span<const TokenId> tokens, const WeightMatrix& table_shard,
                              const TensorParallelShard& shard, float* out, Communicator& comm) {
    // BEGIN SOLUTION lab07
    // HINT: row t is table_shard's row (token - vocab_begin) when this rank holds the token
    // HINT: (table_shard.rows_as_floats copies it out), zeros otherwise: exactly one rank
    // HINT: holds each token, so a sum completes every row
    const int64_t dim = table_shard.cols();
    for (size_t t = 0; t < tokens.size(); ++t) {
        float* row = out + int64_t(t) * dim;
        const int64_t id = tokens[t];
        if (id >= shard.vocab_begin && id < shard.vocab_end) {
            table_shard.rows_as_floats(id - shard.vocab_begin, 1, row);
        }
    }
    comm.all_reduce_sum(std::span(out, tokens.size() * size_t(dim)));
    // END SOLUTION
}

void vocab_parallel_logits(const float* x, const WeightMatrix& head_shard, int64_t num_rows,
                           const TensorParallelShard& shard, int64_t vocab_size, float* logits,
                           Communicator& comm) {
    // BEGIN SOLUTION lab07
    // HINT: compute this rank's (num_rows, vocab_rows) logits, all_gather them with
    // HINT: counts num_rows * shard.vocab_counts[r], then place rank r's block in
    // HINT: columns [its vocab_begin, its vocab_end) of each row
    const int64_t local_vocab = shard.vocab_rows();
    if (shard.num_ranks == 1) {  // the whole head: nothing to gather
        head_shard.multiply(x, logits, num_rows);
        return;
    }
    std::vector<float> local(size_t(num_rows * local_vocab));
    head_shard.multiply(x, local.data(), num_rows);
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
