// Bounded waits on a real device: a CQ's wait(out, timeout) and wait_one(timeout) for every
// completion strategy (plain and checked), a completion channel's get_event(timeout), and the
// async event queue's wait(timeout) with any std::chrono duration. A timeout is an empty result,
// never an exception, and comes within the timeout plus scheduling slack.
#include "fixture.hpp"
#include "rdmacxx/checked.hpp" // opt-in: not part of the umbrella header

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <span>
#include <thread>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

// Scheduling slack for the upper bound of a timed-out wait: the VM runs under emulation (TCG)
// on a shared machine, where a thread may wait seconds for a core.
constexpr auto slack = 5s;

} // namespace

TEST_CASE_TEMPLATE("wait: a bounded wait times out on an idle CQ, wakes for a completion, and the CQ goes on", C,
                   rx::busy_poll, rx::event_driven, rx::adaptive, rx::checked<rx::busy_poll>,
                   rx::checked<rx::event_driven>, rx::checked<rx::adaptive>) {
    test::loopback<rx::rc, C> lb;
    test::buffer buf(lb.pd, 4096);
    std::array<rx::work_completion, 4> out{};

    // Zero: one poll, nothing there.
    CHECK(lb.cq_a.wait(std::span{out}, 0ms) == 0);
    CHECK_FALSE(lb.cq_a.wait_one(-1s).has_value());

    // Idle: the timeout is the outcome, no sooner than asked and within the slack.
    constexpr auto timeout = 200ms;
    auto const t0 = clock_type::now();
    std::optional<rx::work_completion> const none = lb.cq_a.wait_one(timeout);
    auto const took = clock_type::now() - t0;
    MESSAGE("wait_one(200ms) on an idle CQ returned empty after "
            << std::chrono::duration_cast<std::chrono::microseconds>(took).count() << " us");
    CHECK_FALSE(none.has_value());
    CHECK(took >= timeout);
    CHECK(took < timeout + slack);
    // Sub-millisecond and floating-point durations are taken as they are.
    CHECK(lb.cq_a.wait(std::span{out}, 300us) == 0);
    CHECK(lb.cq_a.wait(std::span{out}, std::chrono::duration<double>(0.01)) == 0);

    // A completion that is there is taken at once.
    lb.b.post_recv(rx::recv{buf.span().subspan(1024, 64)}.id(2));
    lb.a.post(rx::send{buf.span().first(64)}.id(1));
    auto const sent = lb.cq_a.wait_one(10s);
    REQUIRE(sent.has_value());
    CHECK(sent->ok());
    CHECK(sent->wr_id() == 1);
    std::size_t const n = lb.cq_b.wait(std::span{out}, 10s);
    REQUIRE(n == 1);
    CHECK(out[0].ok());
    CHECK(out[0].wr_id() == 2);

    // A completion that comes while the waiter sleeps (an event-driven CQ left armed by the
    // timeouts above) wakes it long before its timeout.
    lb.b.post_recv(rx::recv{buf.span().subspan(2048, 64)}.id(4));
    std::thread poster{[&] {
        std::this_thread::sleep_for(100ms);
        lb.a.post(rx::send{buf.span().first(64)}.id(3));
    }};
    auto const t1 = clock_type::now();
    auto const woke = lb.cq_b.wait_one(30s);
    auto const waited = clock_type::now() - t1;
    poster.join();
    MESSAGE("wait_one(30s) woke for a completion posted after 100 ms, after "
            << std::chrono::duration_cast<std::chrono::microseconds>(waited).count() << " us");
    REQUIRE(woke.has_value());
    CHECK(woke->ok());
    CHECK(woke->wr_id() == 4);
    CHECK(waited < 100ms + slack);
    REQUIRE(lb.cq_a.wait_one(10s).has_value());
}

