// multirail_copy: rank 0 copies a buffer into rank 1's over a multi-rail connection, striped over
// every rail the node has (RDMACXX_DEVICES, or -d dev,dev), launched by mpirun with one rank per
// node; the addresses and the remote region cross over MPI. Prints each second and at the end
// every rail's state and the bytes it carried, the rail events (down, up again), the throughput,
// and whether every byte arrived. With the links flapping meanwhile (tools/demo --nodes 2 --rails
// 2 takes node 2's eth1 down and up again), the copy carries on over the rail that is left and
// the rebuilt rail joins again.
//
//   mpirun -np 2 -H node1,node2 multirail_copy [-d DEVICES] [-s MiB] [-r ROUNDS] [-c CHUNK_KiB]
#include "mpi_common.hpp"

#include <rdmacxx/multirail.hpp>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace rx = rdmacxx;
namespace mr = rdmacxx::multirail;
using steady = std::chrono::steady_clock;

namespace {

char const* state_name(mr::rail_state s) {
    switch (s) {
    case mr::rail_state::up:
        return "up";
    case mr::rail_state::down:
        return "down";
    case mr::rail_state::rebuilding:
        return "rebuilding";
    }
    return "?";
}

void print_rails(mr::connection const& c, double seconds) {
    std::printf("  %6.1f s:", seconds);
    for (std::size_t r = 0; r < c.rails(); ++r) {
        mr::rail_counters const& k = c.counters(r);
        std::printf("  rail %zu (%s) %-10s %8.1f MiB, %lu failures, %lu rebuilds", r, c.device(r).c_str(),
                    state_name(c.state(r)), static_cast<double>(k.bytes) / (1 << 20),
                    static_cast<unsigned long>(k.failures), static_cast<unsigned long>(k.rebuilds));
    }
    std::printf("\n");
    std::fflush(stdout);
}

void fill(std::span<std::byte> s, unsigned round) {
    for (std::size_t i = 0; i < s.size(); ++i)
        s[i] = static_cast<std::byte>((i * 7 + std::size_t{round} * 13 + i / 4093) & 0xff);
}

int copy(int argc, char** argv) {
    char const* env = std::getenv("RDMACXX_DEVICES");
    std::string devices = env != nullptr ? env : "";
    std::size_t mib = 64;
    unsigned rounds = 4;
    std::size_t chunk_kib = 256;
    for (int opt; (opt = ::getopt(argc, argv, "d:s:r:c:")) != -1;) {
        switch (opt) {
        case 'd':
            devices = optarg;
            break;
        case 's':
            mib = std::stoul(optarg);
            break;
        case 'r':
            rounds = static_cast<unsigned>(std::stoul(optarg));
            break;
        case 'c':
            chunk_kib = std::stoul(optarg);
            break;
        default:
            std::fprintf(stderr, "usage: multirail_copy [-d DEVICES] [-s MiB] [-r ROUNDS] [-c CHUNK_KiB]\n");
            return 2;
        }
    }
    rx::mpi_bootstrap boot;
    if (boot.size() != 2) throw rx::argument_error("multirail_copy: run it with two ranks (mpirun -np 2)");
    bool const writer = boot.rank() == 0;
    mr::connection_options opt;
    opt.chunk_bytes = chunk_kib << 10;
    mr::connection conn{mr::parse_rails(devices), opt}; // "rxe0,rxe1", each device's port 1
    auto exchange = [&](std::vector<std::byte> const& mine) {
        std::vector<std::byte> all(mine.size() * 2);
        boot.allgather(mine, all);
        return std::vector<std::byte>(all.begin() + static_cast<std::ptrdiff_t>(mine.size() * (writer ? 1 : 0)),
                                      all.begin() + static_cast<std::ptrdiff_t>(mine.size() * (writer ? 2 : 1)));
    };
    conn.connect(exchange(conn.address()));
    boot.barrier(); // both connected before either polls

    std::size_t const bytes = mib << 20, message = std::size_t{1} << 20;
    std::vector<std::byte> buf(bytes);
    auto const region = conn.register_memory(buf, rx::access::local_write | rx::access::remote_write);
    auto const peer = mr::remote_region::from_bytes(exchange(region.remote().to_bytes()));
    if (writer)
        std::printf("multirail_copy: %zu rails, %zu MiB a round in 1 MiB WRITEs striped in %zu KiB chunks, %u rounds\n",
                    conn.rails(), mib, chunk_kib, rounds);

    std::array<mr::event, 64> ev{};
    auto const t0 = steady::now();
    auto next_print = t0 + std::chrono::seconds{1};
    unsigned bad_rounds = 0;
    std::size_t arrived = 0;
    auto poll = [&] {
        for (std::size_t n = conn.poll(ev), k = 0; k < n; ++k) {
            if (ev[k].what == mr::event::kind::write_arrived) ++arrived;
            if (ev[k].what == mr::event::kind::rail_down)
                std::printf("  rank %d: rail %u down (%s)\n", boot.rank(), ev[k].rail, ev[k].reason.message().c_str());
            if (ev[k].what == mr::event::kind::rail_up)
                std::printf("  rank %d: rail %u up again\n", boot.rank(), ev[k].rail);
            if (ev[k].what == mr::event::kind::write_failed)
                throw rx::error(ev[k].reason, "multirail_copy: a WRITE was refused");
        }
        if (writer && steady::now() >= next_print) {
            print_rails(conn, std::chrono::duration<double>(steady::now() - t0).count());
            next_print += std::chrono::seconds{1};
        }
    };
    for (unsigned round = 0; round < rounds; ++round) {
        std::size_t const writes = bytes / message;
        if (writer) {
            fill(buf, round);
            for (std::size_t k = 0; k < writes; ++k) {
                (void)conn.write(region, k * message, message, peer, k * message, mr::placement::stripe(),
                                 static_cast<std::uint32_t>(k));
                while (conn.writes_in_flight() > 8)
                    poll();
            }
            while (conn.writes_in_flight() != 0 || conn.messages_in_flight() != 0)
                poll();
        } else {
            while (arrived < (round + 1) * writes)
                poll();
            std::vector<std::byte> want(bytes);
            fill(want, round);
            if (std::memcmp(want.data(), buf.data(), bytes) != 0) ++bad_rounds;
            for (auto const until = steady::now() + std::chrono::seconds{1}; steady::now() < until;)
                poll(); // the notices' acknowledgements reach the writer
        }
        boot.barrier();
    }
    double const seconds = std::chrono::duration<double>(steady::now() - t0).count();
    std::array<unsigned, 2> verdict{bad_rounds, 0};
    std::vector<std::byte> in(sizeof verdict), out(2 * sizeof verdict);
    std::memcpy(in.data(), verdict.data(), sizeof verdict);
    boot.allgather(in, out);
    unsigned bad = 0;
    std::memcpy(&bad, out.data() + sizeof verdict, sizeof bad); // rank 1's count
    if (writer) {
        print_rails(conn, seconds);
        std::printf("copied: %u rounds of %zu MiB in %.2f s, %.1f MB/s\n", rounds, mib, seconds,
                    static_cast<double>(bytes) * rounds / seconds / 1e6);
        std::printf("verified: %u of %u rounds arrived byte for byte\n", rounds - bad, rounds);
    }
    return bad == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) { return mpi_example::run(argc, argv, copy); }
