// The Asio adapter's objects going in any order on a real device, with nothing told to the
// dispatcher first: a QP destroyed with operations pending (plain and checked) completes them,
// aborted, once it is gone, and io_context::run returns; a CQ destroyed while served is served no
// more; an operation on a QP whose CQ the dispatcher does not route is refused when it starts; a
// dispatcher destroyed before its QPs is not called by them. Every wait is bounded (run_bounded).
#include "asio_net.hpp"
#include "rdmacxx/asio.hpp"

#include "asio_fixture.hpp"
#include "fixture.hpp"

#include "rdmacxx/checked.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
using namespace std::chrono_literals;

namespace {

using test::asio_pair;
using test::run_bounded;

// A third RC QP on `p`'s device and CQ b, connected to a (only its receives are used here).
template <class Completion>
rx::queue_pair<rx::rc, Completion> third_qp(asio_pair<Completion>& p) {
    rx::queue_pair<rx::rc, Completion> q(p.pd, p.cq_b, p.cq_b, {.max_send_wr = 16, .max_recv_wr = 16});
    q.connect(p.port, p.a.local_endpoint(p.port), {.remote_access = rx::all_remote});
    return q;
}

// Five receives on a third QP, one of them cancelled (cancel_mode::wait: still posted), then the
// QP destroyed with no forget: each completes with operation_aborted after it is gone, and run()
// returns. A checked QP's drain finds the receives flushed: the region is out of flight then.
template <class Completion>
void destroy_with_pending() {
    asio_pair<Completion> p{128, rxa::cancel_mode::wait};
    test::buffer in(p.pd, 1024);
    std::optional<rx::queue_pair<rx::rc, Completion>> q{third_qp(p)};
    bool gone = false;
    int calls = 0;
    auto on_recv = [&](std::error_code ec, rx::work_completion) {
        CHECK(test::aborted(ec));
        CHECK(gone); // the device no longer touches the buffer
        if constexpr (!std::is_same_v<Completion, rx::event_driven>) CHECK(in.mr.in_flight() == 0);
        ++calls;
    };
    ::asio::cancellation_signal signal;
    for (std::size_t i = 0; i < 4; ++i)
        rxa::async_recv(p.d, *q, rx::recv{in.span().subspan(i * 128, 128)}, on_recv);
    rxa::async_recv(p.d, *q, rx::recv{in.span().subspan(512, 128)},
                    ::asio::bind_cancellation_slot(signal.slot(), on_recv));
    signal.emit(::asio::cancellation_type::terminal);
    p.io.poll(); // the dispatcher sleeps on its descriptor: nothing of q's will come
    p.io.restart();
    CHECK(calls == 0);
    CHECK(p.d.in_flight() == 5);
    CHECK(p.d.cancelled() == 1);
    q.reset();
    gone = true;
    CHECK(p.d.in_flight() == 0); // completed, their handlers posted
    CHECK(calls == 0);
    run_bounded(p.io);
    CHECK(calls == 5);
    // The dispatcher goes on serving the others.
    test::buffer out(p.pd, 256);
    std::error_code recv_ec{1, std::generic_category()}, send_ec{1, std::generic_category()};
    rxa::async_recv(p.d, p.b, rx::recv{in.span().first(64)},
                    [&](std::error_code ec, rx::work_completion) { recv_ec = ec; });
    rxa::async_post(p.d, p.a, rx::send{out.span().first(64)},
                    [&](std::error_code ec, rx::work_completion) { send_ec = ec; });
    run_bounded(p.io);
    CHECK_FALSE(recv_ec);
    CHECK_FALSE(send_ec);
}

TEST_CASE("asio: a QP destroyed with operations pending completes them, aborted, once it is gone") {
    SUBCASE("event_driven") { destroy_with_pending<rx::event_driven>(); }
    SUBCASE("checked<event_driven>") { destroy_with_pending<rx::checked<rx::event_driven>>(); }
}

TEST_CASE("asio: a QP replaced by a move assignment completes its pending operations, aborted") {
    asio_pair<> p;
    test::buffer in(p.pd, 256);
    auto q = third_qp(p);
    int calls = 0;
    rxa::async_recv(p.d, q, rx::recv{in.span().first(64)}, [&](std::error_code ec, rx::work_completion) {
        CHECK(test::aborted(ec));
        ++calls;
    });
    q = third_qp(p);
    CHECK(p.d.in_flight() == 0);
    run_bounded(p.io);
    CHECK(calls == 1);
    // The new QP is watched afresh on its first operation, and destroying it aborts that one.
    rxa::async_recv(p.d, q, rx::recv{in.span().first(64)}, [&](std::error_code ec, rx::work_completion) {
        CHECK(test::aborted(ec));
        ++calls;
    });
    { auto moved = std::move(q); } // the watch moves with the QP
    run_bounded(p.io);
    CHECK(calls == 2);
}

TEST_CASE("asio: an operation whose CQ the dispatcher does not route is refused when it starts") {
    asio_pair<> p;
    test::buffer in(p.pd, 256), out(p.pd, 256);
    p.d.remove(p.cq_b);
    auto f = rxa::async_recv(p.d, p.b, rx::recv{in.span().first(64)}, rxa::as_exception(::asio::use_future));
    run_bounded(p.io);
    REQUIRE(f.wait_for(10s) == std::future_status::ready); // set on the promise executor
    CHECK_THROWS_AS(f.get(), rx::argument_error);
    CHECK(p.d.in_flight() == 0);
    p.d.add(p.cq_b, rxa::cq_mode::batch);
    auto g = rxa::async_post(p.d, p.b, rx::send{out.span().first(64)}, ::asio::use_future);
    run_bounded(p.io);
    REQUIRE(g.wait_for(10s) == std::future_status::ready); // set on the promise executor
    CHECK_THROWS_AS(g.get(), test::net_system_error);      // EINVAL: use_future gets the code
    CHECK(p.d.in_flight() == 0);
    // Nothing reached the device: routed again, b's next receive takes a's SEND, and no
    // completion is a stray.
    p.d.remove(p.cq_b);
    p.d.add(p.cq_b);
    std::error_code recv_ec{1, std::generic_category()}, send_ec{1, std::generic_category()};
    rxa::async_recv(p.d, p.b, rx::recv{in.span().first(64)},
                    [&](std::error_code ec, rx::work_completion) { recv_ec = ec; });
    rxa::async_post(p.d, p.a, rx::send{out.span().first(64)},
                    [&](std::error_code ec, rx::work_completion) { send_ec = ec; });
    run_bounded(p.io);
    CHECK_FALSE(recv_ec);
    CHECK_FALSE(send_ec);
    CHECK(p.d.stray() == 0);
}

TEST_CASE("asio: a QP with operations pending in one dispatcher is refused by another; with none, it moves over") {
    asio_pair<> p;
    test::buffer in(p.pd, 256);
    rx::completion_channel other_channel(p.ctx);
    rxa::completion_dispatcher other(p.io.get_executor(), other_channel);
    rx::completion_queue<rx::event_driven> cq(p.ctx, 64, other_channel);
    other.add(cq);
    rx::queue_pair<rx::rc, rx::event_driven> q(p.pd, p.cq_b, cq, {.max_send_wr = 16, .max_recv_wr = 16});
    q.connect(p.port, p.a.local_endpoint(p.port), {.remote_access = rx::all_remote});
    int calls = 0;
    ::asio::cancellation_signal signal;
    rxa::async_recv(other, q, rx::recv{in.span().first(64)},
                    ::asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rx::work_completion) {
                        CHECK(test::aborted(ec));
                        ++calls;
                    }));
    // Its send CQ is p.d's, but its receives are routed by `other`: p.d refuses it.
    auto f = rxa::async_post(p.d, q, rx::write{in.span().first(8), in.mr.remote().first(8)},
                             rxa::as_exception(::asio::use_future));
    p.io.poll();
    p.io.restart();
    REQUIRE(f.wait_for(10s) == std::future_status::ready); // set on the promise executor
    CHECK_THROWS_AS(f.get(), rx::argument_error);
    CHECK(other.in_flight() == 1);
    // Cancelled (q to ERR, its receive flushed and reaped): nothing of q is pending in `other`,
    // and p.d takes q over. Its WRITE, on a QP in ERR, completes flushed, through p.d.
    signal.emit(::asio::cancellation_type::terminal);
    run_bounded(p.io);
    CHECK(calls == 1);
    CHECK(other.in_flight() == 0);
    auto g = rxa::async_post(p.d, q, rx::write{in.span().first(8), in.mr.remote().first(8)}, ::asio::use_future);
    run_bounded(p.io);
    REQUIRE(g.wait_for(10s) == std::future_status::ready); // set on the promise executor
    try {
        (void)g.get();
        FAIL("a WRITE on a QP in ERR completed successfully");
    } catch (test::net_system_error const& e) {
        CHECK(std::error_code{e.code()} == rx::make_wc_error_code(IBV_WC_WR_FLUSH_ERR));
    }
}

