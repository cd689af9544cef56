// The Asio adapter on a real device: every completion token (callback, use_future, deferred,
// use_awaitable) for posting, receiving and the CM flows; a thousand operations in flight across
// eight coroutines; cancellation; error completions as error codes and as exceptions; a peer's
// disconnect waking every pending operation. Every wait is bounded (run_for, wait_for, timers).
// Built only when Meson finds standalone Asio (its own executable, asio_tests).
#include "asio_net.hpp"
#include "rdmacxx/asio.hpp"

#include "asio_fixture.hpp"
#include "fixture.hpp"

#include "rdmacxx/checked.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <future>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <unistd.h>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
using namespace std::chrono_literals;

namespace {

using test::asio_pair;
using test::run_bounded;

// Spawns `coro` on `io`, keeping what it throws.
template <class Awaitable>
void spawn(::asio::io_context& io, Awaitable coro, std::exception_ptr& failure) {
    ::asio::co_spawn(io, std::move(coro), [&failure](std::exception_ptr e) {
        if (e) failure = e;
    });
}

} // namespace

TEST_CASE("asio: callbacks complete a send and its receive with their own work completions") {
    asio_pair<> p;
    test::buffer out(p.pd, 256), in(p.pd, 256);
    test::fill_pattern(out.bytes_, 3);
    std::optional<rx::work_completion> got_recv, got_send;
    std::error_code recv_ec{1, std::generic_category()}, send_ec{1, std::generic_category()};
    rxa::async_recv(p.d, p.b, rx::recv{in.span()}, [&](std::error_code ec, rx::work_completion wc) {
        recv_ec = ec;
        got_recv = wc;
    });
    rxa::async_post(p.d, p.a, rx::send_imm{out.span().first(200), 77}, [&](std::error_code ec, rx::work_completion wc) {
        send_ec = ec;
        got_send = wc;
    });
    CHECK(p.d.in_flight() == 2);
    run_bounded(p.io);
    REQUIRE(got_recv);
    REQUIRE(got_send);
    CHECK_FALSE(recv_ec);
    CHECK_FALSE(send_ec);
    CHECK(got_recv->is_recv());
    CHECK(got_recv->byte_len() == 200);
    CHECK(got_recv->imm_data() == 77);
    CHECK(got_send->opcode() == IBV_WC_SEND);
    CHECK(std::memcmp(in.bytes_.data(), out.bytes_.data(), 200) == 0);
    CHECK(p.d.in_flight() == 0);
    CHECK(p.d.stray() == 0);
}

TEST_CASE("asio: use_future and deferred complete RDMA WRITE, READ, atomics and a chain") {
    asio_pair<> p;
    test::buffer local(p.pd, 4096), remote(p.pd, 4096);
    test::fill_pattern(local.bytes_, 5);
    auto const target = remote.mr.remote();

    SUBCASE("use_future") {
        auto w = rxa::async_post(p.d, p.a, rx::write{local.span().first(512), target.first(512)}, ::asio::use_future);
        auto r =
            rxa::async_post(p.d, p.a, rx::read{local.span().subspan(1024, 512), target.first(512)}, ::asio::use_future);
        auto f = rxa::async_post(
            p.d, p.a,
            rx::fetch_add{local.mr.span<std::uint64_t>(256, 1), remote.mr.remote<std::uint64_t>().subspan(100, 1), 5},
            ::asio::use_future);
        std::jthread runner{[&] { p.io.run_for(20s); }};
        REQUIRE(w.wait_for(20s) == std::future_status::ready);
        REQUIRE(r.wait_for(20s) == std::future_status::ready);
        REQUIRE(f.wait_for(20s) == std::future_status::ready);
        runner.join();
        CHECK(w.get().opcode() == IBV_WC_RDMA_WRITE);
        CHECK(r.get().opcode() == IBV_WC_RDMA_READ);
        CHECK(f.get().opcode() == IBV_WC_FETCH_ADD);
        CHECK(std::memcmp(remote.bytes_.data(), local.bytes_.data(), 512) == 0);
        CHECK(std::memcmp(local.bytes_.data() + 1024, local.bytes_.data(), 512) == 0);
    }
    SUBCASE("deferred, and a chain that completes with its last request") {
        auto op = rxa::async_post(p.d, p.a,
                                  rxa::chain{rx::write{local.span().first(100), target.first(100)},
                                             rx::write{local.span().subspan(100, 100), target.subspan(100, 100)},
                                             rx::write_imm{local.span().subspan(200, 56), target.subspan(200, 56), 9}},
                                  ::asio::experimental::deferred);
        std::optional<rx::work_completion> sent, arrived;
        rxa::async_recv(p.d, p.b, rx::recv{remote.span().subspan(3000, 16)},
                        [&](std::error_code ec, rx::work_completion wc) {
                            CHECK_FALSE(ec);
                            arrived = wc;
                        });
        CHECK(p.d.in_flight() == 1); // deferred: nothing posted before it is launched
        std::move(op)([&](std::error_code ec, rx::work_completion wc) {
            CHECK_FALSE(ec);
            sent = wc;
        });
        run_bounded(p.io);
        REQUIRE(sent);
        REQUIRE(arrived);
        CHECK(sent->opcode() == IBV_WC_RDMA_WRITE);
        CHECK(arrived->imm_data() == 9);
        CHECK(std::memcmp(remote.bytes_.data(), local.bytes_.data(), 256) == 0);
        CHECK(p.d.stray() == 0); // the unsignaled requests of the chain left no completion
    }
}

