// tensor_parallel_test.cpp — a model split over N ranks computes what the whole model does.
//
// Lab 7 (chapter 11.7, tensor parallelism). Bottom up:
//   the ring all-reduce over shared memory: every rank ends with the sum,
//     the same bits on every rank, in exactly 2(N−1) steps;
//   the parallel layers: column-parallel slices are the whole output's
//     columns, row-parallel partial sums add up to the whole output, the
//     vocab-parallel embedding and head give whole rows;
//   the model: logits with N = 2, 3, 4, 8 (threads) equal N = 1 within fp32
//     tolerance on generated models (GQA, KV heads replicated when N exceeds
//     them, uneven ffn and vocabulary pieces, untied head, quantized
//     weights) and on SmolLM2 split 3 ways; greedy tokens under continuous
//     batching on the paged cache are identical on every rank and equal the
//     whole model's;
//   the cost model: the bytes the collectives count equal the formula
//     (2·layers + 1)·tokens·dim·4 all-reduced and rows·vocab·4 gathered;
//   the MPI back end (TensorParallelMpi.*): the same checks with one process
//     per rank; it runs under `mpirun -np 2` (registered in tests/e2e) and is
//     skipped otherwise.
// Every input is random from the test's seed; outputs are poisoned with NaN.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "reference/engine/engine.h"
#include "reference/engine/model_runner.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/parallel/mpi_communicator.h"
#include "reference/parallel/parallel_linear.h"
#include "reference/parallel/ring_all_reduce.h"
#include "reference/parallel/shard_loader.h"
#include "reference/parallel/tensor_parallel.h"
#include "reference/parallel/thread_communicator.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// [begin, end) of piece r of `total` cut into n nearly equal pieces.
std::pair<int64_t, int64_t> piece(int64_t total, int n, int r) {
    return {total * r / n, total * (r + 1) / n};
}

// ---------------------------------------------------------------- ring all-reduce

TEST(RingAllReduce, EveryRankEndsWithTheSumForAnyRankCountAndLength) {
    RandomSource random;
    for (int num_ranks = 1; num_ranks <= 5; ++num_ranks) {
        for (int64_t length : {1, 2, 3, 7, 64, 1001, 4099}) {
            std::vector<std::vector<float>> buffers;
            for (int r = 0; r < num_ranks; ++r) buffers.push_back(random.normal(size_t(length)));
            std::vector<double> expected(size_t(length), 0.0);
            std::vector<double> magnitude(size_t(length), 0.0);
            for (const auto& buffer : buffers) {
                for (int64_t i = 0; i < length; ++i) {
                    expected[size_t(i)] += buffer[size_t(i)];
                    magnitude[size_t(i)] += std::abs(buffer[size_t(i)]);
                }
            }
            const std::vector<std::vector<float>> inputs = buffers;
            run_thread_ranks(num_ranks, [&](Communicator& comm) {
                comm.all_reduce_sum(buffers[size_t(comm.rank())]);
            });
            for (int r = 0; r < num_ranks; ++r) {
                for (int64_t i = 0; i < length; ++i) {
                    const bool unsummed =
                        buffers[size_t(r)][size_t(i)] == inputs[size_t(r)][size_t(i)];
                    const bool in_remainder = i >= length / num_ranks * num_ranks;
                    ASSERT_NEAR(buffers[size_t(r)][size_t(i)], expected[size_t(i)],
                                1e-6 * magnitude[size_t(i)] + 1e-7)
                        << "rank " << r << " of " << num_ranks << ", element " << i << " of "
                        << length << "; " << random.trace()
                        << (unsummed && in_remainder
                                ? ". It still holds this rank's own value: the last length % N "
                                  "elements were never summed. The N chunks must cover every "
                                  "element (ring_chunk gives sizes that differ by at most one); "
                                  "chunks of length / N drop the remainder"
                                : "");
                }
                // Each chunk is summed on one rank and copied to the others.
                ASSERT_EQ(buffers[size_t(r)], buffers[0])
                    << "rank " << r << " differs from rank 0 (N = " << num_ranks << ")";
            }
        }
    }
}

