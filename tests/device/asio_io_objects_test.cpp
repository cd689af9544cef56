// The Asio adapter's I/O objects on a real device: io::completion_queue (a CQ routed by its
// context's dispatcher from the start), io::queue_pair and io::connection (a QP or a CM
// connection on it, with get_executor() and the operations as members), the context's CM engine
// (cm_engine_for) and an acceptor made from an executor. Nothing is added, forgotten or removed
// by hand. Every wait is bounded (run_bounded, run_until).
#include "asio_net.hpp"
#include "rdmacxx/asio.hpp"

#include "asio_fixture.hpp"
#include "fixture.hpp"

#include "rdmacxx/checked.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
using namespace std::chrono_literals;

namespace {

using test::run_bounded;

constexpr rx::qp_capabilities caps{.max_send_wr = 64, .max_recv_wr = 64};

// Two io::queue_pairs on one io::completion_queue, connected to each other.
struct io_pair {
    io_pair()
        : ctx(test::open_test_device()), port(ctx), pd(ctx), cq(io.get_executor(), ctx, 1024), a(pd, cq, caps),
          b(pd, cq, caps) {
        a->connect(port, b->local_endpoint(port), {.remote_access = rx::all_remote});
        b->connect(port, a->local_endpoint(port), {.remote_access = rx::all_remote});
    }
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    ::asio::io_context io;
    rxa::completion_queue<> cq;
    rxa::queue_pair<rx::rc> a, b;
};

// Runs `io` until `done()`, at most `bound`; fails when the bound ran out.
template <class Done>
void run_until(::asio::io_context& io, Done done, std::chrono::seconds bound) {
    auto const end = std::chrono::steady_clock::now() + bound;
    while (!done() && std::chrono::steady_clock::now() < end) {
        if (io.stopped()) io.restart();
        io.run_for(20ms);
    }
    REQUIRE_MESSAGE(done(), "not done within " << bound.count() << " s");
}

} // namespace

TEST_CASE("asio I/O objects: a queue pair on an io::completion_queue: members, its executor, no add") {
    io_pair p;
    CHECK(p.a.get_executor() == rxa::completion_dispatcher::executor_type{p.io.get_executor()});
    CHECK(p.cq.get_executor() == p.a.get_executor());
    CHECK(&p.a.dispatcher() == &p.cq.dispatcher());
    CHECK(::asio::use_service<rxa::dispatcher_service>(p.io).size() == 1);
    test::buffer out(p.pd, 256), in(p.pd, 256);
    test::fill_pattern(out.bytes_, 5);

    SUBCASE("callbacks") {
        std::error_code recv_ec{1, std::generic_category()}, send_ec{1, std::generic_category()};
        std::uint32_t got = 0;
        p.b.async_recv(rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion wc) {
            recv_ec = ec;
            got = wc.byte_len();
        });
        p.a.async_post(rx::send{out.span().first(200)}, [&](std::error_code ec, rx::work_completion) { send_ec = ec; });
        run_bounded(p.io);
        CHECK_FALSE(recv_ec);
        CHECK_FALSE(send_ec);
        CHECK(got == 200);
    }
    SUBCASE("co_await, a chain, an RDMA READ") {
        std::exception_ptr failure;
        bool done = false;
        ::asio::co_spawn(
            p.io,
            [&]() -> ::asio::awaitable<void> {
                using namespace ::asio::experimental::awaitable_operators;
                auto [r, s] =
                    co_await (p.b.async_recv(rx::recv{in.span()}, ::asio::use_awaitable) &&
                              p.a.async_post(rxa::chain{rx::write{out.span().first(8), in.mr.remote().first(8)},
                                                        rx::send{out.span().first(200)}},
                                             ::asio::use_awaitable));
                CHECK(r.byte_len() == 200);
                CHECK(s.opcode() == IBV_WC_SEND);
                test::buffer back(p.pd, 256);
                (void)co_await p.a.async_post(rx::read{back.span().first(200), in.mr.remote().first(200)},
                                              ::asio::use_awaitable);
                CHECK(std::equal(back.bytes_.begin(), back.bytes_.begin() + 200, out.bytes_.begin()));
                done = true;
            },
            [&](std::exception_ptr e) { failure = e; });
        run_bounded(p.io);
        if (failure) std::rethrow_exception(failure);
        CHECK(done);
    }
    SUBCASE("a queue pair moved: the dispatcher follows it") {
        rxa::queue_pair<rx::rc> moved = std::move(p.b);
        std::error_code recv_ec{1, std::generic_category()};
        moved.async_recv(rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion) { recv_ec = ec; });
        p.a.async_post(rx::send{out.span().first(64)}, [](std::error_code, rx::work_completion) {});
        run_bounded(p.io);
        CHECK_FALSE(recv_ec);
    }
}