TEST_CASE("asio: co_await send and receive, and 1000 operations in flight across 8 coroutines all matched") {
    asio_pair<> p{1024};
    constexpr std::uint32_t coroutines = 8, per = 125, bytes = 64;
    test::buffer out(p.pd, coroutines * per * bytes), in(p.pd, coroutines * per * bytes);
    for (std::uint32_t k = 0; k < coroutines * per; ++k)
        test::fill_pattern(std::span{out.bytes_}.subspan(k * bytes, bytes), k);

    std::vector<int> recv_done(coroutines * per, 0), send_done(coroutines * per, 0);
    std::vector<std::uint32_t> imm_of(coroutines * per, ~0U);
    std::size_t peak = 0;
    std::uint32_t posted_recvs = 0;
    std::exception_ptr failure;
    ::asio::steady_timer all_posted{p.io, std::chrono::steady_clock::time_point::max()};
    auto worker = [&](std::uint32_t c) -> ::asio::awaitable<void> {
        // This coroutine's 125 receives, each completing into its own slot.
        for (std::uint32_t i = 0; i < per; ++i) {
            std::uint32_t const slot = c * per + i;
            rxa::async_recv(p.d, p.b, rx::recv{in.span().subspan(slot * bytes, bytes)},
                            [&, slot](std::error_code ec, rx::work_completion wc) {
                                CHECK_FALSE(ec);
                                ++recv_done[slot];
                                imm_of[slot] = wc.imm_data();
                            });
        }
        if ((posted_recvs += per) == coroutines * per) {
            peak = p.d.in_flight();
            all_posted.cancel();
        } else {
            rxa::error_code ignored;
            co_await all_posted.async_wait(::asio::redirect_error(::asio::use_awaitable, ignored));
        }
        // Then its 125 messages, each co_awaited: eight senders interleave.
        for (std::uint32_t i = 0; i < per; ++i) {
            std::uint32_t const k = c * per + i;
            rx::work_completion wc = co_await rxa::async_post(
                p.d, p.a, rx::send_imm{out.span().subspan(k * bytes, bytes), k}, ::asio::use_awaitable);
            CHECK(wc.ok());
            ++send_done[k];
        }
    };
    for (std::uint32_t c = 0; c < coroutines; ++c)
        spawn(p.io, worker(c), failure);
    p.io.run_for(60s);
    MESSAGE("receives done " << std::count(recv_done.begin(), recv_done.end(), 1) << ", sends done "
                             << std::count(send_done.begin(), send_done.end(), 1) << ", in flight " << p.d.in_flight()
                             << ", peak " << peak);
    REQUIRE_MESSAGE(p.io.stopped(), "the io_context still had work after 60 s");
    if (failure) std::rethrow_exception(failure);
    CHECK(peak >= 1000);
    std::set<std::uint32_t> imms;
    for (std::uint32_t s = 0; s < coroutines * per; ++s) {
        CHECK(recv_done[s] == 1);
        CHECK(send_done[s] == 1);
        imms.insert(imm_of[s]);
        // The completion handed to this operation is the one of the message in its buffer.
        REQUIRE(imm_of[s] < coroutines * per);
        CHECK(std::memcmp(in.bytes_.data() + s * bytes, out.bytes_.data() + imm_of[s] * bytes, bytes) == 0);
    }
    CHECK(imms.size() == coroutines * per);
    CHECK(p.d.in_flight() == 0);
    CHECK(p.d.stray() == 0);
}

TEST_CASE("asio: async_wait hands out a batch of completions of a batch CQ") {
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_channel channel{ctx};
    rx::completion_queue<rx::event_driven> cq_a{ctx, 256, channel}, cq_b{ctx, 256, channel};
    rx::queue_pair<rx::rc, rx::event_driven> a{pd, cq_a, cq_a, {}}, b{pd, cq_b, cq_b, {}};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    ::asio::io_context io;
    rxa::completion_dispatcher d{io.get_executor(), channel};
    d.add(cq_a, rxa::cq_mode::batch);
    d.add(cq_b, rxa::cq_mode::batch);
    test::buffer buf(pd, 4096);
    std::array<rx::work_completion, 8> wcs;
    std::size_t taken = 0;
    std::exception_ptr failure;
    b.post_recv(rx::recv{buf.span().first(64)}.id(1), rx::recv{buf.span().subspan(64, 64)}.id(2));
    // Nothing there yet: the wait starts now (a callback is eager) and parks, armed, in a slot of
    // the pool, before anything is sent; only the channel's event can wake it.
    std::error_code first_ec{1, std::generic_category()};
    rxa::async_wait(d, cq_b, std::span{wcs}, [&](std::error_code ec, std::size_t n) {
        first_ec = ec;
        for (std::size_t i = 0; i < n; ++i)
            CHECK(wcs[i].wr_id() == 1 + i);
        taken = n;
    });
    REQUIRE(d.in_flight() == 1); // parked, not completed from what was there
    io.poll();
    io.restart();
    REQUIRE(taken == 0); // nothing has woken it yet
    a.post(rx::send{buf.span().subspan(1024, 32)}.id(10), rx::send{buf.span().subspan(1024, 32)}.id(11));
    run_bounded(io); // the wait's work keeps it running until the channel wakes the wait
    REQUIRE_FALSE(first_ec);
    REQUIRE(taken >= 1);
    spawn(
        io,
        [&]() -> ::asio::awaitable<void> {
            while (taken < 2) {
                std::size_t const n = co_await rxa::async_wait(d, cq_b, std::span{wcs}, ::asio::use_awaitable);
                for (std::size_t i = 0; i < n; ++i)
                    CHECK(wcs[i].wr_id() == 1 + taken + i);
                taken += n;
            }
            std::size_t sends = 0;
            while (sends < 2)
                sends += co_await rxa::async_wait(d, cq_a, std::span{wcs}.first(1), ::asio::use_awaitable);
        },
        failure);
    run_bounded(io);
    if (failure) std::rethrow_exception(failure);
    CHECK(taken == 2);
    CHECK_THROWS_AS((void)rxa::async_wait(d, cq_b, std::span<rx::work_completion>{}, ::asio::use_future),
                    rx::argument_error);
}