TEST(RingAllReduce, TakesTwoTimesNMinusOneStepsOfOneChunkEach) {
    RandomSource random;
    for (int num_ranks = 2; num_ranks <= 4; ++num_ranks) {
        const int64_t length = 1000;
        std::vector<std::vector<float>> buffers;
        for (int r = 0; r < num_ranks; ++r) buffers.push_back(random.normal(size_t(length)));
        std::vector<float*> pointers;
        for (auto& buffer : buffers) pointers.push_back(buffer.data());
        std::vector<int> steps(size_t(num_ranks), 0);
        ThreadGroup group(num_ranks);
        // The thread machinery of the back end: a rank that throws releases
        // the others, and its error comes back here.
        run_rank_threads(
            num_ranks,
            [&](int r) {
                group.arrive_and_wait();
                ring_all_reduce(pointers, length, r, [&] {
                    ++steps[size_t(r)];
                    group.arrive_and_wait();
                });
                group.arrive_and_wait();
            },
            [&] { group.abort(); });
        for (int r = 0; r < num_ranks; ++r) {
            EXPECT_EQ(steps[size_t(r)], 2 * (num_ranks - 1))
                << "rank " << r << " of " << num_ranks << ": the ring's reduce-scatter and "
                << "all-gather take N-1 steps each, with a barrier after every step";
        }
        EXPECT_EQ(buffers[1], buffers[0]);
    }
}

// ---------------------------------------------------------------- the thread back end itself

TEST(ThreadCommunicator, GatherAndBroadcastMoveEveryRanksPieceAndCountIt) {
    RandomSource random;
    const int num_ranks = 3;
    const std::vector<int64_t> counts = {5, 0, 9};
    std::vector<std::vector<float>> pieces;
    for (int64_t count : counts) pieces.push_back(random.normal(size_t(count)));
    std::vector<std::vector<float>> gathered(num_ranks, std::vector<float>(14, kNaN));
    std::vector<std::vector<int32_t>> broadcasts(num_ranks, std::vector<int32_t>(4, -1));
    const std::vector<int32_t> message = {7, 11, 13, int32_t(random.integer(0, 1000))};
    std::vector<CommStats> stats(num_ranks);
    run_thread_ranks(num_ranks, [&](Communicator& comm) {
        const size_t r = size_t(comm.rank());
        comm.all_gather(pieces[r], gathered[r], counts);
        if (r == 2) broadcasts[r] = message;
        comm.broadcast(std::as_writable_bytes(std::span(broadcasts[r])), 2);
        stats[r] = comm.stats();
    });
    std::vector<float> expected;
    for (const auto& p : pieces) expected.insert(expected.end(), p.begin(), p.end());
    for (int r = 0; r < num_ranks; ++r) {
        EXPECT_EQ(gathered[size_t(r)], expected) << "rank " << r;
        EXPECT_EQ(broadcasts[size_t(r)], message) << "rank " << r;
        EXPECT_EQ(stats[size_t(r)].all_gather_calls, 1);
        EXPECT_EQ(stats[size_t(r)].all_gather_bytes, 14 * 4);
        EXPECT_EQ(stats[size_t(r)].broadcast_bytes, 16);
    }
}

TEST(ThreadCommunicator, AFailingRankReleasesTheOthersAndItsErrorIsReported) {
    std::atomic<int> released{0};
    const std::string message = test::error_of([&] {
        run_thread_ranks(4, [&](Communicator& comm) {
            if (comm.rank() == 2) throw Error("rank 2 cannot load its shard");
            std::vector<float> data(16, 1.0f);
            try {
                comm.all_reduce_sum(data);  // would wait forever for rank 2
            } catch (const RankAborted&) {
                ++released;
                throw;
            }
        });
    });
    EXPECT_EQ(message, "rank 2 cannot load its shard");
    EXPECT_EQ(released.load(), 3);
}

// ---------------------------------------------------------------- parallel layers

