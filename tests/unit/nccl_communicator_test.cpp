// nccl_communicator_test.cpp — the NCCL back end's collectives against sums done on the host.
//
// Lab 7 (chapter 11.7). Built only when CMake found NCCL. Rank r of n
// (n = the GPUs here, at most 4) runs on its own thread with GPU r, as the
// engine's ranks do; at n = 1 every collective still goes through NCCL. On
// a machine without a usable GPU the tests skip with the runtime's reason,
// except the one checking that this case is a clear error.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_NCCL
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "reference/parallel/nccl_communicator.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

constexpr int kMaxRanks = 4;

class NcclCommunicatorTest : public test::CudaTest {
  protected:
    void SetUp() override {
        test::CudaTest::SetUp();
        if (IsSkipped()) return;
        gpus_ = int(cuda::query_devices().devices.size());
        ranks_ = std::min(gpus_, kMaxRanks);
        comms_ = make_nccl_communicators(ranks_);
        ASSERT_EQ(int(comms_.size()), ranks_);
    }

    // Runs body(rank) on one thread per rank and waits for all. An
    // exception is recorded as a failure of its rank (a rank that throws
    // before a collective would leave the others waiting in NCCL, so the
    // bodies below throw only from a collective that every rank reached).
    void on_every_rank(const std::function<void(int rank)>& body) {
        std::vector<std::string> errors(static_cast<size_t>(ranks_));
        std::vector<std::thread> threads;
        for (int rank = 0; rank < ranks_; ++rank) {
            threads.emplace_back([&, rank] {
                try {
                    body(rank);
                } catch (const std::exception& e) {
                    errors[size_t(rank)] = e.what();
                }
            });
        }
        for (std::thread& thread : threads) thread.join();
        for (int rank = 0; rank < ranks_; ++rank) {
            EXPECT_EQ(errors[size_t(rank)], "") << "rank " << rank;
        }
    }

    int gpus_ = 0;
    int ranks_ = 0;
    std::vector<std::unique_ptr<Communicator>> comms_;
};

TEST_F(NcclCommunicatorTest, KnowsItsRankSizeAndBackend) {
    for (int rank = 0; rank < ranks_; ++rank) {
        const Communicator& comm = *comms_[size_t(rank)];
        EXPECT_EQ(comm.rank(), rank);
        EXPECT_EQ(comm.size(), ranks_);
        EXPECT_EQ(comm.backend(), "nccl");
        EXPECT_EQ(dynamic_cast<const NcclCommunicator&>(comm).device(), rank);
    }
}

// Lengths from one element to 4 MiB, odd ones included, so no size works
// only because it divides evenly into NCCL's chunks.
TEST_F(NcclCommunicatorTest, AllReduceSumMatchesTheFp64SumOverRanks) {
    const std::vector<size_t> lengths = {1, 7, 4099, size_t(1) << 20};
    // inputs[i][r]: rank r's buffer for lengths[i], from its own generator.
    std::vector<std::vector<std::vector<float>>> inputs(lengths.size());
    for (int rank = 0; rank < ranks_; ++rank) {
        test::RandomSource random(uint64_t(rank) + 1);  // a std::mt19937_64 per rank
        for (size_t i = 0; i < lengths.size(); ++i) {
            inputs[i].push_back(random.normal(lengths[i]));
        }
    }
    std::vector<std::vector<std::vector<float>>> outputs = inputs;
    on_every_rank([&](int rank) {
        for (size_t i = 0; i < lengths.size(); ++i) {
            comms_[size_t(rank)]->all_reduce_sum(outputs[i][size_t(rank)]);
        }
    });

    // The fp32 sum of n values is off by at most about (n - 1) float
    // epsilons of the sum of their magnitudes, whatever order NCCL adds
    // them in; relative to that magnitude (not to the sum, which can
    // cancel to near zero), 1e-5 is a wide margin.
    for (size_t i = 0; i < lengths.size(); ++i) {
        size_t bad = 0;
        for (size_t k = 0; k < lengths[i]; ++k) {
            double sum = 0.0;
            double magnitude = 0.0;
            for (int r = 0; r < ranks_; ++r) {
                sum += double(inputs[i][size_t(r)][k]);
                magnitude += std::fabs(double(inputs[i][size_t(r)][k]));
            }
            for (int rank = 0; rank < ranks_; ++rank) {
                const double got = double(outputs[i][size_t(rank)][k]);
                if (!(std::fabs(got - sum) <= 1e-5 * magnitude + 1e-30)) {
                    if (++bad <= 3) {
                        ADD_FAILURE() << "length " << lengths[i] << ", rank " << rank << ", [" << k
                                      << "]: " << got << ", expected " << sum << " ("
                                      << random_.trace() << ")";
                    }
                }
            }
        }
        EXPECT_EQ(bad, 0u) << "length " << lengths[i];
    }

    int64_t total_bytes = 0;
    for (size_t length : lengths) total_bytes += int64_t(length * sizeof(float));
    for (const auto& comm : comms_) {
        EXPECT_EQ(comm->stats().all_reduce_calls, int64_t(lengths.size()));
        EXPECT_EQ(comm->stats().all_reduce_bytes, total_bytes);
        EXPECT_EQ(comm->stats().all_gather_calls, 0);
        EXPECT_EQ(comm->stats().broadcast_calls, 0);
    }
}

