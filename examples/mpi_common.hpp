// mpi_common.hpp: what the MPI examples share — the device each rank opens and a bounded wait
// for one completion (launched_common.hpp), and MPI_Init/MPI_Finalize around a main that may throw.
#pragma once

#include "launched_common.hpp"

#include <rdmacxx/bootstrap/mpi.hpp>
#include <rdmacxx/bootstrap/peer_group.hpp>
#include <rdmacxx/verbs.hpp>

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

namespace mpi_example {
namespace rx = rdmacxx;

using launched_example::next_completion;
using launched_example::open_device;

// Runs `body(argc, argv)` between MPI_Init and MPI_Finalize. An exception is printed with the
// rank and host (an rdmacxx error at dump_detailed level 2) and aborts every rank, so that no
// rank waits for a dead one; the abort waits half a second first, so that mpirun forwards the
// message before it ends the job.
template <class Body>
int run(int argc, char** argv, Body body) {
    MPI_Init(&argc, &argv);
    int status = 1;
    try {
        status = body(argc, argv);
    } catch (std::exception const& e) {
        int rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        char host[256] = {};
        (void)::gethostname(host, sizeof host - 1);
        std::cerr << "rank " << rank << " on " << host << " failed: " << e.what() << '\n';
        if (auto const* x = dynamic_cast<rx::error const*>(&e)) x->dump_detailed(std::cerr, "E:", 2);
        std::cerr.flush();
        std::this_thread::sleep_for(std::chrono::milliseconds{500});
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return status;
}

} // namespace mpi_example