TEST(ParallelLinear, ColumnParallelSlicesAreTheWholeOutputsColumns) {
    RandomSource random;
    const int64_t rows = 5, in_dim = 40, out_dim = 36;
    const std::vector<float> x = random.normal(size_t(rows * in_dim));
    const std::vector<float> w = random.normal(size_t(out_dim * in_dim));
    std::vector<float> whole(size_t(rows * out_dim));
    matmul(x.data(), w.data(), whole.data(), rows, in_dim, out_dim);
    for (int num_ranks : {1, 2, 3, 4}) {
        std::vector<std::vector<float>> slices(static_cast<size_t>(num_ranks));
        run_thread_ranks(num_ranks, [&](Communicator& comm) {
            const auto [begin, end] = piece(out_dim, num_ranks, comm.rank());
            const WeightMatrix w_shard = WeightMatrix::from_floats(
                std::vector<float>(w.begin() + begin * in_dim, w.begin() + end * in_dim),
                end - begin, in_dim);
            std::vector<float>& y = slices[size_t(comm.rank())];
            y.assign(size_t(rows * (end - begin)), kNaN);
            column_parallel_linear(x.data(), w_shard, y.data(), rows);
        });
        for (int r = 0; r < num_ranks; ++r) {
            const auto [begin, end] = piece(out_dim, num_ranks, r);
            for (int64_t t = 0; t < rows; ++t) {
                for (int64_t o = begin; o < end; ++o) {
                    ASSERT_NEAR(slices[size_t(r)][size_t(t * (end - begin) + o - begin)],
                                whole[size_t(t * out_dim + o)], 1e-4)
                        << "N = " << num_ranks << ", rank " << r << ", row " << t << ", column "
                        << o << "; " << random.trace();
                }
            }
        }
    }
}

TEST(ParallelLinear, RowParallelPartialSumsAddUpToTheWholeOutputOnEveryRank) {
    RandomSource random;
    const int64_t rows = 6, in_dim = 48, out_dim = 20;
    const std::vector<float> x = random.normal(size_t(rows * in_dim));
    const std::vector<float> w = random.normal(size_t(out_dim * in_dim));
    std::vector<float> whole(size_t(rows * out_dim));
    matmul(x.data(), w.data(), whole.data(), rows, in_dim, out_dim);
    for (int num_ranks : {1, 2, 3, 4}) {
        std::vector<std::vector<float>> outputs(size_t(num_ranks),
                                                std::vector<float>(size_t(rows * out_dim), kNaN));
        run_thread_ranks(num_ranks, [&](Communicator& comm) {
            const auto [begin, end] = piece(in_dim, num_ranks, comm.rank());
            const int64_t width = end - begin;
            std::vector<float> x_shard, w_shard;
            for (int64_t t = 0; t < rows; ++t) {
                x_shard.insert(x_shard.end(), x.begin() + t * in_dim + begin,
                               x.begin() + t * in_dim + end);
            }
            for (int64_t o = 0; o < out_dim; ++o) {
                w_shard.insert(w_shard.end(), w.begin() + o * in_dim + begin,
                               w.begin() + o * in_dim + end);
            }
            row_parallel_linear(x_shard.data(),
                                WeightMatrix::from_floats(std::move(w_shard), out_dim, width),
                                outputs[size_t(comm.rank())].data(), rows, comm);
        });
        for (int r = 0; r < num_ranks; ++r) {
            EXPECT_LT(test::max_relative_error(outputs[size_t(r)], whole), 1e-5)
                << "N = " << num_ranks << ", rank " << r << "; " << random.trace();
        }
    }
}