// Pieces of different lengths (one empty, where there are two ranks or
// more), each rank's values telling rank and position apart.
TEST_F(NcclCommunicatorTest, AllGatherPutsUnevenPiecesInRankOrder) {
    std::vector<int64_t> counts;
    for (int rank = 0; rank < ranks_; ++rank) {
        counts.push_back(rank == 1 ? 0 : 1000 + 37 * rank);
    }
    const auto value = [](int rank, int64_t k) { return float(rank) * 1e4f + float(k); };
    std::vector<float> expected;
    for (int rank = 0; rank < ranks_; ++rank) {
        for (int64_t k = 0; k < counts[size_t(rank)]; ++k) expected.push_back(value(rank, k));
    }
    const int calls = 3;  // the staging buffer is reused between calls
    std::vector<std::vector<float>> gathered(static_cast<size_t>(ranks_));
    on_every_rank([&](int rank) {
        std::vector<float> mine;
        for (int64_t k = 0; k < counts[size_t(rank)]; ++k) mine.push_back(value(rank, k));
        for (int call = 0; call < calls; ++call) {
            std::vector<float> all(expected.size(), -1.0f);
            comms_[size_t(rank)]->all_gather(mine, all, counts);
            gathered[size_t(rank)] = all;
        }
    });
    for (int rank = 0; rank < ranks_; ++rank) {
        EXPECT_EQ(gathered[size_t(rank)], expected) << "rank " << rank;
        const CommStats& stats = comms_[size_t(rank)]->stats();
        EXPECT_EQ(stats.all_gather_calls, calls);
        EXPECT_EQ(stats.all_gather_bytes, int64_t(calls * expected.size() * sizeof(float)));
        EXPECT_EQ(stats.all_reduce_calls, 0);
    }
}

TEST_F(NcclCommunicatorTest, BroadcastCopiesTheLastRanksBytesEverywhere) {
    const int root = ranks_ - 1;
    const std::vector<size_t> sizes = {1, 13, (size_t(1) << 16) + 3};
    const auto byte_of = [](size_t size, size_t k) { return std::byte((k * 31 + size) & 0xFF); };
    std::vector<std::vector<std::vector<std::byte>>> received(static_cast<size_t>(ranks_));
    on_every_rank([&](int rank) {
        for (size_t size : sizes) {
            std::vector<std::byte> data(size, std::byte(0xEE));
            if (rank == root) {
                for (size_t k = 0; k < size; ++k) data[k] = byte_of(size, k);
            }
            comms_[size_t(rank)]->broadcast(data, root);
            received[size_t(rank)].push_back(data);
        }
        // The helper the engine uses for its sampled tokens: a length, then elements.
        std::vector<int32_t> tokens;
        if (rank == root) tokens = {5, -1, 70000};
        broadcast_vector(*comms_[size_t(rank)], tokens, root);
        EXPECT_EQ(tokens, (std::vector<int32_t>{5, -1, 70000})) << "rank " << rank;
    });
    int64_t total_bytes = 0;
    for (size_t size : sizes) total_bytes += int64_t(size);
    total_bytes += int64_t(sizeof(int64_t) + 3 * sizeof(int32_t));
    for (int rank = 0; rank < ranks_; ++rank) {
        ASSERT_EQ(received[size_t(rank)].size(), sizes.size());
        for (size_t i = 0; i < sizes.size(); ++i) {
            size_t wrong = 0;
            for (size_t k = 0; k < sizes[i]; ++k) {
                wrong += received[size_t(rank)][i][k] != byte_of(sizes[i], k);
            }
            EXPECT_EQ(wrong, 0u) << "rank " << rank << ", " << sizes[i] << " bytes";
        }
        const CommStats& stats = comms_[size_t(rank)]->stats();
        EXPECT_EQ(stats.broadcast_calls, int64_t(sizes.size()) + 2);
        EXPECT_EQ(stats.broadcast_bytes, total_bytes);
    }
}

