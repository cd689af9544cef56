// launched_common.hpp: what the examples started by a launcher share, whatever their bootstrap
// (MPI in mpi_common.hpp, PMIx in pmix_ring.cpp): the flags of the examples that move blocks
// between ranks, the device each rank opens and a bounded wait for one completion.
#pragma once

#include <rdmacxx/verbs.hpp>

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <system_error>

namespace launched_example {
namespace rx = rdmacxx;

// The flags of mpi_alltoall and pmix_ring: -s BYTES, -r ROUNDS, -d DEVICE, -i PORT.
struct block_options {
    std::size_t bytes;
    unsigned rounds;
    std::string device{};
    int ib_port = 1;
};

// Reads the flags into `o`, whose fields hold the defaults; on an unknown flag prints the usage
// line of `program` and returns false.
inline bool parse_block_options(int argc, char** argv, char const* program, block_options& o) {
    for (int c; (c = ::getopt(argc, argv, "s:r:d:i:")) != -1;) {
        switch (c) {
        case 's':
            o.bytes = std::stoul(optarg);
            break;
        case 'r':
            o.rounds = static_cast<unsigned>(std::stoul(optarg));
            break;
        case 'd':
            o.device = optarg;
            break;
        case 'i':
            o.ib_port = std::stoi(optarg);
            break;
        default:
            std::fprintf(stderr, "usage: %s [-s BYTES] [-r ROUNDS] [-d DEVICE] [-i PORT]\n", program);
            return false;
        }
    }
    return true;
}

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

} // namespace launched_example
