// tensor_parallel_ranks.h — run a CLI command on the N ranks of a split model.
//
// Part of the CLI (Lab 7, chapter 11.7). `--tp N` splits the model over N
// ranks; `--tp-backend` says what a rank is:
//   threads  N threads of this process, one shard each (the default);
//   mpi      this process is one rank of `mpirun -np N servelab … --tp N`
//            (the default when mpirun started the process);
//   nccl     N threads, one GPU each, collectives through NCCL.
// Every rank loads only its shard and runs the command's whole body — the
// same requests, the same engine, the same scheduler decisions, since the
// runner hands every rank rank 0's tokens. Only rank 0 talks to the user:
// the body checks talks_to_user() before printing, and other ranks log
// warnings and errors only.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "reference/cli/cli_options.h"
#include "reference/engine/model_runner.h"
#include "reference/model/model.h"
#include "reference/parallel/communicator.h"
#include "reference/parallel/tensor_parallel.h"

namespace servelab::cli {

struct TensorParallelOptions {
    int size = 1;                  // --tp N
    std::string backend = "auto";  // --tp-backend: auto, threads, mpi, nccl

    void add_to(CLI::App& command);
    bool enabled() const { return size > 1; }
    // "threads", "mpi" or "nccl": auto picks mpi when mpirun started us.
    std::string resolved_backend() const;
};

// What the body of a command gets on each rank.
struct RankContext {
    const Model& model;  // the whole model (N = 1) or this rank's shard
    ModelRunner& runner;
    const TensorParallelShard& shard;
    Communicator& comm;  // SoloCommunicator when N = 1
    bool talks_to_user() const { return shard.rank == 0; }
};

// Runs `body` once per rank with its communicator, on the chosen back end
// (a SoloCommunicator when N = 1). Throws servelab::Error for a missing back
// end or an mpirun world of the wrong size; an error on any rank ends every rank.
void run_on_communicators(const TensorParallelOptions& tp,
                          const std::function<void(Communicator&)>& body);

// Loads the model (each rank its shard) and runs `body` on every rank;
// returns when all ranks are done. Throws servelab::Error for a model that
// does not split N ways (naming the valid N), a missing back end, or an
// mpirun world of the wrong size; an error on any rank ends every rank.
void run_on_ranks(const TensorParallelOptions& tp, const ModelOptions& model_options,
                  MlaMode mla_mode, const std::function<void(RankContext&)>& body);

}  // namespace servelab::cli
