// mpi_pingpong: RC round trips between rank 0 and rank 1, launched by mpirun and connected by a
// peer_group over MPI; prints the figures tools/demo prints (round trip median, p99, min, max,
// bandwidth, every echo verified). Other ranks join the group and wait.
//
//   mpirun -np 2 -H node1,node2 mpi_pingpong [-n ITERATIONS] [-s BYTES] [-d DEVICE] [-i PORT] [-e]
//                                             [-q] [-w] [-b [-t WINDOW]]
//   (-e: sleep on completion events instead of busy-polling)
//   (-q: SEND ping-pong as ib_send_lat does it: one send in 16 signaled, so neither side waits for
//    the ACK of its send before waiting for the next message; without -q every send is awaited)
//   (-w: RDMA WRITE instead of SEND: ping-pong as ib_write_lat does it, each side polling the last
//    byte of its buffer for the peer's write, one write in 16 signaled; with -b, a WRITE stream)
//   (-b: bandwidth, as ib_send_bw/ib_write_bw: rank 0 streams ITERATIONS messages of BYTES to
//    rank 1, at most WINDOW (default 64) outstanding, one in 16 signaled; prints "stream: ...
//    MB/s". Rank 1 keeps 512 receives posted for SENDs; RNR NAKs are retried without limit)
#include "mpi_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <vector>

namespace rx = rdmacxx;

namespace {
// Rank 0's figures: round trip median, p99, min, max, bandwidth of both directions, echoes checked.
void report(rx::mpi_bootstrap& boot, rx::end_port const& port, char const* how, std::vector<double>& rtt_us,
            std::size_t size, unsigned iterations, double seconds, unsigned mismatches) {
    std::sort(rtt_us.begin(), rtt_us.end());
    auto pct = [&](double p) {
        return rtt_us[std::min(rtt_us.size() - 1, static_cast<std::size_t>(p * static_cast<double>(rtt_us.size())))];
    };
    double const bytes = 2.0 * static_cast<double>(size) * iterations;
    char host[256] = {};
    (void)::gethostname(host, sizeof host - 1);
    std::printf("mpi_pingpong: %d ranks, rank 0 on %s, port %s, %s completions\n", boot.size(), host,
                port.to_string().c_str(), how);
    std::printf("messages: %u round trips of %zu bytes, %.0f bytes moved\n", iterations, size, bytes);
    std::printf("round trip: median %.1f us, p99 %.1f us, min %.1f us, max %.1f us\n", pct(0.5), pct(0.99),
                rtt_us.front(), rtt_us.back());
    std::printf("bandwidth: %.2f MB/s (both directions)\n", bytes / seconds / 1e6);
    std::printf("verified: %u of %u echoes matched byte for byte\n", iterations - mismatches, iterations);
}

template <class Completion>
int pingpong(rx::mpi_bootstrap& boot, std::string const& device, int ib_port, unsigned iterations, std::size_t size,
             bool lean) {
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
    bool have_ping = false; // rank 1: the next ping arrived while it waited for its echo's send completion
    auto const start = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < iterations; ++i) {
        auto const pattern = [i](std::size_t k) { return static_cast<std::byte>((k * 7 + i) & 0xff); };
        if (me == 0) {
            for (std::size_t k = 0; k < size; ++k)
                send_buf[k] = pattern(k);
            bool const sig = !lean || i % 16 == 15;
            auto const t0 = std::chrono::steady_clock::now();
            qp.post(rx::send{send_buf}.id(2).signaled(sig));
            unsigned seen = sig ? 0U : 2U; // the send's completion and the echo's, in either order
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
            if (!have_ping)
                while (mpi_example::next_completion(cq).wr_id() != 1) {}
            have_ping = false;
            std::copy(recv_buf.begin(), recv_buf.end(), send_buf.begin());
            qp.post_recv(rx::recv{recv_buf}.id(1));
            bool const sig = !lean || i % 16 == 15;
            qp.post(rx::send{send_buf}.id(2).signaled(sig));
            // The echo's send completion; the next ping's receive may complete before it (the
            // provider completes receives and sends in separate tasks, rxe among them): that one
            // is the next round's.
            if (sig)
                while (mpi_example::next_completion(cq).wr_id() != 2)
                    have_ping = true;
        }
    }
    double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    boot.barrier();
    if (me == 0) {
        report(boot, port, Completion::uses_channel ? "event-driven" : "busy-poll", rtt_us, size, iterations, seconds,
               mismatches);
    }
    return mismatches == 0 ? 0 : 1;
}