TEST(ParallelLinear, VocabParallelEmbeddingAndHeadGiveWholeRowsOnEveryRank) {
    RandomSource random;
    ModelConfig config;
    config.num_heads = 12;
    config.num_kv_heads = 12;
    config.ffn_dim = 30;
    config.vocab_size = 1001;  // splits unevenly 2, 3 and 4 ways
    const int64_t dim = 24, rows = 9;
    const std::vector<float> table = random.normal(size_t(config.vocab_size * dim));
    const std::vector<float> x = random.normal(size_t(rows * dim));
    std::vector<float> whole_logits(size_t(rows * config.vocab_size));
    matmul(x.data(), table.data(), whole_logits.data(), rows, dim, config.vocab_size);
    std::vector<TokenId> tokens = {0, TokenId(config.vocab_size - 1), 500, 501, 250, 251, 750};
    for (int i = 0; i < 5; ++i) tokens.push_back(TokenId(random.integer(0, config.vocab_size - 1)));

    for (int num_ranks : {1, 2, 3, 4}) {
        std::vector<std::vector<float>> embedded(num_ranks);
        std::vector<std::vector<float>> logits(num_ranks);
        run_thread_ranks(num_ranks, [&](Communicator& comm) {
            const TensorParallelShard shard = plan_shard(config, num_ranks, comm.rank());
            const WeightMatrix table_shard = WeightMatrix::from_floats(
                std::vector<float>(table.begin() + shard.vocab_begin * dim,
                                   table.begin() + shard.vocab_end * dim),
                shard.vocab_rows(), dim);
            std::vector<float>& e = embedded[size_t(comm.rank())];
            e.assign(tokens.size() * size_t(dim), kNaN);
            vocab_parallel_embedding(tokens, table_shard, shard, e.data(), comm);
            std::vector<float>& l = logits[size_t(comm.rank())];
            l.assign(size_t(rows * config.vocab_size), kNaN);
            vocab_parallel_logits(x.data(), table_shard, rows, shard, config.vocab_size, l.data(),
                                  comm);
        });
        for (int r = 0; r < num_ranks; ++r) {
            for (size_t t = 0; t < tokens.size(); ++t) {
                const std::vector<float> row(embedded[size_t(r)].begin() + int64_t(t) * dim,
                                             embedded[size_t(r)].begin() + int64_t(t + 1) * dim);
                const std::vector<float> expected(table.begin() + tokens[t] * dim,
                                                  table.begin() + (tokens[t] + 1) * dim);
                const bool poisoned =
                    std::any_of(row.begin(), row.end(), [](float v) { return std::isnan(v); });
                ASSERT_EQ(row, expected)
                    << "N = " << num_ranks << ", rank " << r << ", token " << tokens[t] << "; "
                    << random.trace()
                    << (poisoned ? ". The row is NaN, what the buffer held before the call: on "
                                   "the ranks that do not hold a token its row must be zeros "
                                   "before the all-reduce adds the ranks' rows"
                                 : "");
            }
            EXPECT_LT(test::max_relative_error(logits[size_t(r)], whole_logits), 1e-5)
                << "N = " << num_ranks << ", rank " << r << "; " << random.trace();
        }
    }
}

// ---------------------------------------------------------------- plans

TEST(TensorParallelPlan, RefusesSizesThatDoNotSplitTheHeadsNamingTheValidOnes) {
    ModelConfig smollm2;  // SmolLM2-135M's heads
    smollm2.num_heads = 9;
    smollm2.num_kv_heads = 3;
    smollm2.ffn_dim = 1536;
    smollm2.vocab_size = 49152;
    EXPECT_EQ(valid_tensor_parallel_sizes(smollm2), (std::vector<int>{1, 3, 9}));
    const std::string message = test::error_of([&] { plan_shard(smollm2, 2, 0); });
    EXPECT_NE(message.find("9 query heads and 3 KV heads"), std::string::npos) << message;
    EXPECT_NE(message.find("valid --tp: 1, 3, 9"), std::string::npos) << message;
    ModelConfig mla = smollm2;
    mla.attention = AttentionKind::kLatent;
    EXPECT_EQ(valid_tensor_parallel_sizes(mla), (std::vector<int>{1}));
}

TEST(TensorParallelPlan, ShardsCoverEveryHeadFeatureAndVocabularyRowExactlyOnce) {
    ModelConfig config;
    config.num_heads = 8;
    config.num_kv_heads = 2;
    config.ffn_dim = 101;
    config.vocab_size = 1003;
    for (int num_ranks : {1, 2, 4, 8}) {
        int64_t ffn_next = 0, vocab_next = 0, q_next = 0;
        for (int r = 0; r < num_ranks; ++r) {
            const TensorParallelShard shard = plan_shard(config, num_ranks, r);
            const ModelConfig local = local_config(config, shard);
            EXPECT_EQ(shard.q_head_begin, q_next);
            q_next += local.num_heads;
            EXPECT_EQ(shard.ffn_begin, ffn_next);
            ffn_next = shard.ffn_end;
            EXPECT_EQ(shard.vocab_begin, vocab_next);
            vocab_next = shard.vocab_end;
            // Each of this rank's query heads reads a KV head this rank holds.
            for (int64_t h = 0; h < local.num_heads; ++h) {
                const int64_t kv = (shard.q_head_begin + h) / config.heads_per_kv_head();
                EXPECT_GE(kv, shard.kv_head_begin);
                EXPECT_LT(kv, shard.kv_head_begin + local.num_kv_heads);
            }
        }
        EXPECT_EQ(q_next, config.num_heads);
        EXPECT_EQ(ffn_next, config.ffn_dim);
        EXPECT_EQ(vocab_next, config.vocab_size);
    }
}

// ---------------------------------------------------------------- the model