TEST_CASE("asio: a cancelled operation's handler runs only once its completion is reaped") {
    SUBCASE("cancel_mode::qp_to_error (the default): the QP goes to ERR, the receive completes aborted") {
        asio_pair<> p;
        test::buffer in(p.pd, 256);
        ::asio::cancellation_signal signal;
        std::error_code got, other;
        rx::work_completion got_wc{};
        int calls = 0, other_calls = 0;
        rxa::async_recv(p.d, p.b, rx::recv{in.span().first(128)},
                        ::asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rx::work_completion wc) {
                            got = ec;
                            got_wc = wc;
                            ++calls;
                        }));
        rxa::async_recv(p.d, p.b, rx::recv{in.span().subspan(128, 128)}, [&](std::error_code ec, rx::work_completion) {
            other = ec;
            ++other_calls;
        });
        signal.emit(::asio::cancellation_type::terminal);
        CHECK(calls == 0); // never at once: the receive is still the device's
        CHECK(p.d.cancelled() == 1);
        CHECK(p.b.state() == IBV_QPS_ERR);
        run_bounded(p.io);
        CHECK(calls == 1);
        CHECK(test::aborted(got));
        CHECK(got_wc.status() == IBV_WC_WR_FLUSH_ERR); // reaped: the flushed completion is its own
        CHECK(other_calls == 1);                       // the QP's other operation: flushed, its own code
        CHECK(other == rx::make_wc_error_code(IBV_WC_WR_FLUSH_ERR));
        CHECK(p.d.cancelled() == 0);
        CHECK(p.d.in_flight() == 0);
    }
    SUBCASE("cancel_mode::wait: the handler waits for the message, which it is given") {
        asio_pair<> p{128, rxa::cancel_mode::wait};
        test::buffer out(p.pd, 256), in(p.pd, 256);
        test::fill_pattern(out.bytes_, 11);
        ::asio::cancellation_signal signal;
        std::error_code got;
        rx::work_completion got_wc{};
        int calls = 0;
        rxa::async_recv(p.d, p.b, rx::recv{in.span().first(128)},
                        ::asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rx::work_completion wc) {
                            got = ec;
                            got_wc = wc;
                            ++calls;
                            // The handler runs once the device is done with the buffer: the message is there.
                            CHECK(std::memcmp(in.bytes_.data(), out.bytes_.data(), 128) == 0);
                        }));
        signal.emit(::asio::cancellation_type::terminal);
        p.io.run_for(50ms);
        p.io.restart();
        CHECK(calls == 0);
        CHECK(p.d.cancelled() == 1);
        CHECK(p.d.in_flight() == 1);
        CHECK(p.b.state() == IBV_QPS_RTS);
        bool sent = false;
        rxa::async_post(p.d, p.a, rx::send{out.span().first(128)}, [&](std::error_code ec, rx::work_completion) {
            CHECK_FALSE(ec);
            sent = true;
        });
        run_bounded(p.io);
        CHECK(sent);
        CHECK(calls == 1);
        CHECK_FALSE(got); // its own outcome: the message arrived, and is not lost
        CHECK(got_wc.byte_len() == 128);
        CHECK(p.d.cancelled() == 0);
        CHECK(p.d.in_flight() == 0);
    }
    SUBCASE("a coroutine cancelled while it awaits") {
        asio_pair<> p;
        test::buffer in(p.pd, 256);
        ::asio::cancellation_signal signal;
        std::exception_ptr ended;
        bool finished = false;
        ::asio::co_spawn(
            p.io,
            [&]() -> ::asio::awaitable<void> {
                (void)co_await rxa::async_recv(p.d, p.b, rx::recv{in.span().first(128)}, ::asio::use_awaitable);
            },
            ::asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e) {
                ended = e;
                finished = true;
            }));
        ::asio::post(p.io, [&] { signal.emit(::asio::cancellation_type::terminal); });
        run_bounded(p.io);
        REQUIRE(finished);
        REQUIRE(ended);
        try {
            std::rethrow_exception(ended);
        } catch (rx::error const& e) {
            CHECK(test::aborted(e.code()));
        }
        CHECK(p.d.cancelled() == 0);
        CHECK(p.d.in_flight() == 0);
    }
}

TEST_CASE("asio: a cancellation emitted after the dispatcher is destroyed is harmless") {
    // Run under ASan (tools/check's sanitizer build): before, the cancellation slot's handler
    // kept a raw pointer to the dispatcher and this read freed memory.
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    test::buffer buf(pd, 1024);
    rx::completion_channel channel{ctx};
    rx::completion_queue<rx::event_driven> cq{ctx, 64, channel};
    rx::queue_pair<rx::rc, rx::event_driven> a{pd, cq, cq, {}}, b{pd, cq, cq, {}};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    ::asio::io_context io;
    ::asio::cancellation_signal cancelled, pending;
    int calls = 0;
    {
        rxa::completion_dispatcher d{io.get_executor(), channel, {.cancel = rxa::cancel_mode::wait}};
        d.add(cq);
        auto count = [&](std::error_code, rx::work_completion) { ++calls; };
        rxa::async_recv(d, b, rx::recv{buf.span().first(64)}, ::asio::bind_cancellation_slot(cancelled.slot(), count));
        cancelled.emit(::asio::cancellation_type::terminal); // waits for its message: its canceller stays in the signal
        rxa::async_recv(d, b, rx::recv{buf.span().subspan(64, 64)},
                        ::asio::bind_cancellation_slot(pending.slot(), count)); // destroyed with the dispatcher
        io.poll();                                                              // the receives keep the io_context busy
        io.restart();
        REQUIRE(calls == 0);
        CHECK(d.cancelled() == 1);
        CHECK(cancelled.slot().has_handler());
    }
    cancelled.emit(::asio::cancellation_type::terminal);
    cancelled.emit(::asio::cancellation_type::all);
    pending.emit(::asio::cancellation_type::terminal);
    run_bounded(io);
    CHECK(calls == 0); // destroyed with the dispatcher, uncalled
}

TEST_CASE("asio: forget(qp) aborts a QP's operations at once; its flushed completions reach no other operation") {
    asio_pair<> p{128, rxa::cancel_mode::wait};
    test::buffer in(p.pd, 2048);
    int b_aborted = 0, a_calls = 0;
    std::error_code a_ec;
    for (std::size_t i = 0; i < 4; ++i)
        rxa::async_recv(p.d, p.b, rx::recv{in.span().subspan(i * 128, 128)},
                        [&](std::error_code ec, rx::work_completion) {
                            CHECK(test::aborted(ec));
                            ++b_aborted;
                        });
    ::asio::cancellation_signal signal;
    rxa::async_recv(p.d, p.b, rx::recv{in.span().subspan(512, 128)},
                    ::asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rx::work_completion) {
                        CHECK(test::aborted(ec));
                        ++b_aborted;
                    }));
    signal.emit(::asio::cancellation_type::terminal);
    auto on_a = [&](std::error_code ec, rx::work_completion) {
        a_ec = ec;
        ++a_calls;
    };
    rxa::async_recv(p.d, p.a, rx::recv{in.span().subspan(1024, 128)}, on_a); // another QP's: kept
    CHECK(p.d.in_flight() == 6);
    CHECK(p.d.cancelled() == 1);
    CHECK(p.d.forget(p.b) == 5);
    CHECK(p.d.in_flight() == 1);
    CHECK(p.d.cancelled() == 0);
    p.io.poll();
    p.io.restart();
    CHECK(b_aborted == 5); // at once, without any completion
    CHECK(a_calls == 0);
    // The forgotten slots are taken again (the pool is LIFO) by receives on a, under new
    // generations; b goes to ERR and its five receives are flushed: their completions name the
    // old generations, so they are strays, not a's completions.
    for (std::size_t i = 0; i < 5; ++i)
        rxa::async_recv(p.d, p.a, rx::recv{in.span().subspan(1152 + i * 128, 128)}, on_a);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    REQUIRE(::ibv_modify_qp(p.b.native_handle(), &attr, IBV_QP_STATE) == 0);
    auto const deadline = std::chrono::steady_clock::now() + 10s;
    while (p.d.stray() < 5 && std::chrono::steady_clock::now() < deadline)
        p.io.run_one_for(100ms);
    p.io.restart();
    CHECK(p.d.stray() == 5);
    CHECK(a_calls == 0);
    CHECK(p.d.in_flight() == 6);
    // Forgetting a lets io_context::run return: nothing stays pending.
    CHECK(p.d.forget(p.a) == 6);
    run_bounded(p.io);
    CHECK(a_calls == 6);
    CHECK(test::aborted(a_ec));
    CHECK(p.d.in_flight() == 0);
    CHECK(p.d.forget(p.a) == 0);
}

