// mpi_common.hpp: what the MPI examples share — the device each rank opens, a bounded wait for
// one completion, and MPI_Init/MPI_Finalize around a main that may throw.
#pragma once

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

// The device named by `name`, else by $RDMACXX_DEVICE (tools/softroce sets it), else the first.
inline rx::context open_device(std::string const& name) {
    rx::device_list devices;
    if (devices.empty()) throw rx::argument_error("no RDMA device on this node");
    std::string want = name;
    if (want.empty())
        if (char const* env = std::getenv("RDMACXX_DEVICE")) want = env;
    return want.empty() ? devices[0].open() : devices.find(want).open();
}

// The next completion of `cq`, which must be a success; a failed completion throws its wc_error,
// and none within `limit` throws (a peer that died must not hang the program). Busy-poll CQs spin,
// event-driven ones sleep on their channel.
template <class Cq>
rx::work_completion next_completion(Cq& cq, std::chrono::milliseconds limit = std::chrono::seconds{60}) {
    std::optional<rx::work_completion> wc = cq.wait_one(limit);
    if (!wc)
        throw rx::error(std::make_error_code(std::errc::timed_out),
                        "no completion within " + std::to_string(limit.count()) + " ms");
    wc->throw_if_error();
    return *wc;
}

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