struct SplitCase {
    TinyModelOptions model;
    std::vector<int> sizes;
    const char* what;
};

std::vector<SplitCase> split_cases() {
    std::vector<SplitCase> cases;
    TinyModelOptions gqa;  // 8 query heads, 4 KV heads
    gqa.num_layers = 3;
    gqa.dim = 64;
    gqa.num_heads = 8;
    gqa.num_kv_heads = 4;
    gqa.ffn_dim = 96;
    cases.push_back({gqa, {2, 4}, "GQA 8/4"});
    TinyModelOptions replicated = gqa;  // fewer KV heads than ranks
    replicated.num_kv_heads = 2;
    cases.push_back({replicated, {4, 8}, "GQA 8/2, KV heads replicated"});
    TinyModelOptions uneven = gqa;  // 6/3 heads, ffn 100 and an untied head
    uneven.num_heads = 6;
    uneven.num_kv_heads = 3;
    uneven.dim = 48;
    uneven.ffn_dim = 100;
    uneven.tied_embeddings = false;
    cases.push_back({uneven, {3}, "MHA-ish 6/3, uneven ffn, untied head"});
    TinyModelOptions quantized = gqa;  // row and column slices of Q8_0 blocks
    quantized.weight_type = GgmlType::kQ8_0;
    cases.push_back({quantized, {2}, "Q8_0 weights"});
    return cases;
}

// The logits of a prefill (every row) and then each decode step, through a
// contiguous cache, on one rank's runner.
std::vector<std::vector<float>> logits_of_steps(ModelRunner& runner, const ModelConfig& config,
                                                const std::vector<TokenId>& prompt,
                                                const std::vector<TokenId>& next_tokens) {
    KvCache cache(config, int64_t(prompt.size() + next_tokens.size()));
    std::vector<std::vector<float>> steps;
    steps.push_back(runner.forward({prompt, 0, LogitsFor::kAllTokens}, &cache));
    int64_t position = int64_t(prompt.size());
    for (TokenId token : next_tokens) {
        const std::vector<TokenId> one = {token};
        steps.push_back(runner.forward({one, position++, LogitsFor::kLastToken}, &cache));
    }
    return steps;
}

TEST(TensorParallelModel, LogitsEqualTheWholeModelsForEverySplit) {
    RandomSource random;
    for (SplitCase split : split_cases()) {
        split.model.seed = random.seed();
        const std::vector<uint8_t> bytes = make_tiny_model(split.model);
        const Model whole = Model::from_gguf(GgufFile::parse(bytes));
        ModelRunner whole_runner(whole.config, whole.weights);
        std::vector<TokenId> prompt, next;
        for (int i = 0; i < 13; ++i) {
            prompt.push_back(TokenId(random.integer(0, whole.config.vocab_size - 1)));
        }
        for (int i = 0; i < 3; ++i) {
            next.push_back(TokenId(random.integer(0, whole.config.vocab_size - 1)));
        }
        const auto expected = logits_of_steps(whole_runner, whole.config, prompt, next);
        for (int num_ranks : split.sizes) {
            std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(num_ranks));
            std::vector<int64_t> reduce_calls(static_cast<size_t>(num_ranks));
            run_thread_ranks(num_ranks, [&](Communicator& comm) {
                ModelShard shard =
                    model_shard_from_gguf(GgufFile::parse(bytes), num_ranks, comm.rank());
                ModelRunner runner(shard.model.config, shard.model.weights, shard.shard, comm);
                got[size_t(comm.rank())] =
                    logits_of_steps(runner, shard.model.config, prompt, next);
                reduce_calls[size_t(comm.rank())] = comm.stats().all_reduce_calls;
            });
            // 1 + 3 steps, each: the embedding and 2 per layer.
            const int64_t needed = int64_t(1 + next.size()) * (2 * whole.config.num_layers + 1);
            for (int r = 0; r < num_ranks; ++r) {
                for (size_t step = 0; step < expected.size(); ++step) {
                    const double error =
                        test::max_relative_error(got[size_t(r)][step], expected[step]);
                    EXPECT_LT(error, 1e-4)
                        << split.what << ", N = " << num_ranks << ", rank " << r << ", step "
                        << step << "; " << random.trace()
                        << (reduce_calls[size_t(r)] < needed
                                ? fmt::format(". The ranks all-reduced {} times in 4 steps where "
                                              "{} are needed (each step: the embedding, and each "
                                              "layer's two row-parallel projections): a "
                                              "row-parallel layer's partial sums must be summed "
                                              "over the ranks",
                                              reduce_calls[size_t(r)], needed)
                                : "");
                }
                EXPECT_EQ(got[size_t(r)], got[0]) << "every rank gathers the same logits";
            }
        }
    }
}

