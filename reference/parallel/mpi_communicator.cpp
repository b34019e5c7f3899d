// mpi_communicator.cpp — see mpi_communicator.h.
#include "reference/parallel/mpi_communicator.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/common/error.h"

#ifdef SERVELAB_HAVE_MPI
#include <mpi.h>
#endif

namespace servelab {

int mpi_launched_world_size() {
    // Open MPI and MPICH (Hydra) each export the world size to their processes.
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
        if (const char* value = std::getenv(name)) return std::atoi(value);
    }
    return 0;
}

#ifdef SERVELAB_HAVE_MPI

namespace {

void check_mpi(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    char message[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, message, &length);
    throw Error(fmt::format("{}: {}", what, std::string(message, size_t(length))));
}

// Finalizes MPI at exit, once, if this process started it.
void finalize_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
  public:
    MpiCommunicator() {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        // Errors come back as codes (and then as servelab::Error), not aborts.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string backend() const override { return "mpi"; }

  protected:
    void do_all_reduce_sum(std::span<float> data) override {
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, data.data(), int(data.size()), MPI_FLOAT, MPI_SUM,
                                MPI_COMM_WORLD),
                  "MPI_Allreduce");
    }
    void do_all_gather(std::span<const float> mine, std::span<float> all,
                       std::span<const int64_t> counts) override {
        std::vector<int> sizes(counts.size());
        std::vector<int> offsets(counts.size());
        int offset = 0;
        for (size_t r = 0; r < counts.size(); ++r) {
            sizes[r] = int(counts[r]);
            offsets[r] = offset;
            offset += sizes[r];
        }
        check_mpi(MPI_Allgatherv(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), sizes.data(),
                                 offsets.data(), MPI_FLOAT, MPI_COMM_WORLD),
                  "MPI_Allgatherv");
    }
    void do_broadcast(std::span<std::byte> data, int root) override {
        check_mpi(MPI_Bcast(data.data(), int(data.size()), MPI_BYTE, root, MPI_COMM_WORLD),
                  "MPI_Bcast");
    }
    void do_barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  private:
    int rank_ = 0;
    int size_ = 1;
};

}  // namespace

bool mpi_available() {
    return true;
}

std::unique_ptr<Communicator> make_mpi_communicator(int expected_size) {
    // Checked before MPI starts, so a wrong launch is one line, not an MPI abort.
    const int launched = mpi_launched_world_size();
    if (launched != expected_size && !(launched == 0 && expected_size == 1)) {
        throw Error(
            fmt::format("--tp {} with --tp-backend mpi needs {} processes, but {}: launch with "
                        "mpirun -np {} (add --oversubscribe when the machine has fewer cores)",
                        expected_size, expected_size,
                        launched == 0 ? std::string("this one was not started by mpirun")
                                      : fmt::format("mpirun started {}", launched),
                        expected_size));
    }
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        // Each rank's engine calls MPI from one thread only (its own).
        int provided = 0;
        check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init");
        std::atexit(finalize_at_exit);
    }
    auto comm = std::make_unique<MpiCommunicator>();
    if (comm->size() != expected_size) {
        throw Error(
            fmt::format("--tp {} but MPI started {} process(es): launch with mpirun -np {} (add "
                        "--oversubscribe when the machine has fewer cores)",
                        expected_size, comm->size(), expected_size));
    }
    return comm;
}

void mpi_abort_if_running(int exit_code) {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

#else  // no MPI in this build

bool mpi_available() {
    return false;
}

std::unique_ptr<Communicator> make_mpi_communicator(int) {
    throw Error(
        "--tp-backend mpi: this build has no MPI (install libopenmpi-dev and openmpi-bin, then "
        "re-run cmake)");
}

void mpi_abort_if_running(int) {}

#endif

}  // namespace servelab