TEST_CASE("asio I/O objects: a queue pair destroyed with a receive pending completes it, aborted, once it is gone") {
    io_pair p;
    test::buffer in(p.pd, 256);
    std::optional<rxa::queue_pair<rx::rc>> q;
    q.emplace(p.pd, p.cq, caps);
    q.value()->connect(p.port, p.a->local_endpoint(p.port), {.remote_access = rx::all_remote});
    int calls = 0;
    bool gone = false;
    q->async_recv(rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion) {
        CHECK(test::aborted(ec));
        CHECK(gone);
        ++calls;
    });
    CHECK(p.cq.dispatcher().in_flight() == 1);
    q.reset();
    gone = true;
    run_bounded(p.io);
    CHECK(calls == 1);
    CHECK(p.cq.dispatcher().in_flight() == 0);
}

TEST_CASE("asio I/O objects: what could never complete is refused when it is made") {
    io_pair p;
    rx::completion_queue<rx::event_driven> other{p.ctx, 64};
    SUBCASE("a QP whose queues complete on another CQ") {
        CHECK_THROWS_AS(
            (rxa::queue_pair<rx::rc>{p.cq, rx::queue_pair<rx::rc, rx::event_driven>{p.pd, other, other, caps}}),
            rx::argument_error);
        CHECK_THROWS_AS(
            (rxa::queue_pair<rx::rc>{p.cq, rx::queue_pair<rx::rc, rx::event_driven>{p.pd, p.cq.cq(), other, caps}}),
            rx::argument_error);
    }
    SUBCASE("a moved-from QP") {
        rx::queue_pair<rx::rc, rx::event_driven> q{p.pd, p.cq.cq(), p.cq.cq(), caps};
        rx::queue_pair<rx::rc, rx::event_driven> taken = std::move(q);
        CHECK_THROWS_AS((rxa::queue_pair<rx::rc>{p.cq, std::move(q)}), rx::argument_error);
    }
}

TEST_CASE("asio I/O objects: completion queues in a vector (moved as it grows) keep their dispatchers") {
    rx::context ctx{test::open_test_device()};
    rx::end_port port{ctx};
    rx::protection_domain pd{ctx};
    ::asio::io_context io;
    std::vector<rxa::completion_queue<>> cqs;
    for (int i = 0; i < 4; ++i)
        cqs.emplace_back(io.get_executor(), ctx, 64);
    CHECK(::asio::use_service<rxa::dispatcher_service>(io).size() == 4);
    rxa::queue_pair<rx::rc> a{pd, cqs[0], caps}, b{pd, cqs[3], caps};
    a->connect(port, b->local_endpoint(port), {.remote_access = rx::all_remote});
    b->connect(port, a->local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer out(pd, 64), in(pd, 64);
    int done = 0;
    b.async_recv(rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion) { done += ec ? 0 : 1; });
    a.async_post(rx::send{out.span()}, [&](std::error_code ec, rx::work_completion) { done += ec ? 0 : 1; });
    run_bounded(io);
    CHECK(done == 2);
    CHECK(&a.dispatcher() != &b.dispatcher());
    // b's CQ goes first: the device keeps it while b lives (EBUSY), but its dispatcher no longer
    // serves it, so a receive on b could never complete: refused when it starts (EINVAL).
    cqs.pop_back();
    std::error_code refused;
    b.async_recv(rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion) { refused = ec; });
    run_bounded(io);
    CHECK(refused == std::errc::invalid_argument);
}