// The byte rank `me` polls for: the last one of `buf`, read as the peer's RDMA WRITE stores it.
std::byte last_byte(rx::local_span<std::byte> buf) {
    std::byte const b = *static_cast<std::byte const volatile*>(&buf[buf.size() - 1]);
    std::atomic_thread_fence(std::memory_order_acquire);
    return b;
}

// -w: RDMA WRITE round trips, ib_write_lat's way: rank 0 writes into rank 1's buffer, rank 1 sees
// the last byte change and writes the message back; one write in 16 is signaled (its completion
// reaped at once), the others are unsignaled. Same output as the SEND ping-pong.
template <class Completion>
int write_pingpong(rx::mpi_bootstrap& boot, std::string const& device, int ib_port, unsigned iterations,
                   std::size_t size) {
    if (size == 0) throw rx::argument_error("mpi_pingpong -w needs -s of at least 1 byte");
    rx::context ctx = mpi_example::open_device(device);
    rx::end_port port{ctx, static_cast<std::uint8_t>(ib_port)};
    rx::protection_domain pd{ctx};
    std::vector<std::byte> buf(2 * size);
    rx::memory_region mr = pd.register_memory(std::span{buf}, rx::access::local_write | rx::access::remote_write);
    auto const send_buf = mr.span().first(size);
    auto const recv_buf = mr.span().subspan(size, size);
    rx::completion_queue<Completion> cq{ctx, 64};
    rx::peer_group_options opt;
    opt.settings.remote_access = rx::access::remote_write;
    rx::peer_group<Completion> group{boot, port, pd, cq, cq, mr.remote(), opt};
    int const me = boot.rank();
    boot.barrier();
    if (me > 1) {
        boot.barrier();
        return 0;
    }
    int const peer = 1 - me;
    auto& qp = group.qp(peer);
    auto const target = group.remote(peer).subspan(size, size);
    auto const write_back = [&](unsigned i) {
        bool const sig = i % 16 == 15;
        qp.post(rx::write{send_buf, target}.id(3).signaled(sig));
        if (sig) mpi_example::next_completion(cq);
    };
    std::vector<double> rtt_us;
    rtt_us.reserve(iterations);
    unsigned mismatches = 0;
    auto const start = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < iterations; ++i) {
        auto const pattern = [i, size](std::size_t k) {
            return k + 1 == size ? static_cast<std::byte>(i % 255 + 1) : static_cast<std::byte>((k * 7 + i) & 0xff);
        };
        auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
        auto const wait_for = [&](std::byte tag) {
            while (last_byte(recv_buf) != tag)
                if (std::chrono::steady_clock::now() > deadline)
                    throw rx::error(std::make_error_code(std::errc::timed_out), "no write from the peer within 60 s");
        };
        auto const tag = pattern(size - 1);
        if (me == 0) {
            for (std::size_t k = 0; k < size; ++k)
                send_buf[k] = pattern(k);
            auto const t0 = std::chrono::steady_clock::now();
            write_back(i);
            wait_for(tag);
            rtt_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
            for (std::size_t k = 0; k < size; ++k)
                if (recv_buf[k] != pattern(k)) {
                    ++mismatches;
                    break;
                }
        } else {
            wait_for(tag);
            std::copy(recv_buf.begin(), recv_buf.end(), send_buf.begin());
            write_back(i);
        }
    }
    double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    boot.barrier();
    if (me == 0) report(boot, port, "busy-poll on memory (RDMA WRITE)", rtt_us, size, iterations, seconds, mismatches);
    return mismatches == 0 ? 0 : 1;
}