TEST_CASE("wait: a completion channel's get_event(timeout) returns nothing when idle and the CQ that fired") {
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_channel channel{ctx};
    rx::completion_queue<rx::event_driven> cq{ctx, 16, channel};
    rx::queue_pair<rx::rc, rx::event_driven> a{pd, cq, cq}, b{pd, cq, cq};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    test::buffer buf(pd, 4096);

    cq.arm();
    auto const t0 = clock_type::now();
    CHECK(channel.get_event(100ms) == nullptr);
    auto const took = clock_type::now() - t0;
    CHECK(took >= 100ms);
    CHECK(took < 100ms + slack);

    b.post_recv(rx::recv{buf.span().subspan(1024, 64)}.id(2));
    a.post(rx::send{buf.span().first(64)}.id(1));
    ibv_cq* const fired = channel.get_event(10s);
    REQUIRE(fired == cq.native_handle());
    cq.note_event(); // acknowledged by the CQ (in a batch, or when it is destroyed)
    int got = 0;
    for (auto const deadline = clock_type::now() + 10s; got < 2 && clock_type::now() < deadline;)
        for (auto const& wc : cq.poll<4>()) {
            CHECK(wc.ok());
            ++got;
        }
    CHECK(got == 2);
}

TEST_CASE("wait: the async event queue's bounded wait takes any std::chrono duration and returns empty") {
    rx::context ctx = test::open_test_device();
    rx::async_event_queue q{ctx};
    CHECK_FALSE(q.wait(500us).has_value());
    CHECK_FALSE(q.wait(std::chrono::duration<double, std::milli>(20.5)).has_value());
    auto const t0 = clock_type::now();
    CHECK_FALSE(q.wait(150ms).has_value());
    auto const took = clock_type::now() - t0;
    CHECK(took >= 150ms);
    CHECK(took < 150ms + slack);
}

TEST_CASE("wait: two threads reading one context's async events both return from try_get, none blocks") {
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_queue<rx::busy_poll> cq_a{ctx, 64}, cq_b{ctx, 1};
    rx::queue_pair<rx::rc, rx::busy_poll> a{pd, cq_a, cq_a, {}}, b{pd, cq_b, cq_b, {}};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    test::buffer buf(pd, 4096);

    rx::async_event_queue q1{ctx}, q2{ctx};
    // The queue makes the fd non-blocking itself: a reader that loses the race for an event
    // gets EAGAIN instead of sleeping in ibv_get_async_event(3) until the next one.
    CHECK(q1.nonblocking());
    CHECK(q2.nonblocking());

    std::atomic<bool> stop{false};
    std::atomic<int> taken{0};
    auto reader = [&](rx::async_event_queue& q, std::promise<void> done) {
        while (!stop.load())
            if (auto ev = q.try_get()) ++taken; // acknowledged at the end of the turn
        done.set_value();
    };
    std::promise<void> done1, done2;
    auto f1 = done1.get_future(), f2 = done2.get_future();
    std::thread t1{reader, std::ref(q1), std::move(done1)};
    std::thread t2{reader, std::ref(q2), std::move(done2)};

    // A peer overflowing a CQ of one entry: several CQ error events, read by both threads at once.
    for (int i = 0; i < 8; ++i)
        b.post_recv(rx::recv{buf.span().subspan(static_cast<std::size_t>(i) * 64, 64)});
    for (int i = 0; i < 8; ++i)
        a.post(rx::send{buf.span().subspan(2048, 16)}.unsignaled());
    for (auto const deadline = clock_type::now() + 10s; taken.load() == 0 && clock_type::now() < deadline;)
        std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(300ms); // the rest of the events, raced for
    stop = true;

    // Both readers notice `stop`: none sleeps inside ibv_get_async_event(3).
    bool const finished = f1.wait_for(5s) == std::future_status::ready && f2.wait_for(5s) == std::future_status::ready;
    if (!finished) {
        t1.detach();
        t2.detach();
        FAIL("a reader stayed blocked in try_get after " << taken.load() << " events were taken");
    }
    t1.join();
    t2.join();
    CHECK(taken.load() >= 1);
    MESSAGE(taken.load() << " async events taken by two racing readers");
}