TEST_F(NcclCommunicatorTest, BarrierReturnsOnEveryRank) {
    on_every_rank([&](int rank) {
        for (int i = 0; i < 3; ++i) comms_[size_t(rank)]->barrier();
    });
    for (const auto& comm : comms_) EXPECT_EQ(comm->stats().all_reduce_calls, 0);
}

// The device-side entry point a GPU runner uses: sums in place on the GPU.
// Small integers, so the sum is exact in any order.
TEST_F(NcclCommunicatorTest, AllReduceDeviceSumsInPlaceOnTheStream) {
    const size_t length = 4099;
    std::vector<std::vector<float>> results(static_cast<size_t>(ranks_));
    on_every_rank([&](int rank) {
        auto& comm = dynamic_cast<NcclCommunicator&>(*comms_[size_t(rank)]);
        SERVELAB_CUDA_CHECK(cudaSetDevice(comm.device()));
        std::vector<float> host(length);
        for (size_t k = 0; k < length; ++k) host[k] = float(rank + 1) * float(k % 97);
        cuda::DeviceBuffer<float> buffer = test::on_device(host);
        cudaStream_t stream = nullptr;
        SERVELAB_CUDA_CHECK(cudaStreamCreate(&stream));
        comm.all_reduce_device(buffer.data(), int64_t(length), stream);
        SERVELAB_CUDA_CHECK(cudaStreamSynchronize(stream));
        SERVELAB_CUDA_CHECK(cudaStreamDestroy(stream));
        results[size_t(rank)] = buffer.download();
    });
    const float rank_sum = float(ranks_ * (ranks_ + 1) / 2);  // 1 + 2 + … + n
    for (int rank = 0; rank < ranks_; ++rank) {
        ASSERT_EQ(results[size_t(rank)].size(), length);
        for (size_t k = 0; k < length; ++k) {
            ASSERT_EQ(results[size_t(rank)][k], rank_sum * float(k % 97))
                << "rank " << rank << ", [" << k << "]";
        }
    }
}

TEST(NcclCommunicator, MoreRanksThanGpusIsAnErrorNamingBoth) {
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        GTEST_SKIP() << "no usable GPU: " << (query.error.empty() ? "no devices" : query.error);
    }
    const int gpus = int(query.devices.size());
    const std::string message = test::error_of([&] { make_nccl_communicators(gpus + 1); });
    const std::string wanted = "--tp " + std::to_string(gpus + 1) + " needs " +
                               std::to_string(gpus + 1) + " GPUs, this machine has " +
                               std::to_string(gpus);
    EXPECT_NE(message.find(wanted), std::string::npos) << message;
}

// Where CUDA finds no GPU, asking for NCCL ranks is one clear error with
// the runtime's reason, not a crash inside NCCL.
TEST(NcclCommunicator, NoGpuIsAnErrorWithTheRuntimesReason) {
    const cuda::DeviceQuery query = cuda::query_devices();
    if (!query.devices.empty()) GTEST_SKIP() << "this machine has a GPU";
    const std::string message = test::error_of([] { make_nccl_communicators(1); });
    EXPECT_NE(message.find("--tp-backend nccl: no usable GPU"), std::string::npos) << message;
    if (!query.error.empty()) {
        EXPECT_NE(message.find(query.error), std::string::npos) << message;
    }
}

}  // namespace
}  // namespace servelab
#endif