// -b: rank 0 streams `iterations` SENDs (or RDMA WRITEs) of `size` bytes to rank 1, at most `window`
// outstanding, one in 16 (and the last) signaled; a signaled completion retires every request
// before it. Rank 1 keeps 512 receives posted (SENDs). Prints the one-direction rate.
template <class Completion>
int stream(rx::mpi_bootstrap& boot, std::string const& device, int ib_port, unsigned iterations, std::size_t size,
           unsigned window, bool use_write) {
    constexpr unsigned signal_every = 16;
    constexpr unsigned receives = 512;
    rx::context ctx = mpi_example::open_device(device);
    rx::end_port port{ctx, static_cast<std::uint8_t>(ib_port)};
    rx::protection_domain pd{ctx};
    std::vector<std::byte> buf(std::max<std::size_t>(size, 1));
    rx::memory_region mr = pd.register_memory(std::span{buf}, rx::access::local_write | rx::access::remote_write);
    auto const msg = mr.span().first(size);
    rx::completion_queue<Completion> cq{ctx, 1024};
    rx::peer_group_options opt;
    opt.caps.max_send_wr = std::max(window, 1U);
    opt.caps.max_recv_wr = receives;
    opt.settings.remote_access = rx::access::remote_write;
    opt.settings.rnr_retry_count = 7; // infinite: a receiver that falls behind slows the stream, never fails it
    rx::peer_group<Completion> group{boot, port, pd, cq, cq, mr.remote(), opt};
    int const me = boot.rank();
    unsigned posted_recvs = 0;
    if (me == 1 && !use_write)
        for (; posted_recvs < std::min(iterations, receives); ++posted_recvs)
            group.qp(0).post_recv(rx::recv{msg}.id(1));
    boot.barrier();
    double seconds = 0;
    if (me == 0) {
        auto& qp = group.qp(1);
        auto const target = group.remote(1).first(size);
        unsigned posted = 0, done = 0;
        auto const start = std::chrono::steady_clock::now();
        while (done < iterations) {
            if (posted < iterations && posted - done < window) {
                bool const sig = (posted + 1) % signal_every == 0 || posted + 1 == iterations;
                if (use_write)
                    qp.post(rx::write{msg, target}.id(posted + 1U).signaled(sig));
                else
                    qp.post(rx::send{msg}.id(posted + 1U).signaled(sig));
                ++posted;
            } else {
                done = static_cast<unsigned>(mpi_example::next_completion(cq).wr_id());
            }
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else if (me == 1 && !use_write) {
        for (unsigned got = 0; got < iterations; ++got) {
            (void)mpi_example::next_completion(cq);
            if (posted_recvs < iterations) {
                group.qp(0).post_recv(rx::recv{msg}.id(1));
                ++posted_recvs;
            }
        }
    }
    boot.barrier();
    if (me == 0) {
        double const bytes = static_cast<double>(size) * iterations;
        std::printf("mpi_pingpong: %d ranks, stream of %s from rank 0 to rank 1, port %s, %s completions\n",
                    boot.size(), use_write ? "RDMA WRITEs" : "SENDs", port.to_string().c_str(),
                    Completion::uses_channel ? "event-driven" : "busy-poll");
        std::printf("stream: %u messages of %zu bytes, window %u, one in %u signaled\n", iterations, size, window,
                    signal_every);
        std::printf("stream: %.2f MB/s, %.1f kmsg/s (one direction), %.3f s\n", bytes / seconds / 1e6,
                    iterations / seconds / 1e3, seconds);
    }
    return 0;
}

int run(int argc, char** argv) {
    unsigned iterations = 1000;
    std::size_t size = 4096;
    std::string device;
    int ib_port = 1;
    bool events = false;
    bool use_write = false;
    bool bandwidth = false;
    bool lean = false;
    unsigned window = 64;
    for (int c; (c = ::getopt(argc, argv, "n:s:d:i:eqwbt:")) != -1;) {
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
        case 'q':
            lean = true;
            break;
        case 'w':
            use_write = true;
            break;
        case 'b':
            bandwidth = true;
            break;
        case 't':
            window = static_cast<unsigned>(std::stoul(optarg));
            break;
        default:
            std::fprintf(stderr, "usage: mpi_pingpong [-n ITERATIONS] [-s BYTES] [-d DEVICE] [-i PORT] [-e] [-q] [-w] "
                                 "[-b [-t WINDOW]]\n");
            return 2;
        }
    }
    rx::mpi_bootstrap boot;
    if (boot.size() < 2) throw rx::argument_error("mpi_pingpong needs at least 2 ranks");
    if (window == 0) throw rx::argument_error("mpi_pingpong: -t needs a window of at least 1");
    if (bandwidth)
        return events ? stream<rx::event_driven>(boot, device, ib_port, iterations, size, window, use_write)
                      : stream<rx::busy_poll>(boot, device, ib_port, iterations, size, window, use_write);
    if (use_write)
        return events ? write_pingpong<rx::event_driven>(boot, device, ib_port, iterations, size)
                      : write_pingpong<rx::busy_poll>(boot, device, ib_port, iterations, size);
    return events ? pingpong<rx::event_driven>(boot, device, ib_port, iterations, size, lean)
                  : pingpong<rx::busy_poll>(boot, device, ib_port, iterations, size, lean);
}
} // namespace

int main(int argc, char** argv) { return mpi_example::run(argc, argv, run); }
