// rdmacxx-perf's latency tests, as perftest runs them:
//   send_lat   SEND ping-pong; both sides post the next receive as each message arrives
//   write_lat  RDMA WRITE ping-pong; each side polls the last byte of its receive half
//   read_lat   one RDMA READ at a time (the server's CPU does nothing)
//   atomic_lat one fetch-and-add at a time (the server's CPU does nothing)
// The client stamps the time before every post; a sample is the gap between two stamps: half
// of it for the ping-pongs (perftest's convention), all of it for READ and atomics. Sends and
// writes are signaled one in -Q, and a signaled one is reaped before the next iteration.

#include "session.hpp"
#include "timer.hpp"

#include <atomic>

namespace perf {
namespace {

// One latency run of `size` bytes: `post(i)` posts iteration i's request, `await(i)` waits for
// its answer (false: the peer ended a timed run). Returns the samples in microseconds.
template <class Completion, class Post, class Await>
std::vector<double> ping(session<Completion>& s, bool pingpong, Post const& post, Await const& await) {
    options const& o = s.opt;
    bool const client = o.server.has_value();
    bool const timed = o.duration_s > 0;
    std::vector<std::uint64_t> stamps; // ticks: one instruction per sample, as perftest's get_cycles
    stamps.reserve(timed ? 1 << 20 : o.iterations + 1);
    (void)ticks_per_us(); // calibrated before the run
    auto const end = ticks() + static_cast<std::uint64_t>(o.duration_s * 1e6 * ticks_per_us());
    std::uint64_t i = 0;
    for (;; ++i) {
        if (client) {
            auto const now = ticks();
            if (timed ? now >= end : i == o.iterations) {
                stamps.push_back(now);
                break;
            }
            stamps.push_back(now);
            post(i);
            if (!await(i)) break;
        } else {
            if (!timed && i == o.iterations) break;
            if (!await(i)) break; // the client's message; false: it ended the timed run
            post(i);
        }
    }
    if (client && timed && pingpong) s.oob.send_pair(i, 0); // the server stops waiting for a next message
    std::vector<double> samples;
    samples.reserve(stamps.size());
    double const scale = pingpong ? 0.5 : 1.0;
    for (std::size_t k = 1; k < stamps.size(); ++k)
        samples.push_back(micros(stamps[k - 1], stamps[k]) * scale);
    return samples;
}

template <class Completion>
void send_lat(session<Completion>& s, std::size_t size, report& rep) {
    options const& o = s.opt;
    watchdog dog(s.oob, o.duration_s > 0 && !o.server);
    auto const msg = rx::send{s.send_half(size)}.inlined(s.inlined(size));
    auto const refill = rx::recv{s.receive_half(s.max_size)};
    std::array<rx::work_completion, 1> wc;
    auto const post = [&](std::uint64_t) {
        bool const sig = ++s.sent % o.cq_mod == 0; // counted across sizes: at most -Q - 1 unsignaled in the queue
        s.qp.post(rx::send{msg}.signaled(sig));
        if (sig) {
            (void)next(s.send_cq, std::span{wc}, dog);
            wc[0].throw_if_error();
        }
    };
    auto const await = [&](std::uint64_t) {
        if (next(s.recv_cq, std::span{wc}, dog) == 0) return false;
        wc[0].throw_if_error();
        s.qp.post_recv(refill);
        return true;
    };
    auto samples = ping(s, true, post, await);
    if (o.server) rep.add(latency_stats(size, samples));
}

// The last byte of `buf`, read as the peer's RDMA WRITE stores it.
std::byte last_byte(rx::local_span<std::byte> buf) {
    std::byte const b = *static_cast<std::byte const volatile*>(&buf[buf.size() - 1]);
    std::atomic_thread_fence(std::memory_order_acquire);
    return b;
}

template <class Completion>
void write_lat(session<Completion>& s, std::size_t size, report& rep) {
    options const& o = s.opt;
    watchdog dog(s.oob, o.duration_s > 0 && !o.server);
    auto const src = s.send_half(size);
    auto const mine = s.receive_half(size);
    auto const msg = rx::write{src, s.peer_receive_half(size)}.inlined(s.inlined(size));
    std::array<rx::work_completion, 1> wc;
    auto const post = [&](std::uint64_t i) {
        src[size - 1] = static_cast<std::byte>((i + 1) & 0xff);
        bool const sig = ++s.sent % o.cq_mod == 0; // counted across sizes: at most -Q - 1 unsignaled in the queue
        s.qp.post(rx::write{msg}.signaled(sig));
        if (sig) {
            (void)next(s.send_cq, std::span{wc}, dog);
            wc[0].throw_if_error();
        }
    };
    auto const await = [&](std::uint64_t i) {
        auto const want = static_cast<std::byte>((i + 1) & 0xff);
        while (last_byte(mine) != want)
            if (dog.idle()) return false;
        dog.moved();
        return true;
    };
    auto samples = ping(s, true, post, await);
    if (o.server) rep.add(latency_stats(size, samples));
}

template <class Completion, class Request>
void one_sided_lat(session<Completion>& s, std::size_t size, Request const& request, report& rep) {
    options const& o = s.opt;
    if (!o.server) return; // the server's CPU takes no part: it waits at the barrier
    watchdog dog(s.oob, false);
    std::array<rx::work_completion, 1> wc;
    auto const post = [&](std::uint64_t) { s.qp.post(request); };
    auto const await = [&](std::uint64_t) {
        (void)next(s.send_cq, std::span{wc}, dog);
        wc[0].throw_if_error();
        return true;
    };
    auto samples = ping(s, false, post, await);
    rep.add(latency_stats(size, samples));
}

} // namespace

template <class Completion>
void run_latency(session<Completion>& s, report& rep) {
    for (std::size_t size : s.opt.sizes) {
        std::fill_n(s.buffer.data.get(), s.buffer.size, std::byte{0});
        s.oob.barrier(); // both buffers cleared before the first write of this size
        switch (s.opt.op) {
        case verb::send:
            send_lat(s, size, rep);
            break;
        case verb::write:
            write_lat(s, size, rep);
            break;
        case verb::read:
            one_sided_lat(s, size, rx::read{s.receive_half(size), s.peer.buffer.first(size)}, rep);
            break;
        case verb::atomic: {
            rx::remote_span<std::uint64_t> const target{s.peer.buffer.address(), 1, s.peer.buffer.rkey()};
            one_sided_lat(s, size, rx::fetch_add{s.mr.template span<std::uint64_t>(0, 1), target, 1}, rep);
            break;
        }
        }
        s.oob.barrier(s.barrier_timeout()); // this size is done on both sides
    }
}

template void run_latency(session<rx::busy_poll>&, report&);
template void run_latency(session<rx::event_driven>&, report&);

} // namespace perf