TEST_CASE("asio: a CQ destroyed while served is served no more, and the others go on") {
    asio_pair<> p;
    test::buffer in(p.pd, 256), out(p.pd, 256);
    std::array<rx::work_completion, 4> wcs; // outlive the wait's handler, which runs after the CQ is gone
    int waits = 0;
    {
        rx::completion_queue<rx::event_driven> extra(p.ctx, 64, p.channel);
        p.d.add(extra, rxa::cq_mode::batch);
        rxa::async_wait(p.d, extra, std::span{wcs}, [&](std::error_code ec, std::size_t) {
            CHECK(test::aborted(ec));
            ++waits;
        });
        CHECK(p.d.in_flight() == 1);
        // destroyed with its wait pending
    }
    CHECK(p.d.in_flight() == 0);
    run_bounded(p.io);
    CHECK(waits == 1);
    {
        rx::completion_queue<rx::event_driven> extra(p.ctx, 64, p.channel);
        p.d.add(extra); // routed, polled by every sweep
    }
    std::error_code recv_ec{1, std::generic_category()}, send_ec{1, std::generic_category()};
    rxa::async_recv(p.d, p.b, rx::recv{in.span().first(64)},
                    [&](std::error_code ec, rx::work_completion) { recv_ec = ec; });
    rxa::async_post(p.d, p.a, rx::send{out.span().first(64)},
                    [&](std::error_code ec, rx::work_completion) { send_ec = ec; });
    run_bounded(p.io);
    CHECK_FALSE(recv_ec); // before, the sweep polled the destroyed CQ: orphaned_error failed every operation
    CHECK_FALSE(send_ec);

    // A CQ destroyed under a live QP: the device refuses (EBUSY) and keeps it, and the QP's
    // receive stays posted, so its operation stays pending — its buffer is not handed back —
    // until the QP goes.
    int calls = 0;
    bool qp_gone = false;
    ibv_cq* kept = nullptr;
    {
        auto cq = std::make_unique<rx::completion_queue<rx::event_driven>>(p.ctx, 64, p.channel);
        kept = cq->native_handle();
        p.d.add(*cq);
        rx::queue_pair<rx::rc, rx::event_driven> q(p.pd, *cq, *cq, {.max_send_wr = 8, .max_recv_wr = 8});
        q.connect(p.port, p.a.local_endpoint(p.port), {.remote_access = rx::all_remote});
        rxa::async_recv(p.d, q, rx::recv{in.span().first(64)}, [&](std::error_code ec, rx::work_completion) {
            CHECK(test::aborted(ec));
            CHECK(qp_gone);
            ++calls;
        });
        cq.reset();
        p.io.poll();
        p.io.restart();
        CHECK(calls == 0);
        CHECK(p.d.in_flight() == 1);
    }
    qp_gone = true;
    run_bounded(p.io);
    CHECK(calls == 1);
    CHECK(::ibv_destroy_cq(kept) == 0); // the device kept it while the QP lived; now it goes
}

