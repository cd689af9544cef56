#pragma once
// What the Asio adapter's device tests share: two connected RC QPs served by one dispatcher, and
// a bounded run of an io_context.
#include "asio_net.hpp"
#include "rdmacxx/asio.hpp"

#include "fixture.hpp"

#include <chrono>
#include <cstdint>

namespace test {

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;

// Two RC QPs on one device, connected, their CQs on one channel served by one dispatcher.
template <class Completion = rx::event_driven>
struct asio_pair {
    explicit asio_pair(std::uint32_t depth = 128, rxa::cancel_mode cancel = rxa::cancel_mode::qp_to_error)
        : ctx(test::open_test_device()), port(ctx), pd(ctx), channel(ctx), cq_a(ctx, 4096, channel),
          cq_b(ctx, 4096, channel), a(pd, cq_a, cq_a, {.max_send_wr = depth, .max_recv_wr = depth}),
          b(pd, cq_b, cq_b, {.max_send_wr = depth, .max_recv_wr = depth}),
          d(io.get_executor(), channel, {.max_operations = 4096, .cancel = cancel}) {
        a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
        b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
        d.add(cq_a);
        d.add(cq_b);
    }
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    rx::completion_channel channel;
    rx::completion_queue<Completion> cq_a, cq_b;
    rx::queue_pair<rx::rc, Completion> a, b;
    ::asio::io_context io;
    rxa::completion_dispatcher d;
};

// Runs `io` until it has no more work, at most `bound`; fails when the bound ran out.
inline void run_bounded(::asio::io_context& io, std::chrono::seconds bound = std::chrono::seconds{20}) {
    auto const start = std::chrono::steady_clock::now();
    io.run_for(bound);
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() - start < bound,
                    "the io_context still had work after " << bound.count() << " s");
    io.restart();
}

} // namespace test