TEST_CASE("asio: remove(cq) refuses a routed CQ with operations on it and aborts a batch CQ's wait") {
    asio_pair<> p;
    test::buffer in(p.pd, 1024), out(p.pd, 256);
    int calls = 0;
    std::error_code got;
    rxa::async_recv(p.d, p.b, rx::recv{in.span().first(64)}, [&](std::error_code ec, rx::work_completion) {
        got = ec;
        ++calls;
    });
    CHECK_THROWS_AS(p.d.remove(p.cq_b), rx::argument_error); // b's receive completes on it
    CHECK(p.d.in_flight() == 1);
    p.d.remove(p.cq_a);                                      // nothing of it pending
    CHECK_THROWS_AS(p.d.remove(p.cq_a), rx::argument_error); // not added any more
    CHECK(p.d.forget(p.b) == 1);
    p.d.remove(p.cq_b);
    run_bounded(p.io);
    CHECK(calls == 1);
    CHECK(test::aborted(got));

    // A batch CQ's parked wait is aborted at once.
    p.d.add(p.cq_a, rxa::cq_mode::batch);
    std::array<rx::work_completion, 4> wcs;
    std::error_code wait_ec;
    int waits = 0;
    rxa::async_wait(p.d, p.cq_a, std::span{wcs}, [&](std::error_code ec, std::size_t) {
        wait_ec = ec;
        ++waits;
    });
    CHECK(p.d.in_flight() == 1);
    p.d.remove(p.cq_a);
    CHECK(p.d.in_flight() == 0);
    run_bounded(p.io);
    CHECK(waits == 1);
    CHECK(test::aborted(wait_ec));
    CHECK_THROWS_AS((void)rxa::async_wait(p.d, p.cq_a, std::span{wcs}, ::asio::use_future), rx::argument_error);

    // Both added again, routed: a message from b to a goes through (b's forgotten receive is
    // still posted on b, so this one goes the other way).
    p.d.add(p.cq_a);
    p.d.add(p.cq_b);
    std::error_code recv_ec{1, std::generic_category()}, send_ec{1, std::generic_category()};
    rxa::async_recv(p.d, p.a, rx::recv{in.span().subspan(512, 64)},
                    [&](std::error_code ec, rx::work_completion) { recv_ec = ec; });
    rxa::async_post(p.d, p.b, rx::send{out.span().first(48)},
                    [&](std::error_code ec, rx::work_completion) { send_ec = ec; });
    run_bounded(p.io);
    CHECK_FALSE(recv_ec);
    CHECK_FALSE(send_ec);
    CHECK(p.d.in_flight() == 0);
}

TEST_CASE("asio: a duplicated descriptor is closed when Asio refuses it") {
    auto open_fds = [] {
        std::size_t n = 0;
        for (auto const& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
            (void)entry;
            ++n;
        }
        return n;
    };
    std::array<int, 2> fds{};
    REQUIRE(::pipe(fds.data()) == 0);
    {
        ::asio::io_context io;
        ::asio::posix::stream_descriptor descriptor{io};
        rxa::detail::assign_duplicate(descriptor, fds[0], "a test pipe");
        CHECK(descriptor.is_open());
        std::size_t const before = open_fds();
        // Open already: assign throws, and the duplicate made for it is closed.
        CHECK_THROWS_AS(rxa::detail::assign_duplicate(descriptor, fds[1], "a test pipe"), std::system_error);
        CHECK(open_fds() == before);
        CHECK(descriptor.is_open());
    }
    ::close(fds[0]);
    ::close(fds[1]);
}

TEST_CASE("asio: a cancelled operation's memory is out of flight for a checked QP when its handler runs") {
    SUBCASE("cancel_mode::qp_to_error") {
        asio_pair<rx::checked<rx::event_driven>> p;
        test::buffer in(p.pd, 256);
        ::asio::cancellation_signal signal;
        int calls = 0;
        rxa::async_recv(p.d, p.b, rx::recv{in.span()},
                        ::asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rx::work_completion) {
                            CHECK(test::aborted(ec));
                            CHECK(in.mr.in_flight() == 0);
                            ++calls;
                        }));
        signal.emit(::asio::cancellation_type::terminal);
        run_bounded(p.io);
        REQUIRE(calls == 1);
        CHECK_NOTHROW(in.mr.deregister());
    }
    SUBCASE("cancel_mode::wait") {
        asio_pair<rx::checked<rx::event_driven>> p{128, rxa::cancel_mode::wait};
        test::buffer out(p.pd, 256), in(p.pd, 256);
        ::asio::cancellation_signal signal;
        int calls = 0;
        rxa::async_recv(p.d, p.b, rx::recv{in.span()},
                        ::asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rx::work_completion) {
                            CHECK_FALSE(ec);
                            CHECK(in.mr.in_flight() == 0);
                            ++calls;
                        }));
        signal.emit(::asio::cancellation_type::terminal);
        p.io.run_for(20ms);
        p.io.restart();
        CHECK(calls == 0);
        CHECK(in.mr.in_flight() == 1);
        CHECK_THROWS_AS(in.mr.deregister(), rx::in_flight_error);
        rxa::async_post(p.d, p.a, rx::send{out.span().first(64)},
                        [](std::error_code ec, rx::work_completion) { CHECK_FALSE(ec); });
        run_bounded(p.io);
        CHECK(calls == 1);
        CHECK(in.mr.in_flight() == 0);
    }
}