TEST_CASE("asio: a dispatcher destroyed before the QPs it routes is not called by them") {
    asio_pair<> p;
    test::buffer in(p.pd, 256);
    int calls = 0;
    rxa::async_recv(p.d, p.b, rx::recv{in.span().first(64)}, [&](std::error_code, rx::work_completion) { ++calls; });
    // Replaced: its pending handler is destroyed without being called, and its cell reads null.
    p.d = rxa::completion_dispatcher(p.io.get_executor(), p.channel);
    { auto gone = std::move(p.b); } // tells nobody
    run_bounded(p.io);
    CHECK(calls == 0);
    CHECK(p.d.in_flight() == 0);
}

// In-flight errors reported by destructors, counted instead of ending the process.
std::atomic<int> in_flight_reports{0};
void count_in_flight(rx::in_flight_error const&) noexcept { ++in_flight_reports; }

// A QP with a receive pending, its region and its dispatcher, destroyed in the order `order`
// names (q: the QP, m: the region, d: the dispatcher); then the io_context runs out of work.
// Every order runs to the end: the receive's handler runs once (aborted) after its QP is gone
// when the dispatcher outlives the QP, and never when the dispatcher goes first. A `checked`
// region destroyed before its QP reports the receive in flight (counted here; by default the
// report ends the process): returns how many reports there were.
template <class Completion>
int tear_down(std::string const& order) {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_channel channel(ctx);
    rx::completion_queue<Completion> cq(ctx, 64, channel);
    rx::queue_pair<rx::rc, Completion> a(pd, cq, cq, {.max_send_wr = 8, .max_recv_wr = 8});
    auto q = std::make_unique<rx::queue_pair<rx::rc, Completion>>(
        pd, cq, cq, rx::qp_capabilities{.max_send_wr = 8, .max_recv_wr = 8});
    a.connect(port, q->local_endpoint(port), {.remote_access = rx::all_remote});
    q->connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    ::asio::io_context io;
    auto d = std::make_unique<rxa::completion_dispatcher>(io.get_executor(), channel);
    d->add(cq);
    auto m = std::make_unique<test::buffer>(pd, 256);
    int calls = 0;
    rxa::async_recv(*d, *q, rx::recv{m->span()}, [&calls](std::error_code ec, rx::work_completion) {
        CHECK(test::aborted(ec));
        ++calls;
    });
    int const before = in_flight_reports.load();
    bool dispatcher_first = false;
    for (char c : order) {
        if (c == 'q') q.reset();
        if (c == 'm') m.reset();
        if (c == 'd') {
            dispatcher_first = q != nullptr;
            d.reset();
        }
    }
    run_bounded(io);
    CHECK(calls == (dispatcher_first ? 0 : 1));
    return in_flight_reports.load() - before;
}

