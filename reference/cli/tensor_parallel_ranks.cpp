// tensor_parallel_ranks.cpp — see tensor_parallel_ranks.h.
#include "reference/cli/tensor_parallel_ranks.h"

#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "kernels/common/error.h"
#include "reference/kv/kv_budget.h"
#include "reference/parallel/mpi_communicator.h"
#include "reference/parallel/shard_loader.h"
#include "reference/parallel/thread_communicator.h"
#ifdef SERVELAB_HAVE_NCCL
#include "reference/parallel/nccl_communicator.h"
#endif

namespace servelab::cli {
namespace {

int64_t weight_bytes(const ModelWeights& weights) {
    int64_t bytes = weights.token_embedding.bytes() + weights.output.bytes() +
                    int64_t(weights.output_norm.size() * sizeof(float));
    for (const LayerWeights& layer : weights.layers) {
        for (const WeightMatrix* m : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w_gate,
                                      &layer.w_up, &layer.w_down}) {
            bytes += m->bytes();
        }
        bytes += int64_t((layer.attn_norm.size() + layer.ffn_norm.size()) * sizeof(float));
    }
    return bytes;
}

// One rank: load its shard, build its runner, run the body.
void run_rank(const TensorParallelOptions& tp, const ModelOptions& model_options,
              Communicator& comm, const std::function<void(RankContext&)>& body) {
    const auto start = std::chrono::steady_clock::now();
    ModelShard loaded = load_model_shard(model_options.path, tp.size, comm.rank());
    loaded.model.weights.set_matmul_mode(model_options.matmul_mode());
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (comm.rank() == 0) {
        const ModelConfig& local = loaded.model.config;
        spdlog::info(
            "tensor parallel: {} ranks over {}; rank 0 holds {} query / {} KV heads, {} ffn "
            "features, {} vocabulary rows: {} of weights, loaded in {:.0f} ms",
            tp.size, comm.backend(), local.num_heads, local.num_kv_heads, local.ffn_dim,
            loaded.shard.vocab_rows(), format_bytes(weight_bytes(loaded.model.weights)), load_ms);
    }
    ModelRunner runner(loaded.model.config, loaded.model.weights, loaded.shard, comm,
                       model_options.runner_options());
    RankContext context{loaded.model, runner, loaded.shard, comm};
    // The ranks start together: otherwise the first collective would absorb
    // the slowest rank's loading time, and the counters' time with it.
    comm.barrier();
    body(context);
}

}  // namespace

void TensorParallelOptions::add_to(CLI::App& command) {
    command.add_option("--tp", size, "split the model over N ranks (tensor parallelism)")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    command
        .add_option("--tp-backend", backend,
                    "what a rank is: threads, mpi (under mpirun) or nccl (one GPU each); auto = "
                    "mpi under mpirun, else threads")
        ->check(CLI::IsMember({"auto", "threads", "mpi", "nccl"}))
        ->capture_default_str();
}

std::string TensorParallelOptions::resolved_backend() const {
    if (backend != "auto") return backend;
    return mpi_launched_world_size() > 0 ? "mpi" : "threads";
}

void run_on_communicators(const TensorParallelOptions& tp,
                          const std::function<void(Communicator&)>& body) {
    const std::string backend = tp.resolved_backend();
    const int launched = mpi_launched_world_size();
    if (launched > 1 && backend != "mpi") {
        throw Error(fmt::format(
            "mpirun started {} processes, but --tp-backend is {}: pass --tp {} --tp-backend mpi",
            launched, backend, launched));
    }
    if (launched > 1 && tp.size == 1) {
        throw Error(fmt::format("mpirun started {} processes: pass --tp {}", launched, launched));
    }
    if (backend == "mpi") {
        std::unique_ptr<Communicator> comm = make_mpi_communicator(tp.size);
        // Only rank 0 talks to the user; the others report only problems.
        if (comm->rank() != 0) spdlog::set_level(spdlog::level::warn);
        body(*comm);
        comm->barrier();
        return;
    }
    if (!tp.enabled()) {
        SoloCommunicator solo;
        body(solo);
        return;
    }
    if (backend == "threads") {
        run_thread_ranks(tp.size, body);
        return;
    }
#ifdef SERVELAB_HAVE_NCCL
    std::vector<std::unique_ptr<Communicator>> comms = make_nccl_communicators(tp.size);
    run_rank_threads(
        tp.size,
        [&](int rank) {
            try {
                body(*comms[size_t(rank)]);
            } catch (const std::exception& e) {
                // The other ranks may be inside NCCL calls, which nothing
                // here can interrupt: report and end the process.
                std::fprintf(stderr, "servelab: error: rank %d: %s\n", rank, e.what());
                std::_Exit(1);
            }
        },
        [] {});
#else
    throw Error(
        "--tp-backend nccl: this build has no NCCL (it needs nvcc and NCCL when cmake runs)");
#endif
}

void run_on_ranks(const TensorParallelOptions& tp, const ModelOptions& model_options,
                  MlaMode mla_mode, const std::function<void(RankContext&)>& body) {
    if (model_options.threads > 0) omp_set_num_threads(model_options.threads);
    if (!tp.enabled() && tp.resolved_backend() != "mpi") {
        Model model = model_options.load();
        ModelRunner runner(model.config, model.weights, model_options.runner_options(mla_mode));
        SoloCommunicator solo;
        const TensorParallelShard whole = runner.shard();
        RankContext context{model, runner, whole, solo};
        body(context);
        return;
    }
    run_on_communicators(tp, [&](Communicator& comm) { run_rank(tp, model_options, comm, body); });
}

}  // namespace servelab::cli