TEST_CASE("asio: a bad rkey fails the operation as an error code and, awaited, as wc_error") {
    asio_pair<> p;
    test::buffer local(p.pd, 256), remote(p.pd, 256);
    rx::remote_span<std::byte> const bad{remote.mr.remote().address(), 64, remote.mr.rkey() ^ 0x5a5a00U};

    SUBCASE("error_code") {
        std::error_code got;
        rx::work_completion seen{};
        rxa::async_post(p.d, p.a, rx::write{local.span().first(64), bad},
                        [&](std::error_code ec, rx::work_completion wc) {
                            got = ec;
                            seen = wc;
                        });
        run_bounded(p.io);
        CHECK(got.category() == rx::wc_category());
        CHECK(got == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
        CHECK(seen.status() == IBV_WC_REM_ACCESS_ERR);
    }
    SUBCASE("exception") {
        std::exception_ptr failure;
        bool caught = false;
        spawn(
            p.io,
            [&]() -> ::asio::awaitable<void> {
                try {
                    (void)co_await rxa::async_post(p.d, p.a, rx::read{local.span().first(64), bad},
                                                   ::asio::use_awaitable);
                } catch (rx::wc_error const& e) {
                    caught = true;
                    CHECK(e.status() == IBV_WC_REM_ACCESS_ERR);
                    CHECK(e.code() == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
                }
            },
            failure);
        run_bounded(p.io);
        if (failure) std::rethrow_exception(failure);
        CHECK(caught);
    }
}

TEST_CASE("asio: bad input is refused before it reaches the device, and nothing is left in flight") {
    asio_pair<> p;
    test::buffer local(p.pd, 4096);
    std::error_code got;
    // Inline data over max_inline_data: argument_error's code, nothing posted.
    auto const too_long = local.span().first(p.a.capabilities().max_inline_data + 1);
    rxa::async_post(p.d, p.a, rx::send{too_long}.inlined(), [&](std::error_code ec, rx::work_completion) { got = ec; });
    run_bounded(p.io);
    CHECK(got == std::errc::invalid_argument);
    CHECK(p.d.in_flight() == 0);
    std::exception_ptr failure;
    bool caught = false;
    spawn(
        p.io,
        [&]() -> ::asio::awaitable<void> {
            try {
                (void)co_await rxa::async_post(p.d, p.a, rx::send{too_long}.inlined(), ::asio::use_awaitable);
            } catch (rx::argument_error const&) {
                caught = true;
            }
        },
        failure);
    run_bounded(p.io);
    CHECK(caught);
}

TEST_CASE("asio: device async events arrive through async_wait") {
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_queue<rx::busy_poll> cq_a{ctx, 64}, cq_b{ctx, 1};
    rx::queue_pair<rx::rc, rx::busy_poll> a{pd, cq_a, cq_a, {}}, b{pd, cq_b, cq_b, {}};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    ::asio::io_context io;
    // The device's stream, owned by the io_context (the same one for every lookup).
    rxa::async_event_stream& events = rxa::async_events_for(io.get_executor(), ctx);
    CHECK(&events == &rxa::async_events_for(io.get_executor(), ctx));
    std::optional<rx::async_event> got;
    std::error_code got_ec;
    ::asio::steady_timer bound{io, 10s};
    rxa::async_wait(events, [&](std::error_code ec, std::optional<rx::async_event> e) {
        got_ec = ec;
        got = std::move(e);
        bound.cancel();
    });
    bound.async_wait([&](std::error_code ec) {
        if (!ec) events.descriptor().cancel();
    });
    // Overflow cq_b (one entry): a CQ error event.
    test::buffer buf(pd, 4096);
    for (int i = 0; i < 8; ++i)
        b.post_recv(rx::recv{buf.span().subspan(static_cast<std::size_t>(i) * 64, 64)});
    for (int i = 0; i < 8; ++i)
        a.post(rx::send{buf.span().subspan(2048, 16)}.unsignaled());
    run_bounded(io);
    CHECK_FALSE(got_ec);
    REQUIRE(got);
    CHECK(got->type() == IBV_EVENT_CQ_ERR);
    CHECK(got->cq() == cq_b.native_handle());
    got.reset();
    // Let the rest of the events go before the CQ does.
    rx::async_event_queue q{ctx};
    std::deque<rx::async_event> rest;
    (void)q.drain(rest, 1s);
}

TEST_CASE("asio: the private data is copied when a connect or accept starts; the caller's buffer may change at once") {
    // Before: the options held a span, and the coroutine read it two awaits later.
    ::asio::io_context io;
    rxa::cm_engine eng{io.get_executor()};
    rxa::cm_acceptor<rx::rc> acceptor{eng, test::device_address(0)};
    auto const to = rx::cm::address::resolve(test::device_ip(), acceptor.port());
    using conn = rx::cm::connection<rx::rc, rx::event_driven>;
    std::vector<std::byte> const hello(40, std::byte{0x5a}), welcome(100, std::byte{0xa5});
    rx::cm::connection_options sopt, copt;
    sopt.private_data = welcome;
    copt.private_data = hello;
    std::optional<conn> server, client;
    rxa::async_accept<rx::event_driven>(acceptor, sopt, {}, {}, [&](std::error_code e, std::optional<conn> c) {
        CHECK_FALSE(e);
        if (c) server.emplace(std::move(*c));
    });
    auto f = rxa::async_connect<rx::rc, rx::event_driven>(eng, to, copt, {}, ::asio::use_future);
    // Both operations have started; nothing has run yet. Overwrite the callers' buffers.
    std::fill(sopt.private_data.begin(), sopt.private_data.end(), std::byte{0});
    std::fill(copt.private_data.begin(), copt.private_data.end(), std::byte{0});
    std::jthread runner{[&] {
        for (auto const end = std::chrono::steady_clock::now() + 30s;
             !(server && f.wait_for(0s) == std::future_status::ready) && std::chrono::steady_clock::now() < end;)
            io.run_for(50ms);
    }};
    runner.join();
    REQUIRE(f.wait_for(0s) == std::future_status::ready);
    if (auto c = f.get()) client.emplace(std::move(*c));
    REQUIRE(server);
    REQUIRE(client);
    auto const got_by_server = server->peer_private_data(), got_by_client = client->peer_private_data();
    REQUIRE(got_by_server.size() >= hello.size());
    REQUIRE(got_by_client.size() >= welcome.size());
    CHECK(std::equal(hello.begin(), hello.end(), got_by_server.begin()));
    CHECK(std::equal(welcome.begin(), welcome.end(), got_by_client.begin()));
    client->disconnect();
    for (auto const end = std::chrono::steady_clock::now() + 10s;
         server->state() == rx::cm::connection_state::established && std::chrono::steady_clock::now() < end;)
        io.run_for(50ms);
    CHECK(server->state() == rx::cm::connection_state::disconnected);
}

TEST_CASE("asio: CM connect and accept with every token; a peer's disconnect fails every pending receive") {
    ::asio::io_context io;
    auto const ex = io.get_executor();
    rxa::cm_engine eng{ex};
    rxa::cm_acceptor<rx::rc> acceptor{eng, test::device_address(0)};
    auto const to = rx::cm::address::resolve(test::device_ip(), acceptor.port());
    rx::cm::connection_options opt;
    opt.deadlines.event = 10s;
    using conn = rx::cm::connection<rx::rc, rx::event_driven>;
    // Runs the context until `done()`, at most `bound`.
    auto run_until = [&io](auto done, std::chrono::seconds bound) {
        for (auto const end = std::chrono::steady_clock::now() + bound;
             !done() && std::chrono::steady_clock::now() < end;) {
            if (io.stopped()) io.restart();
            io.run_for(20ms);
        }
    };

    SUBCASE("callback accept, future connect; the client disconnects") {
        std::optional<conn> server, client;
        rxa::async_accept<rx::event_driven>(acceptor, opt, {}, {}, [&](std::error_code e, std::optional<conn> c) {
            CHECK_FALSE(e);
            if (c) server.emplace(std::move(*c));
        });
        auto f = rxa::async_connect<rx::rc, rx::event_driven>(eng, to, opt, {}, ::asio::use_future);
        run_until([&] { return server && f.wait_for(0s) == std::future_status::ready; }, 30s);
        REQUIRE(f.wait_for(0s) == std::future_status::ready);
        if (auto c = f.get()) client.emplace(std::move(*c));
        REQUIRE(server);
        REQUIRE(client);
        CHECK(client->state() == rx::cm::connection_state::established);

        // Four receives pending on the server; the client disconnects: every one fails, flushed.
        rxa::completion_dispatcher d{ex, *server->cq_channel()};
        d.add(server->cq());
        test::buffer buf(server->pd(), 4096);
        std::vector<std::error_code> codes;
        for (std::size_t i = 0; i < 4; ++i)
            rxa::async_recv(d, server->qp(), rx::recv{buf.span().subspan(i * 64, 64)},
                            [&](std::error_code ec, rx::work_completion) { codes.push_back(ec); });
        auto const start = std::chrono::steady_clock::now();
        client->disconnect(); // on the engine: does not wait
        CHECK(client->state() == rx::cm::connection_state::disconnected);
        run_until([&] { return codes.size() == 4; }, 20s);
        REQUIRE(codes.size() == 4);
        for (auto const& ec : codes)
            CHECK(ec == rx::make_wc_error_code(IBV_WC_WR_FLUSH_ERR));
        // Bound: the disconnect deadline (the engine moves the server's QP to ERR on the DREQ).
        CHECK(std::chrono::steady_clock::now() - start < opt.deadlines.of(rx::cm::step::disconnect));
        CHECK(server->state() == rx::cm::connection_state::disconnected);
        d.forget(server->qp());
        d.remove(server->cq());
    }
    SUBCASE("awaitable connect and accept on shared resources, deferred connect") {
        rx::protection_domain pd{acceptor.listener().cm_id().context()};
        rx::completion_channel channel{acceptor.listener().cm_id().context()};
        rx::completion_queue<rx::event_driven> cq{acceptor.listener().cm_id().context(), 256, channel};
        rx::cm::resources<rx::event_driven> const shared{.pd = pd, .send_cq = cq, .recv_cq = cq, .channel = &channel};
        std::exception_ptr failure;
        std::optional<conn> server, client;
        test::buffer sbuf(pd, 256);
        spawn(
            io,
            [&]() -> ::asio::awaitable<void> {
                auto c = co_await rxa::async_accept<rx::event_driven>(
                    acceptor, opt, rx::cm::shared_qp<rx::rc>(shared),
                    [&](conn& n) { n.qp().post_recv(rx::recv{sbuf.span()}.id(7)); }, ::asio::use_awaitable);
                server.emplace(std::move(*c));
            },
            failure);
        auto op = rxa::async_connect<rx::rc, rx::event_driven>(eng, to, opt, {}, ::asio::experimental::deferred);
        std::move(op)([&](std::error_code e, std::optional<conn> c) {
            if (e && !failure) failure = std::make_exception_ptr(std::system_error(e));
            if (c) client.emplace(std::move(*c));
        });
        run_until([&] { return (server && client) || failure; }, 30s);
        if (failure) std::rethrow_exception(failure);
        REQUIRE(server);
        REQUIRE(client);
        // A message over the pair: the receive posted before the accept, the send co_awaited.
        rxa::completion_dispatcher dc{ex, *client->cq_channel()};
        dc.add(client->cq());
        test::buffer cbuf(client->pd(), 256);
        test::fill_pattern(cbuf.bytes_, 21);
        bool sent = false;
        spawn(
            io,
            [&]() -> ::asio::awaitable<void> {
                (void)co_await rxa::async_post(dc, client->qp(), rx::send{cbuf.span().first(100)},
                                               ::asio::use_awaitable);
                sent = true;
            },
            failure);
        run_until([&] { return sent || failure; }, 20s);
        CHECK(sent);
        if (failure) std::rethrow_exception(failure);
        auto const wc = cq.wait_one(10s);
        REQUIRE(wc.has_value());
        CHECK(wc->ok());
        CHECK(wc->byte_len() == 100);
        CHECK(std::memcmp(sbuf.bytes_.data(), cbuf.bytes_.data(), 100) == 0);
        client->disconnect();
        CHECK(client->state() == rx::cm::connection_state::disconnected);
        dc.forget(client->qp());
        dc.remove(client->cq());
    }
    SUBCASE("connecting to a port nobody listens on: the same failure as a code and as the library's error") {
        auto const nobody =
            rx::cm::address::resolve(test::device_ip(), static_cast<std::uint16_t>(acceptor.port() + 1));
        std::error_code code;
        std::exception_ptr got;
        int done = 0;
        rxa::async_connect<rx::rc, rx::event_driven>(eng, nobody, opt, {},
                                                     [&](std::error_code e, std::optional<conn> c) {
                                                         code = e;
                                                         CHECK_FALSE(c);
                                                         ++done;
                                                     });
        rxa::async_connect<rx::rc, rx::event_driven>(
            eng, nobody, opt, {}, rxa::as_exception([&](std::exception_ptr e, std::optional<conn> c) {
                got = e;
                CHECK_FALSE(c);
                ++done;
            }));
        run_until([&] { return done == 2; }, 20s);
        REQUIRE(done == 2);
        REQUIRE(code);
        REQUIRE(got);
        try {
            std::rethrow_exception(got);
        } catch (rx::cm::cm_error const& e) {
            MESSAGE("code " << std::string{code.category().name()} << ":" << code.value() << " (" << code.message()
                            << "); exception: " << std::string{e.what()});
            CHECK(e.code() == code);
        }
    }
}

// The dispatcher's post pool (no device needed): a handler posted to its owner's executor, held
// directly or in an any_io_executor, takes a block until it runs; one posted to another
// io_context (run by another thread, say) never touches the pool; a moved-from pool allocator
// still equals its copy and still frees into the pool.
TEST_CASE("asio: the post pool serves its own io_context only, and its allocator survives a move") {
    ::asio::io_context own{1}, other{1};
    auto pool = std::make_shared<rxa::detail::post_pool>(4, &own);
    int ran_own = 0, ran_other = 0;
    rxa::detail::post_from(pool, own.get_executor(), [&] { ++ran_own; });
    rxa::detail::post_from(pool, ::asio::any_io_executor{own.get_executor()}, [&] { ++ran_own; });
    CHECK(pool->available() == 2); // both queued operations hold a block
    rxa::detail::post_from(pool, other.get_executor(), [&] { ++ran_other; });
    rxa::detail::post_from(pool, ::asio::any_io_executor{other.get_executor()}, [&] { ++ran_other; });
    CHECK(pool->available() == 2); // another context's handlers are posted as Asio does
    CHECK(own.run_for(std::chrono::seconds{5}) == 2);
    CHECK(other.run_for(std::chrono::seconds{5}) == 2);
    CHECK(ran_own == 2);
    CHECK(ran_other == 2);
    CHECK(pool->available() == 4); // every block back

    rxa::detail::pool_allocator<int> a{pool};
    rxa::detail::pool_allocator<int> b{std::move(a)};
    CHECK(a == b); // NOLINT(bugprone-use-after-move): a moved-from allocator must still equal its copy
    int* p = a.allocate(4);
    CHECK(pool->available() == 3);
    b.deallocate(p, 4);
    CHECK(pool->available() == 4);
    int* big = a.allocate(rxa::detail::post_pool::block_bytes); // over a block: the heap
    CHECK(pool->available() == 4);
    a.deallocate(big, rxa::detail::post_pool::block_bytes);
    CHECK(pool->available() == 4);
}

namespace asio_ownership {
// Moves `*p` into a new heap object and frees the old one (docs/ownership.md).
template <class T>
void relocate(std::unique_ptr<T>& p) {
    p = std::make_unique<T>(std::move(*p));
}
// Move-assigns `*p` into `live`, a live object of its kind, which then takes its place.
template <class T>
void assign_into(std::unique_ptr<T>& p, std::unique_ptr<T> live) {
    *live = std::move(*p);
    p = std::move(live);
}
} // namespace asio_ownership

TEST_CASE("asio: the dispatcher, its channel, its CQs and QPs move and are move-assigned, also with an operation "
          "pending, and everything still completes") {
    using asio_ownership::assign_into;
    using asio_ownership::relocate;
    using cq_t = rx::completion_queue<rx::event_driven>;
    using qp_t = rx::queue_pair<rx::rc, rx::event_driven>;
    auto ctx = std::make_unique<rx::context>(test::open_test_device());
    rx::end_port const port{*ctx};
    auto pd = std::make_unique<rx::protection_domain>(*ctx);
    auto channel = std::make_unique<rx::completion_channel>(*ctx);
    auto cq_a = std::make_unique<cq_t>(*ctx, 256, *channel), cq_b = std::make_unique<cq_t>(*ctx, 256, *channel);
    auto a = std::make_unique<qp_t>(*pd, *cq_a, *cq_a), b = std::make_unique<qp_t>(*pd, *cq_b, *cq_b);
    a->connect(port, b->local_endpoint(port));
    b->connect(port, a->local_endpoint(port));
    ::asio::io_context io;
    auto d = std::make_unique<rxa::completion_dispatcher>(io.get_executor(), *channel);
    d->add(*cq_a);
    d->add(*cq_b);
    test::buffer out(*pd, 256), in(*pd, 256);

    // A receive is pending while everything moves; the send goes out through the moved objects.
    auto round = [&](std::string const& when, auto&& move_everything) {
        CAPTURE(when);
        test::fill_pattern(out.bytes_, 21);
        std::optional<rx::work_completion> got_recv, got_send;
        rxa::async_recv(*d, *b, rx::recv{in.span()}.id(1), [&](std::error_code ec, rx::work_completion wc) {
            CHECK_FALSE(ec);
            got_recv = wc;
        });
        io.poll(); // the dispatcher starts waiting on its descriptor
        io.restart();
        CHECK(d->in_flight() == 1);
        move_everything();
        CHECK(d->in_flight() == 1);
        rxa::async_post(*d, *a, rx::send{out.span().first(100)}.id(2), [&](std::error_code ec, rx::work_completion wc) {
            CHECK_FALSE(ec);
            got_send = wc;
        });
        run_bounded(io);
        REQUIRE(got_recv);
        REQUIRE(got_send);
        CHECK(got_recv->byte_len() == 100);
        CHECK(std::memcmp(in.bytes_.data(), out.bytes_.data(), 100) == 0);
        CHECK(d->in_flight() == 0);
        CHECK(d->stray() == 0);
    };
    round("as made", [] {});
    round("after every object moved to a new address", [&] {
        relocate(ctx);
        relocate(pd);
        relocate(channel);
        relocate(cq_a);
        relocate(cq_b);
        relocate(a);
        relocate(b);
        relocate(d);
    });
    round("after every object was move-assigned into a live one", [&] {
        rx::completion_channel spare_channel{*ctx};
        assign_into(d, std::make_unique<rxa::completion_dispatcher>(io.get_executor(), spare_channel));
        assign_into(ctx, std::make_unique<rx::context>(test::open_test_device()));
        assign_into(pd, std::make_unique<rx::protection_domain>(*ctx));
        assign_into(channel, std::make_unique<rx::completion_channel>(*ctx));
        assign_into(cq_a, std::make_unique<cq_t>(*ctx, 16, *channel));
        assign_into(cq_b, std::make_unique<cq_t>(*ctx, 16, *channel));
        assign_into(a, std::make_unique<qp_t>(*pd, *cq_a, *cq_a));
        assign_into(b, std::make_unique<qp_t>(*pd, *cq_b, *cq_b));
    });
    d->forget(*a);
    d->forget(*b);
    d->remove(*cq_a);
    d->remove(*cq_b);
}

TEST_CASE("asio: 16 clients and their server on one cm_engine and one io_context thread: no thread per connection, "
          "every message verified, every departure seen, and run() returns") {
    constexpr int n = 16;
    using conn = rx::cm::connection<rx::rc, rx::busy_poll>;
    ::asio::io_context io;
    std::size_t const threads0 = test::proc_entries("/proc/self/task");
    std::vector<conn> served, clients;
    std::vector<std::unique_ptr<test::buffer>> inbox; // one receive per served connection, in accept order
    int ended = 0;
    {
        rxa::cm_engine eng{io.get_executor()};
        rxa::cm_acceptor<rx::rc> acceptor{eng, test::device_address(0)};
        auto const to = rx::cm::address::resolve(test::device_ip(), acceptor.port());
        rx::protection_domain pd{acceptor.listener().cm_id().context()};
        rx::completion_queue<rx::busy_poll> cq{acceptor.listener().cm_id().context(), 4 * n};
        rx::cm::resources<rx::busy_poll> const shared{.pd = pd, .send_cq = cq, .recv_cq = cq};
        for (int i = 0; i < n; ++i) {
            rxa::async_accept<rx::busy_poll>(
                acceptor, {}, rx::cm::shared_qp<rx::rc>(shared),
                [&](conn& c) { // before the accept is sent: the client may send at once
                    inbox.push_back(std::make_unique<test::buffer>(c.pd(), 64));
                    c.qp().post_recv(rx::recv{inbox.back()->span()}.id(inbox.size() - 1));
                },
                [&](std::error_code e, std::optional<conn> c) {
                    REQUIRE_FALSE(e);
                    c->on_end([&](rx::cm::connection_state) { ++ended; });
                    served.push_back(std::move(*c));
                });
            rxa::async_connect<rx::rc, rx::busy_poll>(eng, to, {}, {}, [&](std::error_code e, std::optional<conn> c) {
                REQUIRE_FALSE(e);
                clients.push_back(std::move(*c));
            });
        }
        for (auto const end = std::chrono::steady_clock::now() + 60s;
             (served.size() < n || clients.size() < n) && std::chrono::steady_clock::now() < end;)
            io.run_for(100ms);
        REQUIRE(served.size() == n);
        REQUIRE(clients.size() == n);
        CHECK(test::proc_entries("/proc/self/task") ==
              threads0); // the reactor reads the CM channel: no monitor threads
        CHECK(eng.engine().registered() == 1 + 2 * n);

        // Each client sends its number once; the server side receives them all, byte for byte.
        std::vector<std::unique_ptr<test::buffer>> out;
        for (int i = 0; i < n; ++i) {
            auto& c = clients[static_cast<std::size_t>(i)];
            out.push_back(std::make_unique<test::buffer>(c.pd(), 64));
            std::string const msg = "client " + std::to_string(i);
            std::memcpy(out.back()->bytes_.data(), msg.data(), msg.size());
            c.qp().post(rx::send{out.back()->span().first(msg.size())}.id(1));
            auto const wc = c.cq().wait_one(20s);
            REQUIRE(wc.has_value());
            CHECK(wc->ok());
        }
        std::set<std::string> got;
        for (int i = 0; i < n; ++i) {
            auto const wc = cq.wait_one(20s);
            REQUIRE(wc.has_value());
            REQUIRE(wc->ok());
            got.emplace(reinterpret_cast<char const*>(inbox[wc->wr_id()]->bytes_.data()), wc->byte_len());
        }
        for (int i = 0; i < n; ++i)
            CHECK(got.count("client " + std::to_string(i)) == 1);

        // The clients leave: the reactor sees every server side's `disconnected`.
        for (auto& c : clients)
            c.disconnect(0ms);
        for (auto const end = std::chrono::steady_clock::now() + 30s;
             ended < n && std::chrono::steady_clock::now() < end;)
            io.run_for(100ms);
        CHECK(ended == n);
        for (auto& s : served)
            CHECK(s.qp().state() == IBV_QPS_ERR);
        served.clear();
        clients.clear();
    }
    // Nothing is left on the engine: run() returns by itself.
    io.restart();
    auto const t0 = std::chrono::steady_clock::now();
    io.run_for(5s);
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    CHECK(test::proc_entries("/proc/self/task") == threads0);
}

TEST_CASE("asio: on a cm_engine, bad input, a connect deadline and an acceptor gone complete the handler with their "
          "typed error") {
    ::asio::io_context io;
    rxa::cm_engine eng{io.get_executor()};
    using conn = rx::cm::connection<rx::rc, rx::busy_poll>;
    SUBCASE("private data over the limit: argument_error, posted, nothing sent") {
        rx::cm::connection_options opt;
        opt.private_data.assign(57, std::byte{1});
        std::exception_ptr error;
        std::error_code code;
        int called = 0;
        rxa::async_connect<rx::rc, rx::busy_poll>(eng, test::device_address(7471), opt, {},
                                                  rxa::as_exception([&](std::exception_ptr e, std::optional<conn> c) {
                                                      ++called;
                                                      error = e;
                                                      CHECK_FALSE(c.has_value());
                                                  }));
        rxa::async_connect<rx::rc, rx::busy_poll>(eng, test::device_address(7471), opt, {},
                                                  [&](std::error_code e, std::optional<conn> c) {
                                                      ++called;
                                                      code = e;
                                                      CHECK_FALSE(c.has_value());
                                                  });
        CHECK(called == 0); // never inline
        io.run_for(1s);
        REQUIRE(called == 2);
        CHECK_THROWS_AS(std::rethrow_exception(error), rx::argument_error);
        CHECK(code == std::errc::invalid_argument);
        CHECK(eng.engine().pending() == 0);
    }
    SUBCASE("an accept still waiting when its acceptor is destroyed completes with operation_aborted") {
        std::error_code error;
        bool called = false;
        {
            rxa::cm_acceptor<rx::rc> acceptor{eng, test::device_address(0)};
            rxa::async_accept<rx::busy_poll>(acceptor, {}, {}, {}, [&](std::error_code e, std::optional<conn> c) {
                called = true;
                error = e;
                CHECK_FALSE(c.has_value());
            });
            io.run_for(200ms);
            CHECK_FALSE(called); // no client: it waits
        }
        io.run_for(1s);
        REQUIRE(called);
        CHECK(test::aborted(error));
    }
    SUBCASE("nobody answers the connect request: timeout_error naming the step, within its bound") {
        rx::cm::connection_options opt;
        opt.deadlines.connect = 1500ms;
        std::exception_ptr error;
        bool called = false;
        auto const t0 = std::chrono::steady_clock::now();
        rxa::async_connect<rx::rc, rx::busy_poll>(eng, rx::cm::address::resolve("198.18.0.77", 7471), opt, {},
                                                  rxa::as_exception([&](std::exception_ptr e, std::optional<conn>) {
                                                      called = true;
                                                      error = e;
                                                  }));
        for (auto const end = t0 + 20s; !called && std::chrono::steady_clock::now() < end;)
            io.run_for(100ms);
        double const took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        REQUIRE(called);
        try {
            std::rethrow_exception(error);
        } catch (rx::cm::timeout_error const& e) {
            MESSAGE("after " << took << " s: " << std::string{e.what()});
            CHECK((e.step() == rx::cm::step::connect || e.step() == rx::cm::step::resolve_address));
        }
        CHECK(took < 6.5);
    }
}