// A batch of greedy requests through an Engine on a paged pool: small token
// budget (prompts are chunked) and few blocks (requests wait for memory).
struct EngineRun {
    std::vector<std::vector<TokenId>> tokens;
    std::vector<std::vector<SampledLogprobs>> logprobs;  // 2 rivals per token
    int64_t kv_block_bytes = 0;
    int64_t blocks_in_use_after = -1;
};

EngineRun run_engine(const Model& model, ModelRunner& runner,
                     const std::vector<std::vector<TokenId>>& prompts) {
    EngineConfig config;
    config.scheduler.max_num_batched_tokens = 24;
    config.num_kv_blocks = 40;
    config.block_size = 4;
    config.prefix_cache = PrefixCacheKind::kNone;  // so every block is free again at the end
    Engine engine(model, runner, config);
    SamplingParams params;
    params.max_tokens = 10;
    params.temperature = 0.0f;
    params.logprobs = 2;
    EngineRun run;
    for (const GenerationResult& result : engine.generate(prompts, params)) {
        run.tokens.push_back(result.tokens);
        run.logprobs.push_back(result.logprobs);
    }
    run.kv_block_bytes = PagedKvCache::block_bytes(model.config, config.block_size);
    run.blocks_in_use_after = engine.kv().cache().allocator().num_used();
    return run;
}

TEST(TensorParallelModel, GreedyTokensUnderContinuousBatchingEqualTheWholeModels) {
    RandomSource random;
    TinyModelOptions options = split_cases()[0].model;
    options.seed = random.seed();
    const std::vector<uint8_t> bytes = make_tiny_model(options);
    const Model whole = Model::from_gguf(GgufFile::parse(bytes));
    ModelRunner whole_runner(whole.config, whole.weights);
    std::vector<std::vector<TokenId>> prompts;
    for (int i = 0; i < 6; ++i) {
        std::vector<TokenId> prompt;
        const int64_t length = random.integer(3, 40);
        for (int64_t t = 0; t < length; ++t) {
            prompt.push_back(TokenId(random.integer(0, whole.config.vocab_size - 1)));
        }
        prompts.push_back(prompt);
    }
    const EngineRun expected = run_engine(whole, whole_runner, prompts);
    for (int num_ranks : {2, 4}) {
        std::vector<EngineRun> runs(static_cast<size_t>(num_ranks));
        run_thread_ranks(num_ranks, [&](Communicator& comm) {
            ModelShard shard =
                model_shard_from_gguf(GgufFile::parse(bytes), num_ranks, comm.rank());
            ModelRunner runner(shard.model.config, shard.model.weights, shard.shard, comm);
            runs[size_t(comm.rank())] = run_engine(shard.model, runner, prompts);
        });
        for (int r = 0; r < num_ranks; ++r) {
            EXPECT_EQ(runs[size_t(r)].tokens, expected.tokens)
                << "N = " << num_ranks << ", rank " << r << "; " << random.trace();
            // Logprobs: rank 0's on every rank (broadcast with the tokens),
            // the whole model's within rounding.
            for (size_t p = 0; p < prompts.size(); ++p) {
                const auto& mine = runs[size_t(r)].logprobs[p];
                const auto& whole_lp = expected.logprobs[p];
                ASSERT_EQ(mine.size(), whole_lp.size()) << "rank " << r;
                for (size_t t = 0; t < mine.size(); ++t) {
                    EXPECT_EQ(mine[t].chosen.logprob, runs[0].logprobs[p][t].chosen.logprob)
                        << "every rank must report rank 0's logprobs; rank " << r;
                    EXPECT_NEAR(mine[t].chosen.logprob, whole_lp[t].chosen.logprob, 1e-4);
                    ASSERT_EQ(mine[t].top.size(), 2u);
                    EXPECT_EQ(mine[t].top[1].token, runs[0].logprobs[p][t].top[1].token);
                }
            }
            // Each rank pages only its own KV heads: 1/N of a block's bytes.
            EXPECT_EQ(runs[size_t(r)].kv_block_bytes * num_ranks, expected.kv_block_bytes);
            EXPECT_EQ(runs[size_t(r)].blocks_in_use_after, 0) << "rank " << r;
        }
    }
}