TEST_CASE("asio I/O objects: connections on the context's CM engine (shared resources, self-contained), an acceptor "
          "made from an executor") {
    ::asio::io_context io;
    auto const ex = io.get_executor();
    rxa::cm_engine& eng = rxa::cm_engine_for(ex);
    CHECK(&rxa::cm_engine_for(ex) == &eng);
    rxa::cm_acceptor<rx::rc> acceptor{ex, test::device_address(0)};
    CHECK(&acceptor.engine() == &eng);
    CHECK(acceptor.get_executor() == ::asio::any_io_executor{ex});
    rx::context& dev = acceptor.listener().cm_id().context();
    rx::protection_domain pd{dev};
    rxa::completion_queue<> cq{ex, dev, 256};
    rx::cm::connection_options opt;
    opt.deadlines.event = 10s;
    test::buffer sbuf(pd, 256);
    std::optional<test::buffer> cbuf;
    std::optional<rxa::connection<rx::rc>> server, client;
    std::exception_ptr failure;
    auto keep = [&failure](std::exception_ptr e) {
        if (e && !failure) failure = e;
    };
    std::error_code server_recv{1, std::generic_category()};
    std::uint32_t received = 0;
    ::asio::co_spawn(
        io,
        [&]() -> ::asio::awaitable<void> {
            // The receive is posted before the accept completes: the client may send at once.
            auto c = co_await rxa::async_accept<rx::event_driven>(
                acceptor, opt, rx::cm::shared_qp<rx::rc>(cq.resources(pd)),
                [&](rx::cm::connection<rx::rc, rx::event_driven>& n) {
                    rxa::async_recv(cq.dispatcher(), n.qp(), rx::recv{sbuf.span()},
                                    [&](std::error_code ec, rx::work_completion wc) {
                                        server_recv = ec;
                                        received = wc.byte_len();
                                    });
                },
                ::asio::use_awaitable);
            server.emplace(cq, std::move(*c));
        },
        keep);
    ::asio::co_spawn(
        io,
        [&]() -> ::asio::awaitable<void> {
            auto const to = rx::cm::address::resolve(test::device_ip(), acceptor.port());
            // A self-contained connection (its own PD, CQ and channel): routed by its channel's
            // dispatcher in this context.
            auto c = co_await rxa::async_connect<rx::rc, rx::event_driven>(eng, to, opt, {}, ::asio::use_awaitable);
            client.emplace(ex, std::move(*c));
            cbuf.emplace((*client)->pd(), 256);
            test::fill_pattern(cbuf->bytes_, 9);
            (void)co_await client->async_post(rx::send{cbuf->span().first(100)}, ::asio::use_awaitable);
        },
        keep);
    run_until(
        io, [&] { return (!server_recv && server && client) || failure; }, 30s);
    if (failure) std::rethrow_exception(failure);
    CHECK(received == 100);
    CHECK(std::equal(sbuf.bytes_.begin(), sbuf.bytes_.begin() + 100, cbuf->bytes_.begin()));
    CHECK(&client->dispatcher() != &cq.dispatcher());
    CHECK(::asio::use_service<rxa::dispatcher_service>(io).size() == 2);
    CHECK((*client)->state() == rx::cm::connection_state::established);
    // Destroyed with a receive pending: it completes, aborted, once the QP is gone.
    int aborted = 0;
    server->async_recv(rx::recv{sbuf.span()},
                       [&](std::error_code ec, rx::work_completion) { aborted += test::aborted(ec) ? 1 : 0; });
    server.reset();
    cbuf.reset(); // deregistered before its PD, which the client's connection owns
    client.reset();
    run_until(
        io, [&] { return aborted == 1; }, 20s);
    CHECK(cq.dispatcher().in_flight() == 0);
    // The client's channel went with it: its dispatcher leaves the service at the next lookup.
    rxa::completion_queue<> again{ex, dev, 16};
    CHECK(::asio::use_service<rxa::dispatcher_service>(io).size() == 2);
}

