// hidden_lab07_tensor_parallel_test.cpp — Lab 7's hidden tests: the ring and the parallel layers.
//
// Lab 7 (chapter 11.7, tensor parallelism). The instructor's hidden tests,
// left out of the student release (never quote them in a handout): the same
// contracts as tests/unit/tensor_parallel_test.cpp — the ring all-reduce
// leaves the sum on every rank, the same bits everywhere, in 2(N−1) steps,
// touching nothing past `count`; column-parallel slices, row-parallel sums,
// the vocab-parallel embedding and head — re-checked with N = 1..7 ranks,
// lengths shorter than N and around its multiples, one-row batches,
// vocabularies no N divides, and tokens on every shard's edge, against plain
// loops written here. Outputs are poisoned with NaN before every call.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "reference/model/weight_matrix.h"
#include "reference/parallel/parallel_linear.h"
#include "reference/parallel/ring_all_reduce.h"
#include "reference/parallel/tensor_parallel.h"
#include "reference/parallel/thread_communicator.h"

namespace servelab {
namespace {

using test::RandomSource;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kGuard = -12345.0f;  // past `count`: must stay untouched
constexpr int64_t kGuardLength = 8;

// Small integers: every order of summation gives the same exact float, so
// the sum can be compared bit for bit.
std::vector<float> small_integers(RandomSource& random, int64_t n, int rank) {
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = float(random.integer(-50, 50) * (rank + 1));
    return values;
}

struct RingRun {
    std::vector<std::vector<float>> buffers;  // count values, then the guard
    std::vector<int> steps;                   // barriers each rank called
};

RingRun run_ring(std::vector<std::vector<float>> inputs, int64_t count) {
    const int num_ranks = int(inputs.size());
    RingRun run{std::move(inputs), std::vector<int>(size_t(num_ranks), 0)};
    std::vector<float*> pointers;
    for (auto& buffer : run.buffers) {
        buffer.insert(buffer.end(), kGuardLength, kGuard);
        pointers.push_back(buffer.data());
    }
    ThreadGroup group(num_ranks);
    run_rank_threads(
        num_ranks,
        [&](int r) {
            group.arrive_and_wait();
            ring_all_reduce(pointers, count, r, [&] {
                ++run.steps[size_t(r)];
                group.arrive_and_wait();
            });
            group.arrive_and_wait();
        },
        [&] { group.abort(); });
    return run;
}

// Checks one run: the exact sum on every rank, the guard, the step count.
void check_ring(const RingRun& run, const std::vector<std::vector<float>>& inputs, int64_t count) {
    const int num_ranks = int(inputs.size());
    const std::string where =
        "N = " + std::to_string(num_ranks) + ", count = " + std::to_string(count);
    for (int r = 0; r < num_ranks; ++r) {
        EXPECT_EQ(run.steps[size_t(r)], 2 * (num_ranks - 1))
            << where << ", rank " << r << ": reduce-scatter and all-gather take N-1 steps each, "
            << "with wait_for_all() after every step";
        for (int64_t i = 0; i < count; ++i) {
            float sum = 0.0f;
            for (const auto& input : inputs) sum += input[size_t(i)];
            ASSERT_EQ(run.buffers[size_t(r)][size_t(i)], sum)
                << where << ", rank " << r << ", element " << i << " (ring chunk "
                << i * num_ranks / std::max<int64_t>(count, 1) << "): every rank must end with "
                << "the sum of every rank's element, each chunk added once per rank from the "
                << "left neighbour, then copied around (the inputs are small integers, so any "
                << "order gives this exact sum)";
        }
        for (int64_t g = 0; g < kGuardLength; ++g) {
            ASSERT_EQ(run.buffers[size_t(r)][size_t(count + g)], kGuard)
                << where << ", rank " << r << ": the ring wrote element " << count + g
                << ", past the " << count << " it was given: a chunk is [begin, end)";
        }
    }
}

// N = 1..7 with lengths below N (empty chunks), N - 1, N, N + 1, 2N + 1 and a
// random odd length: the chunk bounds at every edge.
TEST(HiddenLab07Ring, ExactSumsOnEveryRankForLengthsAroundMultiplesOfN) {
    RandomSource random(701);
    SCOPED_TRACE(random.trace());
    for (int num_ranks = 1; num_ranks <= 7; ++num_ranks) {
        const int64_t odd = 2 * random.integer(20, 300) + 1;
        for (int64_t count : {int64_t(1), int64_t(num_ranks) - 1, int64_t(num_ranks),
                              int64_t(num_ranks) + 1, 2 * int64_t(num_ranks) + 1, odd}) {
            if (count < 1) continue;
            std::vector<std::vector<float>> inputs;
            for (int r = 0; r < num_ranks; ++r) inputs.push_back(small_integers(random, count, r));
            check_ring(run_ring(inputs, count), inputs, count);
            if (HasFatalFailure()) return;
        }
    }
}

// Random floats (not integers): the result is the same bits on every rank,
// because each chunk is summed on one rank and then copied.
TEST(HiddenLab07Ring, EveryRankHoldsTheSameBitsOnRandomFloats) {
    RandomSource random(702);
    SCOPED_TRACE(random.trace());
    for (int num_ranks : {3, 6, 7}) {
        const int64_t count = random.integer(num_ranks * 3, 997);
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < num_ranks; ++r) inputs.push_back(random.normal(size_t(count), 4.0f));
        const RingRun run = run_ring(inputs, count);
        for (int r = 0; r < num_ranks; ++r) {
            ASSERT_EQ(run.buffers[size_t(r)], run.buffers[0])
                << "N = " << num_ranks << ", count " << count << ": rank " << r << " holds "
                << "other bits than rank 0; a chunk is summed once, on one rank, then copied";
            for (int64_t i = 0; i < count; ++i) {
                double sum = 0.0, magnitude = 0.0;
                for (const auto& input : inputs) {
                    sum += input[size_t(i)];
                    magnitude += std::abs(input[size_t(i)]);
                }
                ASSERT_NEAR(run.buffers[size_t(r)][size_t(i)], sum, 1e-6 * magnitude + 1e-6)
                    << "N = " << num_ranks << ", rank " << r << ", element " << i;
            }
        }
    }
}

// y = x W^T, a plain loop: (rows, out) from (rows, in) and (out, in).
std::vector<float> plain_matmul(const std::vector<float>& x, const std::vector<float>& w,
                                int64_t rows, int64_t in, int64_t out) {
    std::vector<float> y(size_t(rows * out));
    for (int64_t t = 0; t < rows; ++t) {
        for (int64_t o = 0; o < out; ++o) {
            double sum = 0.0;
            for (int64_t i = 0; i < in; ++i) sum += double(x[t * in + i]) * w[o * in + i];
            y[size_t(t * out + o)] = float(sum);
        }
    }
    return y;
}

std::pair<int64_t, int64_t> piece(int64_t total, int n, int r) {
    return {total * r / n, total * (r + 1) / n};
}

// Column- and row-parallel with N = 5 and 6, dimensions no N divides, 1 and
// 7 rows: the column slices are the whole output's columns; the row-parallel
// partial sums all-reduce to the whole output on every rank.
TEST(HiddenLab07Layers, ColumnSlicesAndRowSumsMatchTheWholeProduct) {
    RandomSource random(703);
    SCOPED_TRACE(random.trace());
    for (int num_ranks : {5, 6}) {
        for (int64_t rows : {int64_t(1), int64_t(7)}) {
            const int64_t in = random.integer(13, 41) | 1, out = random.integer(11, 29) | 1;
            const std::vector<float> x = random.normal(size_t(rows * in));
            const std::vector<float> w = random.normal(size_t(out * in));
            const std::vector<float> whole = plain_matmul(x, w, rows, in, out);
            std::vector<std::vector<float>> columns(static_cast<size_t>(num_ranks));
            std::vector<std::vector<float>> sums(static_cast<size_t>(num_ranks));
            run_thread_ranks(num_ranks, [&](Communicator& comm) {
                const int r = comm.rank();
                const auto [o0, o1] = piece(out, num_ranks, r);
                columns[size_t(r)].assign(size_t(rows * (o1 - o0)), kNaN);
                column_parallel_linear(x.data(),
                                       WeightMatrix::from_floats(
                                           {w.begin() + o0 * in, w.begin() + o1 * in}, o1 - o0, in),
                                       columns[size_t(r)].data(), rows);
                const auto [i0, i1] = piece(in, num_ranks, r);
                std::vector<float> x_shard, w_shard;
                for (int64_t t = 0; t < rows; ++t) {
                    x_shard.insert(x_shard.end(), x.begin() + t * in + i0, x.begin() + t * in + i1);
                }
                for (int64_t o = 0; o < out; ++o) {
                    w_shard.insert(w_shard.end(), w.begin() + o * in + i0, w.begin() + o * in + i1);
                }
                sums[size_t(r)].assign(size_t(rows * out), kNaN);
                row_parallel_linear(x_shard.data(),
                                    WeightMatrix::from_floats(std::move(w_shard), out, i1 - i0),
                                    sums[size_t(r)].data(), rows, comm);
            });
            for (int r = 0; r < num_ranks; ++r) {
                const auto [o0, o1] = piece(out, num_ranks, r);
                std::vector<float> expected;
                for (int64_t t = 0; t < rows; ++t) {
                    expected.insert(expected.end(), whole.begin() + t * out + o0,
                                    whole.begin() + t * out + o1);
                }
                EXPECT_LT(test::max_relative_error(columns[size_t(r)], expected), 1e-5)
                    << "N = " << num_ranks << ", " << rows << " rows, rank " << r << ": a "
                    << "column-parallel layer's output is the whole output's columns [" << o0
                    << ", " << o1 << "), computed from this rank's rows of W, no communication";
                EXPECT_LT(test::max_relative_error(sums[size_t(r)], whole), 1e-5)
                    << "N = " << num_ranks << ", " << rows << " rows, rank " << r << ": a "
                    << "row-parallel layer's partial sums (its input slice times its columns of "
                    << "W) must be all-reduced over every rank into the whole output";
            }
        }
    }
}

ModelConfig sixty_heads(int64_t vocab_size) {
    ModelConfig config;
    config.num_heads = 60;  // splits 1..6 ways
    config.num_kv_heads = 60;
    config.ffn_dim = 61;
    config.vocab_size = vocab_size;
    return config;
}

// Every shard's first and last token, 0 and vocab - 1, repeats, and random ones.
std::vector<TokenId> edge_tokens(RandomSource& random, const ModelConfig& config, int num_ranks) {
    std::vector<TokenId> tokens = {TokenId(config.vocab_size - 1)};
    for (int r = 0; r < num_ranks; ++r) {
        const TensorParallelShard shard = plan_shard(config, num_ranks, r);
        tokens.push_back(TokenId(shard.vocab_begin));
        tokens.push_back(TokenId(shard.vocab_end - 1));
    }
    tokens.push_back(tokens[1]);
    for (int i = 0; i < 3; ++i) tokens.push_back(TokenId(random.integer(0, config.vocab_size - 1)));
    return tokens;
}

WeightMatrix table_shard_of(const std::vector<float>& table, const TensorParallelShard& shard,
                            int64_t dim) {
    return WeightMatrix::from_floats(
        {table.begin() + shard.vocab_begin * dim, table.begin() + shard.vocab_end * dim},
        shard.vocab_rows(), dim);
}

// The embedding: exact rows for tokens on every shard's edge, on every rank,
// with N = 2..6 over a vocabulary of 97 (prime), for one token and for many.
TEST(HiddenLab07Layers, VocabParallelEmbeddingGivesExactRowsAtEveryShardEdge) {
    RandomSource random(704);
    SCOPED_TRACE(random.trace());
    const ModelConfig config = sixty_heads(97);
    const int64_t dim = random.integer(5, 19);
    const std::vector<float> table = random.normal(size_t(config.vocab_size * dim));
    for (int num_ranks = 2; num_ranks <= 6; ++num_ranks) {
        const std::vector<TokenId> many = edge_tokens(random, config, num_ranks);
        for (const std::vector<TokenId>& tokens :
             {std::vector<TokenId>{many.back()}, std::vector<TokenId>{TokenId(0)}, many}) {
            std::vector<std::vector<float>> rows(
                size_t(num_ranks), std::vector<float>(tokens.size() * size_t(dim), kNaN));
            run_thread_ranks(num_ranks, [&](Communicator& comm) {
                const TensorParallelShard shard = plan_shard(config, num_ranks, comm.rank());
                vocab_parallel_embedding(tokens, table_shard_of(table, shard, dim), shard,
                                         rows[size_t(comm.rank())].data(), comm);
            });
            for (int r = 0; r < num_ranks; ++r) {
                for (size_t t = 0; t < tokens.size(); ++t) {
                    const std::vector<float> got(rows[size_t(r)].begin() + long(t) * dim,
                                                 rows[size_t(r)].begin() + long(t + 1) * dim);
                    const std::vector<float> want(table.begin() + tokens[t] * dim,
                                                  table.begin() + (tokens[t] + 1) * dim);
                    ASSERT_EQ(got, want)
                        << "N = " << num_ranks << ", rank " << r << ", position " << t << " of "
                        << tokens.size() << ", token " << tokens[t] << ": the rank whose "
                        << "[vocab_begin, vocab_end) holds the token copies its row, every other "
                        << "rank writes zeros, and one all-reduce completes every row (NaN: a "
                        << "row never written)";
                }
            }
        }
    }
}

// The head: whole logits, in vocabulary order, on every rank, for 1, 2 and 5
// rows with N = 1..6 over a vocabulary of 103 (prime).
TEST(HiddenLab07Layers, VocabParallelHeadGivesWholeLogitsInVocabularyOrder) {
    RandomSource random(705);
    SCOPED_TRACE(random.trace());
    const ModelConfig config = sixty_heads(103);
    const int64_t dim = random.integer(6, 17);
    const std::vector<float> head = random.normal(size_t(config.vocab_size * dim));
    for (int num_ranks = 1; num_ranks <= 6; ++num_ranks) {
        for (int64_t rows : {int64_t(1), int64_t(2), int64_t(5)}) {
            const std::vector<float> x = random.normal(size_t(rows * dim));
            const std::vector<float> whole = plain_matmul(x, head, rows, dim, config.vocab_size);
            std::vector<std::vector<float>> logits(
                size_t(num_ranks), std::vector<float>(size_t(rows * config.vocab_size), kNaN));
            std::vector<int64_t> gathers(static_cast<size_t>(num_ranks), -1);
            std::vector<int64_t> reduces(static_cast<size_t>(num_ranks), -1);
            run_thread_ranks(num_ranks, [&](Communicator& comm) {
                const TensorParallelShard shard = plan_shard(config, num_ranks, comm.rank());
                vocab_parallel_logits(x.data(), table_shard_of(head, shard, dim), rows, shard,
                                      config.vocab_size, logits[size_t(comm.rank())].data(), comm);
                gathers[size_t(comm.rank())] = comm.stats().all_gather_calls;
                reduces[size_t(comm.rank())] = comm.stats().all_reduce_calls;
            });
            for (int r = 0; r < num_ranks; ++r) {
                EXPECT_LT(test::max_relative_error(logits[size_t(r)], whole), 1e-5)
                    << "N = " << num_ranks << ", " << rows << " rows, rank " << r << ": each "
                    << "rank computes its (rows, vocab_rows) slice, the gather concatenates "
                    << "rank 0's whole block, then rank 1's, ..., and every row's columns "
                    << "[vocab_begin, vocab_end) of rank r come from rank r's block (NaN: a "
                    << "logit never written)";
                EXPECT_EQ(gathers[size_t(r)], num_ranks == 1 ? 0 : 1)
                    << "N = " << num_ranks << ", rank " << r << ": the head gathers once "
                    << "(all_gather of every rank's slice), and with one rank the head is whole: "
                    << "nothing to gather";
                EXPECT_EQ(reduces[size_t(r)], 0)
                    << "N = " << num_ranks << ": the head's slices are gathered, never summed";
            }
        }
    }
}

}  // namespace
}  // namespace servelab