TEST(TensorParallelModel, SmolLM2SplitThreeWaysMatchesTheWholeModel) {
    const std::string path = test::source_path(test::kSmolLm2Path);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not downloaded";
    const Model whole = Model::load(path);
    ModelRunner whole_runner(whole.config, whole.weights);
    const std::vector<TokenId> prompt =
        whole.tokenizer.encode("Tensor parallelism splits every layer across", false);
    SamplingParams params;
    params.max_tokens = 12;
    params.temperature = 0.0f;
    KvCache whole_cache(whole.config, 64);
    const std::vector<float> expected =
        whole_runner.forward({prompt, 0, LogitsFor::kAllTokens}, &whole_cache);
    const std::vector<TokenId> expected_tokens =
        generate(whole_runner, whole.config, whole.tokenizer, prompt, params).tokens;
    std::vector<std::vector<float>> logits(3);
    std::vector<std::vector<TokenId>> tokens(3);
    run_thread_ranks(3, [&](Communicator& comm) {
        ModelShard shard = load_model_shard(path, 3, comm.rank());
        ModelRunner runner(shard.model.config, shard.model.weights, shard.shard, comm);
        KvCache cache(shard.model.config, 64);
        logits[size_t(comm.rank())] = runner.forward({prompt, 0, LogitsFor::kAllTokens}, &cache);
        tokens[size_t(comm.rank())] =
            generate(runner, shard.model.config, shard.model.tokenizer, prompt, params).tokens;
    });
    for (int r = 0; r < 3; ++r) {
        const double error = test::max_relative_error(logits[size_t(r)], expected);
        std::printf("SmolLM2, N = 3, rank %d: max |logit difference| / max |logit| = %.2e\n", r,
                    error);
        EXPECT_LT(error, 1e-4) << "rank " << r;
        EXPECT_EQ(tokens[size_t(r)], expected_tokens) << "rank " << r;
    }
}

// ---------------------------------------------------------------- the cost model

// With one rank the head is whole: there is nothing to gather.
TEST(TensorParallelCost, OneRankGathersNothing) {
    RandomSource random;
    ModelConfig config;
    config.num_heads = 4;
    config.num_kv_heads = 4;
    config.ffn_dim = 16;
    config.vocab_size = 50;
    const int64_t dim = 8, rows = 3;
    const std::vector<float> table = random.normal(size_t(config.vocab_size * dim));
    const std::vector<float> x = random.normal(size_t(rows * dim));
    std::vector<float> whole(size_t(rows * config.vocab_size));
    matmul(x.data(), table.data(), whole.data(), rows, dim, config.vocab_size);
    std::vector<float> logits(whole.size(), kNaN);
    int64_t gathers = -1;
    run_thread_ranks(1, [&](Communicator& comm) {
        const TensorParallelShard shard = plan_shard(config, 1, 0);
        const WeightMatrix head = WeightMatrix::from_floats(table, config.vocab_size, dim);
        vocab_parallel_logits(x.data(), head, rows, shard, config.vocab_size, logits.data(), comm);
        gathers = comm.stats().all_gather_calls;
    });
    EXPECT_LT(test::max_relative_error(logits, whole), 1e-5);
    EXPECT_EQ(gathers, 0) << "with one rank the head is whole: vocab_parallel_logits has "
                             "nothing to gather, yet it called all_gather";
}

