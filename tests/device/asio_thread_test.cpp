// The Asio adapter's thread rule on a real device (rdmacxx/asio/thread_rule.hpp): a dispatcher
// is used from one thread at a time. Two threads in one io_context's run() with SENDs and
// receives in flight: the thread that enters the dispatcher while the other is inside is
// refused with thread_error, out of its run(). A dispatcher handed from thread to thread (run,
// join, run elsewhere) keeps working. Bounded: the two-thread run stops at the refusal or after
// 10 s, and then fails.
#include "asio_fixture.hpp"
#include "asio_net.hpp"
#include "fixture.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
namespace net = rxa::net;

namespace {

// Ping-pong traffic on an asio_pair: `lanes` SEND/receive pairs in flight, each lane's next pair
// started by a handler its last one posts to the io_context (the dispatcher runs the completions
// themselves inline, within its sweep: with every start posted, a thread of a second run() meets
// the thread inside the sweep), until `stop` is set.
struct traffic {
    explicit traffic(test::asio_pair<>& pair, std::size_t lanes)
        : p(pair), buf(pair.pd, lanes * 2 * 64), lanes_(lanes) {}

    void start() {
        for (std::size_t l = 0; l < lanes_; ++l)
            lane(l);
    }
    void lane(std::size_t l) {
        if (stop.load()) return;
        auto const mine = buf.span().subspan(l * 128, 64);
        auto const theirs = buf.span().subspan(l * 128 + 64, 64);
        auto left = std::make_shared<std::atomic<int>>(2);
        auto done = [this, l, left](std::error_code ec, rx::work_completion) {
            if (ec) failed.store(true);
            if (--*left == 0) {
                rounds.fetch_add(1);
                net::post(p.io, [this, l] { lane(l); });
            }
        };
        rxa::async_recv(p.d, p.b, rx::recv{theirs}, done);
        rxa::async_post(p.d, p.a, rx::send{mine}, done);
    }

    test::asio_pair<>& p;
    test::buffer buf;
    std::size_t lanes_;
    std::atomic<bool> stop{false};
    std::atomic<bool> failed{false};
    std::atomic<std::uint64_t> rounds{0};
};

} // namespace

#if RDMACXX_ASIO_THREAD_CHECK
TEST_CASE("asio: a second thread in run() is refused with thread_error, out of its run()") {
    test::asio_pair<> p{128, rxa::cancel_mode::wait};
    traffic t{p, 16};
    t.start();
    std::mutex m;
    std::optional<rxa::thread_error> refused;
    std::string other;
    std::atomic<int> ended{0};
    auto runner = [&] {
        try {
            p.io.run_for(std::chrono::seconds{10});
        } catch (rxa::thread_error const& e) {
            std::scoped_lock const lock{m};
            if (!refused) refused.emplace(e);
            p.io.stop(); // the dispatcher is not to be used again: the first runner stops too
        } catch (std::exception const& e) {
            std::scoped_lock const lock{m};
            other = e.what();
            p.io.stop();
        }
        ended.fetch_add(1);
    };
    std::thread first{runner}, second{runner};
    first.join();
    second.join();
    t.stop.store(true);
    CHECK(other.empty());
    REQUIRE_MESSAGE(refused.has_value(), "two threads ran the dispatcher for 10 s ("
                                             << t.rounds.load() << " round trips) and neither was refused");
    CHECK(refused->code() == std::make_error_code(std::errc::operation_not_permitted));
    std::string const what = refused->what();
    CHECK(what.find("a completion dispatcher") != std::string::npos);
    CHECK(what.find("one thread at a time") != std::string::npos);
    MESSAGE("refused after " << t.rounds.load() << " round trips: " << what);
    // Teardown: the dispatcher, with operations pending, destroys their handlers uncalled.
}
#endif

TEST_CASE("asio: a dispatcher handed from thread to thread keeps working") {
    test::asio_pair<> p{128, rxa::cancel_mode::wait};
    traffic t{p, 4};
    std::uint64_t const per_turn = 200;
    std::set<std::thread::id> ran_on;
    // One turn: start the traffic, run until this turn's share is done, then let the pairs in
    // flight finish (run() returns when the dispatcher has nothing pending).
    auto turn = [&] {
        ran_on.insert(std::this_thread::get_id());
        t.stop.store(false);
        std::uint64_t const goal = t.rounds.load() + per_turn;
        ::asio::post(p.io, [&] { t.start(); });
        auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
        while (!p.io.stopped() && t.rounds.load() < goal && std::chrono::steady_clock::now() < deadline)
            p.io.run_one_for(std::chrono::milliseconds{100});
        t.stop.store(true);
        test::run_bounded(p.io);
        REQUIRE(t.rounds.load() >= goal);
    };
    turn(); // the main thread
    std::exception_ptr error;
    std::thread worker{[&] {
        try {
            turn(); // a worker, while the main thread waits
        } catch (...) {
            error = std::current_exception();
        }
    }};
    worker.join();
    if (error) std::rethrow_exception(error);
    turn(); // the main thread again
    CHECK(ran_on.size() == 2);
    CHECK_FALSE(t.failed.load());
    CHECK(p.d.in_flight() == 0);
}
