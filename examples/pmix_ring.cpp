// pmix_ring: a ring over RC with no MPI at all. Each rank sends a message to its right-hand
// neighbour ((rank + 1) mod size) and receives one from its left-hand one, for several rounds;
// every received byte is verified. The ranks find each other through PMIx (rdmacxx/bootstrap/
// pmix.hpp): any PMIx launcher starts them, Open MPI's mpirun included, and no rank calls MPI_Init.
//
//   mpirun -np 3 -H node1,node2,node3 pmix_ring [-s BYTES] [-r ROUNDS] [-d DEVICE] [-i PORT]
#include "launched_common.hpp"

#include <rdmacxx/bootstrap/peer_group.hpp>
#include <rdmacxx/bootstrap/pmix.hpp>
#include <rdmacxx/verbs.hpp>

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;

namespace {
// The byte `k` of the message rank `from` sends in round `round`.
std::byte pattern(int from, unsigned round, std::size_t k) {
    return static_cast<std::byte>((k * 7 + static_cast<std::size_t>(from) * 59 + std::size_t{round} * 13) & 0xff);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int ring(rx::pmix_bootstrap& boot, int argc, char** argv) {
    launched_example::block_options o{.bytes = 8192, .rounds = 100}; // several path MTUs
    if (!launched_example::parse_block_options(argc, argv, "pmix_ring", o)) return 2;
    std::size_t const bytes = o.bytes;
    unsigned const rounds = o.rounds;
    int const n = boot.size();
    int const me = boot.rank();
    if (n < 2) throw rx::argument_error("pmix_ring needs 2 or more ranks, not " + std::to_string(n));
    int const right = (me + 1) % n;
    int const left = (me + n - 1) % n;
    rx::context ctx = launched_example::open_device(o.device);
    rx::end_port port{ctx, static_cast<std::uint8_t>(o.ib_port)};
    rx::protection_domain pd{ctx};
    std::vector<std::byte> inbox(bytes), outbox(bytes);
    rx::memory_region in_mr = pd.register_memory(std::span{inbox}, rx::access::local_write);
    rx::memory_region out_mr = pd.register_memory(std::span{outbox}, rx::access::local_write);
    rx::completion_queue<rx::busy_poll> cq{ctx, 16};
    auto const start = std::chrono::steady_clock::now();
    rx::peer_group<rx::busy_poll> group{boot, port, pd, cq, cq, in_mr.remote()};
    double const group_up = seconds_since(start);

    unsigned bad = 0;
    auto const ring_start = std::chrono::steady_clock::now();
    for (unsigned round = 0; round < rounds; ++round) {
        group.qp(left).post_recv(rx::recv{in_mr.span()}.id(1));
        for (std::size_t k = 0; k < bytes; ++k)
            outbox[k] = pattern(me, round, k);
        boot.barrier(); // every receive is posted before anyone sends
        group.qp(right).post(rx::send{out_mr.span()}.id(2));
        for (int done = 0; done < 2; ++done) {
            rx::work_completion const wc = launched_example::next_completion(cq);
            if (wc.wr_id() != 1) continue;
            if (wc.byte_len() != bytes)
                throw rx::argument_error("round " + std::to_string(round) + ": " + std::to_string(wc.byte_len()) +
                                         " bytes from rank " + std::to_string(left) + ", not " + std::to_string(bytes));
            for (std::size_t k = 0; k < bytes; ++k)
                if (inbox[k] != pattern(left, round, k)) {
                    std::fprintf(stderr, "rank %d round %u: the message from rank %d differs at byte %zu\n", me, round,
                                 left, k);
                    ++bad;
                    break;
                }
        }
    }
    double const ring_seconds = seconds_since(ring_start);
    // Every rank's count of bad messages, gathered over PMIx.
    std::vector<unsigned> every(static_cast<std::size_t>(n));
    boot.allgather(std::as_bytes(std::span{&bad, 1}), std::as_writable_bytes(std::span{every}));
    unsigned total_bad = 0;
    for (unsigned b : every)
        total_bad += b;
    char host[256] = {};
    (void)::gethostname(host, sizeof host - 1);
    std::printf("rank %d on %s: %u messages of %zu bytes from rank %d received, %u bad\n", me, host, rounds, bytes,
                left, bad);
    std::fflush(stdout);
    boot.barrier();
    if (me == 0) {
        std::printf("pmix_ring: %d ranks over PMIx, the group came up in %.3f s on rank 0; %u rounds of %zu bytes "
                    "in %.3f s\n",
                    n, group_up, rounds, bytes, ring_seconds);
        std::printf("verified: %u of %u messages matched byte for byte\n",
                    rounds * static_cast<unsigned>(n) - total_bad, rounds * static_cast<unsigned>(n));
    }
    return total_bad == 0 ? 0 : 1;
}
} // namespace

int main(int argc, char** argv) {
    std::optional<rx::pmix_bootstrap> boot;
    try {
        boot.emplace();
        return ring(*boot, argc, argv);
    } catch (std::exception const& e) {
        char host[256] = {};
        (void)::gethostname(host, sizeof host - 1);
        std::cerr << "rank " << (boot ? boot->rank() : -1) << " on " << host << " failed: " << e.what() << '\n';
        if (auto const* x = dynamic_cast<rx::error const*>(&e)) x->dump_detailed(std::cerr, "E:", 2);
        std::cerr.flush();
    }
    // The other ranks would wait for this one until their bootstrap's timeout: end the job now,
    // half a second after the message, so that the launcher forwards it first.
    if (boot) {
        std::this_thread::sleep_for(std::chrono::milliseconds{500});
        (void)::PMIx_Abort(1, "pmix_ring failed", nullptr, 0);
    }
    return 1;
}
