// mpi_communicator.h — the tensor-parallel ranks as MPI processes.
//
// Part of Lab 7 (chapter 11.7). One process per rank, started together by
// `mpirun -np N servelab … --tp N --tp-backend mpi`: each process loads its
// own shard, runs its own engine, and the collectives are MPI's
// (MPI_Allreduce, MPI_Allgatherv, MPI_Bcast). Nothing here assumes the
// processes share a machine, so the same binary runs across machines.
//
// Built only where CMake finds MPI (Debian: libopenmpi-dev); otherwise
// mpi_available() is false and --tp-backend mpi says so.
#pragma once

#include <memory>

#include "reference/parallel/communicator.h"

namespace servelab {

// True when this build has MPI.
bool mpi_available();

// The world communicator of this process, after MPI_Init. Throws
// servelab::Error when the build has no MPI or when the world does not have
// `expected_size` ranks (the --tp N of the command line).
std::unique_ptr<Communicator> make_mpi_communicator(int expected_size);

// Ends the job on every rank (MPI_Abort) after an error on this one, so no
// rank waits forever in a collective; a no-op when MPI was never started.
void mpi_abort_if_running(int exit_code);
// The MPI world's size when this process was started by mpirun (read from
// the launcher's environment, before any MPI call), else 0.
int mpi_launched_world_size();

}  // namespace servelab
