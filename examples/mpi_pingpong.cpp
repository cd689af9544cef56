// mpi_pingpong: RC round trips between rank 0 and rank 1, launched by mpirun and connected by a
// peer_group over MPI; prints the figures tools/demo prints (round trip median, p99, min, max,
// bandwidth, every echo verified). Other ranks join the group and wait.
//
//   mpirun -np 2 -H node1,node2 mpi_pingpong [-n ITERATIONS] [-s BYTES] [-d DEVICE] [-i PORT] [-e]
//   (-e: sleep on completion events instead of busy-polling)
#include "mpi_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace rx = rdmacxx;

namespace {
template <class Completion>
int pingpong(rx::mpi_bootstrap& boot, std::string const& device, int ib_port, unsigned iterations, std::size_t size) {
    rx::context ctx = mpi_example::open_device(device);
    rx::end_port port{ctx, static_cast<std::uint8_t>(ib_port)};
    rx::protection_domain pd{ctx};
    std::vector<std::byte> buf(2 * size);
    rx::memory_region mr = pd.register_memory(std::span{buf}, rx::access::local_write);
    auto const send_buf = mr.span().first(size);
    auto const recv_buf = mr.span().subspan(size, size);
    rx::completion_queue<Completion> cq{ctx, 64};
    rx::peer_group<Completion> group{boot, port, pd, cq, cq};

    int const me = boot.rank();
    int const peer = 1 - me;
    if (me <= 1) group.qp(peer).post_recv(rx::recv{recv_buf}.id(1));
    boot.barrier(); // every receive is up before anyone sends
    if (me > 1) {
        boot.barrier();
        return 0;
    }
    auto& qp = group.qp(peer);
    std::vector<double> rtt_us;
    rtt_us.reserve(iterations);
    unsigned mismatches = 0;
    auto const start = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < iterations; ++i) {
        auto const pattern = [i](std::size_t k) { return static_cast<std::byte>((k * 7 + i) & 0xff); };
        if (me == 0) {
            for (std::size_t k = 0; k < size; ++k)
                send_buf[k] = pattern(k);
            auto const t0 = std::chrono::steady_clock::now();
            qp.post(rx::send{send_buf}.id(2));
            unsigned seen = 0; // the send's completion and the echo's, in either order
            while (seen != 3)
                seen |= mpi_example::next_completion(cq).wr_id() == 1 ? 1U : 2U;
            rtt_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
            for (std::size_t k = 0; k < size; ++k)
                if (recv_buf[k] != pattern(k)) {
                    ++mismatches;
                    break;
                }
            qp.post_recv(rx::recv{recv_buf}.id(1));
        } else {
            while (mpi_example::next_completion(cq).wr_id() != 1) {}
            std::copy(recv_buf.begin(), recv_buf.end(), send_buf.begin());
            qp.post_recv(rx::recv{recv_buf}.id(1));
            qp.post(rx::send{send_buf}.id(2));
            while (mpi_example::next_completion(cq).wr_id() != 2) {}
        }
    }
    double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    boot.barrier();
    if (me == 0) {
        std::sort(rtt_us.begin(), rtt_us.end());
        auto pct = [&](double p) {
            return rtt_us[std::min(rtt_us.size() - 1,
                                   static_cast<std::size_t>(p * static_cast<double>(rtt_us.size())))];
        };
        double const bytes = 2.0 * static_cast<double>(size) * iterations;
        char host[256] = {};
        (void)::gethostname(host, sizeof host - 1);
        std::printf("mpi_pingpong: %d ranks, rank 0 on %s, port %s, %s completions\n", boot.size(), host,
                    port.to_string().c_str(), Completion::uses_channel ? "event-driven" : "busy-poll");
        std::printf("messages: %u round trips of %zu bytes, %.0f bytes moved\n", iterations, size, bytes);
        std::printf("round trip: median %.1f us, p99 %.1f us, min %.1f us, max %.1f us\n", pct(0.5), pct(0.99),
                    rtt_us.front(), rtt_us.back());
        std::printf("bandwidth: %.2f MB/s (both directions)\n", bytes / seconds / 1e6);
        std::printf("verified: %u of %u echoes matched byte for byte\n", iterations - mismatches, iterations);
    }
    return mismatches == 0 ? 0 : 1;
}

int run(int argc, char** argv) {
    unsigned iterations = 1000;
    std::size_t size = 4096;
    std::string device;
    int ib_port = 1;
    bool events = false;
    for (int c; (c = ::getopt(argc, argv, "n:s:d:i:e")) != -1;) {
        switch (c) {
        case 'n':
            iterations = static_cast<unsigned>(std::stoul(optarg));
            break;
        case 's':
            size = std::stoul(optarg);
            break;
        case 'd':
            device = optarg;
            break;
        case 'i':
            ib_port = std::stoi(optarg);
            break;
        case 'e':
            events = true;
            break;
        default:
            std::fprintf(stderr, "usage: mpi_pingpong [-n ITERATIONS] [-s BYTES] [-d DEVICE] [-i PORT] [-e]\n");
            return 2;
        }
    }
    rx::mpi_bootstrap boot;
    if (boot.size() < 2) throw rx::argument_error("mpi_pingpong needs at least 2 ranks");
    return events ? pingpong<rx::event_driven>(boot, device, ib_port, iterations, size)
                  : pingpong<rx::busy_poll>(boot, device, ib_port, iterations, size);
}
} // namespace

int main(int argc, char** argv) { return mpi_example::run(argc, argv, run); }