TEST(TensorParallelCost, CollectivesMoveExactlyWhatTheFormulaSaysEveryStep) {
    RandomSource random;
    TinyModelOptions options = split_cases()[0].model;
    options.seed = random.seed();
    const std::vector<uint8_t> bytes = make_tiny_model(options);
    const int num_ranks = 2;
    std::vector<std::vector<std::string>> problems(num_ranks);
    run_thread_ranks(num_ranks, [&](Communicator& comm) {
        ModelShard shard = model_shard_from_gguf(GgufFile::parse(bytes), num_ranks, comm.rank());
        ModelRunner runner(shard.model.config, shard.model.weights, shard.shard, comm);
        EngineConfig config;
        config.scheduler.max_num_batched_tokens = 16;
        config.block_size = 4;
        Engine engine(shard.model, runner, config);
        SamplingParams params;
        params.max_tokens = 6;
        params.temperature = 0.0f;
        for (int64_t length : {5, 23, 9}) {
            engine.add_request(std::vector<TokenId>(size_t(length), TokenId(40 + length)), params);
        }
        while (engine.has_unfinished()) {
            const CommStats before = comm.stats();
            const int64_t tokens_before = runner.num_tokens_computed();
            const int64_t rows_before = runner.num_logit_rows_computed();
            engine.step();
            const int64_t tokens = runner.num_tokens_computed() - tokens_before;
            const int64_t rows = runner.num_logit_rows_computed() - rows_before;
            if (tokens == 0) continue;
            const CommStats& after = comm.stats();
            const int64_t reduced = after.all_reduce_bytes - before.all_reduce_bytes;
            const int64_t gathered = after.all_gather_bytes - before.all_gather_bytes;
            const ModelConfig& c = shard.model.config;
            if (reduced != (2 * c.num_layers + 1) * tokens * c.dim * 4 ||
                reduced != all_reduce_bytes_per_step(c, tokens) ||
                after.all_reduce_calls - before.all_reduce_calls != 2 * c.num_layers + 1 ||
                gathered != rows * c.vocab_size * 4 ||
                gathered != head_gather_bytes_per_step(c, rows)) {
                problems[size_t(comm.rank())].push_back(
                    fmt::format("{} tokens, {} logit rows: {} bytes all-reduced in {} calls, {} "
                                "gathered",
                                tokens, rows, reduced,
                                after.all_reduce_calls - before.all_reduce_calls, gathered));
            }
        }
    });
    for (int r = 0; r < num_ranks; ++r) {
        EXPECT_TRUE(problems[size_t(r)].empty())
            << "rank " << r << ", first: " << problems[size_t(r)].front();
    }
}

// ---------------------------------------------------------------- MPI

// Runs only under `mpirun -np N` (N ≥ 2): one process per rank.
TEST(TensorParallelMpi, LogitsAndGreedyTokensEqualTheWholeModel) {
    const int world = mpi_launched_world_size();
    if (world < 2) GTEST_SKIP() << "not started by mpirun with 2 or more processes";
    if (!mpi_available()) GTEST_SKIP() << "this build has no MPI";
    std::unique_ptr<Communicator> comm = make_mpi_communicator(world);
    // Every process draws the same model and prompt: rank 0's seed.
    std::vector<uint64_t> seed = {test::test_seed()};
    broadcast_vector(*comm, seed, 0);
    TinyModelOptions options = split_cases()[0].model;
    options.seed = seed[0];
    const std::vector<uint8_t> bytes = make_tiny_model(options);
    const Model whole = Model::from_gguf(GgufFile::parse(bytes));
    ModelRunner whole_runner(whole.config, whole.weights);
    std::mt19937_64 rng(seed[0]);
    std::vector<TokenId> prompt;
    for (int i = 0; i < 11; ++i)
        prompt.push_back(TokenId(rng() % uint64_t(whole.config.vocab_size)));
    const std::vector<TokenId> next = {TokenId(rng() % 200), TokenId(rng() % 200)};
    const auto expected = logits_of_steps(whole_runner, whole.config, prompt, next);

    ModelShard shard = model_shard_from_gguf(GgufFile::parse(bytes), world, comm->rank());
    ModelRunner runner(shard.model.config, shard.model.weights, shard.shard, *comm);
    const auto got = logits_of_steps(runner, shard.model.config, prompt, next);
    for (size_t step = 0; step < expected.size(); ++step) {
        EXPECT_LT(test::max_relative_error(got[step], expected[step]), 1e-4)
            << "rank " << comm->rank() << " of " << world << ", step " << step << ", seed "
            << seed[0];
    }
    std::vector<std::vector<TokenId>> prompts = {prompt, std::vector<TokenId>(30, 77), next};
    const CommStats before = comm->stats();
    const EngineRun split_run = run_engine(shard.model, runner, prompts);
    EXPECT_GT(comm->stats().all_reduce_bytes, before.all_reduce_bytes);
    EXPECT_EQ(split_run.tokens, run_engine(whole, whole_runner, prompts).tokens)
        << "rank " << comm->rank() << ", seed " << seed[0];
    comm->barrier();
}

}  // namespace
}  // namespace servelab