TEST_CASE("asio I/O objects: a shared receive queue: receives through it; destroyed once its QPs are gone, its "
          "pending receives complete, aborted") {
    rx::context ctx{test::open_test_device()};
    rx::end_port port{ctx};
    rx::protection_domain pd{ctx};
    ::asio::io_context io;
    rxa::completion_queue<> cq{io.get_executor(), ctx, 256};
    std::optional<rxa::shared_receive_queue<>> srq;
    srq.emplace(pd, cq, 64);
    CHECK(srq->get_executor() == cq.get_executor());
    rxa::queue_pair<rx::rc> a{pd, cq, caps};
    std::optional<rxa::queue_pair<rx::rc>> b;
    b.emplace(pd, cq, *srq, caps);
    a->connect(port, b.value()->local_endpoint(port), {.remote_access = rx::all_remote});
    b.value()->connect(port, a->local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer out(pd, 256), in(pd, 256);
    test::fill_pattern(out.bytes_, 13);
    std::error_code recv_ec{1, std::generic_category()};
    std::uint32_t from = 0, bytes = 0;
    srq->async_recv(rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion wc) {
        recv_ec = ec;
        from = wc.qp_num();
        bytes = wc.byte_len();
    });
    a.async_post(rx::send{out.span().first(120)}, [](std::error_code, rx::work_completion) {});
    run_bounded(io);
    CHECK_FALSE(recv_ec);
    CHECK(from == b->qp().qp_num());
    CHECK(bytes == 120);
    CHECK(std::equal(in.bytes_.begin(), in.bytes_.begin() + 120, out.bytes_.begin()));

    SUBCASE("refused: a QP on an SRQ that serves another CQ") {
        rxa::completion_queue<> other{io.get_executor(), ctx, 16};
        CHECK_THROWS_AS((rxa::queue_pair<rx::rc>{pd, other, *srq, caps}), rx::argument_error);
    }
    SUBCASE("destroyed with receives pending") {
        int aborted = 0;
        for (std::size_t i = 0; i < 2; ++i)
            srq->async_recv(rx::recv{in.span().subspan(i * 128, 128)},
                            [&](std::error_code ec, rx::work_completion) { aborted += test::aborted(ec) ? 1 : 0; });
        b.reset();         // the QP goes; the SRQ's receives are the SRQ's, not flushed
        io.run_for(300ms); // nothing completes them: the io_context keeps waiting
        io.restart();
        CHECK(aborted == 0);
        CHECK(cq.dispatcher().in_flight() == 2);
        srq.reset(); // no QP uses it: destroyed, and the dispatcher is told
        run_bounded(io);
        CHECK(aborted == 2);
        CHECK(cq.dispatcher().in_flight() == 0);
    }
}

TEST_CASE("asio I/O objects: a completion queue destroyed while a receive of its QP is pending is kept until the "
          "context goes: the receive still completes") {
    rx::context ctx{test::open_test_device()};
    rx::end_port port{ctx};
    rx::protection_domain pd{ctx};
    ::asio::io_context io;
    rxa::completion_queue<> cq_a{io.get_executor(), ctx, 64};
    std::optional<rxa::completion_queue<>> cq_b;
    cq_b.emplace(io.get_executor(), ctx, 64);
    rxa::completion_dispatcher& d_b = cq_b->dispatcher();
    rxa::queue_pair<rx::rc> a{pd, cq_a, caps}, b{pd, *cq_b, caps};
    a->connect(port, b->local_endpoint(port), {.remote_access = rx::all_remote});
    b->connect(port, a->local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer out(pd, 64), in(pd, 64);
    test::fill_pattern(out.bytes_, 17);
    std::error_code recv_ec{1, std::generic_category()};
    std::uint32_t bytes = 0;
    b.async_recv(rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion wc) {
        recv_ec = ec;
        bytes = wc.byte_len();
    });
    cq_b.reset(); // b's receive is pending: the CQ and its channel are kept by the dispatcher
    CHECK(d_b.in_flight() == 1);
    a.async_post(rx::send{out.span().first(48)}, [](std::error_code, rx::work_completion) {});
    run_bounded(io);
    CHECK_FALSE(recv_ec);
    CHECK(bytes == 48);
    CHECK(std::equal(in.bytes_.begin(), in.bytes_.begin() + 48, out.bytes_.begin()));
    CHECK(d_b.in_flight() == 0);
}

