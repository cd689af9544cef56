#pragma once
// A ring over a peer group, with or without connections on first use, over any bootstrap:
// threads as ranks (tests/device/peer_group_test.cpp) or processes across nodes under mpirun
// (tests/mpi/peer_group_test.cpp). Each rank sends several path MTUs to the next rank and checks
// every byte it receives from the previous; every wait is bounded.

#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/bootstrap/peer_group.hpp"

#include "fixture.hpp"

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace test {

/// What one rank saw of its ring.
struct ring_report {
    double up_ms = 0;          // the group's construction
    double ring_ms = 0;        // the first qp() to each neighbour, the messages and their checks
    std::size_t connected = 0; // peers with a connected RC QP (peer_group::connected) at the end
};

/// Makes a peer group over `boot` (with `connect_on_first_use` as asked) on this rank's test
/// device, sends `bytes` to the next rank and checks what the previous rank sent; then calls
/// `at_end(report)` while every rank's QPs still exist (all were made before the first barrier).
/// @throws what the group throws; std::runtime_error naming the bytes that differ.
template <rdmacxx::bootstrap Bootstrap, class AtEnd>
ring_report peer_group_ring(Bootstrap& boot, bool first_use, AtEnd&& at_end, std::size_t bytes = 4096) {
    namespace rx = rdmacxx;
    using clock = std::chrono::steady_clock;
    int const n = static_cast<int>(boot.size()), me = static_cast<int>(boot.rank());
    int const next = (me + 1) % n, prev = (me + n - 1) % n;
    auto pattern = [](int from, std::size_t k) {
        return static_cast<std::byte>((k * 31 + static_cast<std::size_t>(from) * 7) & 0xffU);
    };

    rx::context ctx = open_test_device();
    rx::end_port const port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue<rx::busy_poll> cq(ctx, 64);
    buffer in(pd, bytes), out(pd, bytes);
    rx::peer_group_options opt;
    opt.caps = {.max_send_wr = 4, .max_recv_wr = 4};
    opt.connect_on_first_use = first_use;
    auto const t0 = clock::now();
    rx::peer_group<rx::busy_poll> group{boot, port, pd, cq, cq, {}, opt};
    auto const t1 = clock::now();
    // Both neighbours before the barrier: on first use, a rank answers its peers' handshakes
    // only while it calls into its group, not while it waits in the bootstrap's barrier.
    group.qp(prev).post_recv(rx::recv{in.span()}.id(1));
    (void)group.qp(next);
    boot.barrier();
    for (std::size_t k = 0; k < bytes; ++k)
        out.span()[k] = pattern(me, k);
    group.qp(next).post(rx::send{out.span()}.id(2));
    for (int done = 0; done < 2; ++done) {
        rx::work_completion const wc = next_completion(cq, std::chrono::seconds{60});
        wc.throw_if_error();
    }
    std::size_t bad = 0;
    for (std::size_t k = 0; k < bytes; ++k)
        bad += in.span()[k] != pattern(prev, k) ? 1U : 0U;
    if (bad != 0) throw std::runtime_error(std::to_string(bad) + " bytes wrong from rank " + std::to_string(prev));
    ring_report r;
    for (int p = 0; p < n; ++p)
        r.connected += p != me && group.connected(p) ? 1U : 0U;
    r.up_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    r.ring_ms = std::chrono::duration<double, std::milli>(clock::now() - t1).count();
    at_end(r);
    boot.barrier(); // no rank tears its QPs down while a neighbour still sends
    return r;
}

} // namespace test