TEST_CASE("asio: a QP with an operation pending, its region and its dispatcher go in any order") {
    auto const previous = rx::set_in_flight_handler(&count_in_flight);
    for (std::string order : {"qmd", "qdm", "mqd", "mdq", "dqm", "dmq"}) {
        CAPTURE(order);
        CHECK(tear_down<rx::event_driven>(order) == 0);
        // checked: the region destroyed while the receive that names it is in flight is reported
        // (the QP's own destruction drains it first in the others).
        int const reports = tear_down<rx::checked<rx::event_driven>>(order);
        CHECK(reports == (order.find('m') < order.find('q') ? 1 : 0));
    }
    (void)rx::set_in_flight_handler(previous);
}

TEST_CASE("asio: dispatcher_for: one dispatcher per channel, owned by the io_context") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_channel channel(ctx);
    rx::completion_queue<rx::event_driven> cq(ctx, 64, channel);
    rx::queue_pair<rx::rc, rx::event_driven> a(pd, cq, cq, {.max_send_wr = 8, .max_recv_wr = 8});
    rx::queue_pair<rx::rc, rx::event_driven> b(pd, cq, cq, {.max_send_wr = 8, .max_recv_wr = 8});
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer in(pd, 256), out(pd, 256);
    int pending_calls = 0;
    {
        ::asio::io_context io;
        auto& d = rxa::dispatcher_for(io.get_executor(), channel);
        CHECK(&rxa::dispatcher_for(io.get_executor(), channel) == &d); // the same one
        d.add(cq);
        std::error_code recv_ec{1, std::generic_category()}, send_ec{1, std::generic_category()};
        rxa::async_recv(d, b, rx::recv{in.span().first(64)},
                        [&](std::error_code ec, rx::work_completion) { recv_ec = ec; });
        rxa::async_post(d, a, rx::send{out.span().first(64)},
                        [&](std::error_code ec, rx::work_completion) { send_ec = ec; });
        run_bounded(io);
        CHECK_FALSE(recv_ec);
        CHECK_FALSE(send_ec);
        auto& service = ::asio::use_service<rxa::dispatcher_service>(io);
        {
            rx::completion_channel other(ctx);
            CHECK(&rxa::dispatcher_for(io.get_executor(), other) != &d);
            CHECK(service.size() == 2);
        }
        CHECK(&rxa::dispatcher_for(io.get_executor(), channel) == &d); // the gone channel's is dropped
        CHECK(service.size() == 1);
        // Left pending: the io_context's destruction destroys the dispatcher and the handler.
        rxa::async_recv(d, b, rx::recv{in.span().first(64)},
                        [&pending_calls](std::error_code, rx::work_completion) { ++pending_calls; });
    }
    CHECK(pending_calls == 0);
    // b's destruction (at the end of the scope) finds its dispatcher gone and tells nobody; a
    // new io_context makes a new dispatcher for the same channel.
    ::asio::io_context io2;
    auto& d2 = rxa::dispatcher_for(io2.get_executor(), channel);
    d2.add(cq);
    CHECK(d2.in_flight() == 0);
}

} // namespace