namespace {
std::atomic<int> in_flight_reports{0};
void count_in_flight(rx::in_flight_error const&) noexcept { ++in_flight_reports; }

// A self-contained connection (`Completion` CQ of its own) held as an io::connection, with a
// receive pending into a region the connection keeps (register_memory), destroyed: the receive
// completes, aborted, after the QP is gone; a checked connection's QP drains its request before
// the region goes, so nothing is reported in flight.
template <class Completion>
void self_contained_teardown() {
    ::asio::io_context io;
    auto const ex = io.get_executor();
    rxa::cm_acceptor<rx::rc> acceptor{ex, test::device_address(0)};
    rx::cm::connection_options opt;
    opt.deadlines.event = 10s;
    std::optional<rx::cm::connection<rx::rc, rx::event_driven>> server;
    std::optional<rxa::connection<rx::rc, Completion>> client;
    std::exception_ptr failure;
    auto keep = [&failure](std::exception_ptr e) {
        if (e && !failure) failure = e;
    };
    ::asio::co_spawn(
        io,
        [&]() -> ::asio::awaitable<void> {
            auto c = co_await rxa::async_accept<rx::event_driven>(acceptor, opt, {}, {}, ::asio::use_awaitable);
            server.emplace(std::move(*c));
        },
        keep);
    ::asio::co_spawn(
        io,
        [&]() -> ::asio::awaitable<void> {
            auto const to = rx::cm::address::resolve(test::device_ip(), acceptor.port());
            auto c = co_await rxa::async_connect<rx::rc, Completion>(rxa::cm_engine_for(ex), to, opt, {},
                                                                     ::asio::use_awaitable);
            client.emplace(ex, std::move(*c));
        },
        keep);
    run_until(
        io, [&] { return (server && client) || failure; }, 30s);
    if (failure) std::rethrow_exception(failure);
    std::vector<std::byte> memory(256); // outlives the connection, which keeps its registration
    rx::memory_region& mr = (*client)->register_memory(std::span{memory}, rx::access::local_write);
    int calls = 0;
    bool gone = false;
    client->async_recv(rx::recv{mr.span()}, [&](std::error_code ec, rx::work_completion) {
        CHECK(test::aborted(ec));
        CHECK(gone);
        ++calls;
    });
    rxa::completion_dispatcher& d = client->dispatcher();
    CHECK(d.in_flight() == 1);
    if constexpr (!std::is_same_v<Completion, rx::event_driven>) CHECK(mr.in_flight() == 1); // the ledger sees it
    int const before = in_flight_reports.load();
    client.reset(); // the QP, then the region, then the connection's PD, CQ and channel
    gone = true;
    run_until(
        io, [&] { return calls == 1; }, 20s);
    CHECK(in_flight_reports.load() == before);
    server.reset();
}
} // namespace

TEST_CASE("asio I/O objects: a self-contained connection with a receive pending into a region it keeps goes "
          "without a report, its receive aborted") {
    auto const previous = rx::set_in_flight_handler(&count_in_flight);
    SUBCASE("event_driven") { self_contained_teardown<rx::event_driven>(); }
    SUBCASE("checked<event_driven>") { self_contained_teardown<rx::checked<rx::event_driven>>(); }
    (void)rx::set_in_flight_handler(previous);
}
