// Device tests of the CM engine, the driver a user's loop runs: both sides of every connection on
// one engine in one thread (the engine starts no thread), connect and accept with verified
// traffic, a reject with private data, the connect and accept deadlines, a disconnect from either
// side seen by the other's `on_end`, UD, and the same handshake failing the same way as the
// blocking calls. Threads (/proc/self/task) and descriptors are counted.
#include "fixture.hpp"

#include "rdmacxx/cm.hpp"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace engine_test {

using test::device_address;
using rc_connection = cm::connection<rx::rc, rx::busy_poll>;
using steady = std::chrono::steady_clock;

double ms_since(steady::time_point t) { return std::chrono::duration<double, std::milli>(steady::now() - t).count(); }

// Drives `eng` until `done()` or 30 s.
template <class Done>
void drive(cm::engine& eng, Done done) {
    for (auto const end = steady::now() + 30s; !done() && steady::now() < end;)
        (void)eng.wait(100ms);
    REQUIRE(done());
}

// The outcome of one handshake on an engine.
template <class Connection>
struct outcome {
    std::exception_ptr error;
    std::optional<Connection> c;
    bool finished = false;
    auto handler() {
        return [this](std::exception_ptr e, std::optional<Connection> made) {
            error = std::move(e);
            c = std::move(made);
            finished = true;
        };
    }
};

// A string's bytes.
std::vector<std::byte> bytes_of(std::string const& s) {
    std::vector<std::byte> b(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    return b;
}

} // namespace engine_test

using namespace engine_test;

TEST_SUITE("cm engine") {

    TEST_CASE("cm engine: 16 clients and their server on one engine in one thread: verified traffic, no thread "
              "started, descriptors back to their count") {
        constexpr int n = 16;
        { // librdmacm opens its device contexts once per process: before the count
            cm::engine warm;
            cm::listener<rx::rc> l{warm, device_address(), {}, [](cm::connect_request) {}};
        }
        std::size_t const threads0 = test::proc_entries("/proc/self/task");
        std::size_t const fds0 = test::proc_entries("/proc/self/fd");
        {
            cm::engine eng;
            std::vector<std::unique_ptr<rc_connection>> served;
            std::vector<std::unique_ptr<test::buffer>> served_bufs;
            cm::listener<rx::rc> server{eng, device_address(), {}, [&](cm::connect_request req) {
                                            cm::accept<rx::rc, rx::busy_poll>(
                                                eng, std::move(req), {}, {},
                                                [&](rc_connection& c) { // a receive before the client may send
                                                    served_bufs.push_back(std::make_unique<test::buffer>(c.pd(), 64));
                                                    c.qp().post_recv(rx::recv{served_bufs.back()->span()}.id(1));
                                                },
                                                [&](std::exception_ptr error, std::optional<rc_connection> c) {
                                                    REQUIRE_FALSE(error);
                                                    served.push_back(std::make_unique<rc_connection>(std::move(*c)));
                                                });
                                        }};
            std::vector<outcome<rc_connection>> clients(n);
            for (auto& c : clients)
                cm::connect<rx::rc, rx::busy_poll>(eng, device_address(server.port()), {}, {}, c.handler());
            CHECK(eng.pending() == n); // nothing blocked: every handshake is under way
            drive(eng, [&] {
                return served.size() == n &&
                       std::all_of(clients.begin(), clients.end(), [](auto& c) { return c.finished; });
            });
            CHECK(test::proc_entries("/proc/self/task") == threads0); // no thread per connection, none at all
            CHECK(eng.pending() == 0);
            CHECK(eng.registered() == 1 + 2 * n); // the listener and both ends of every connection

            // Each client sends its number; each server side receives one message.
            std::vector<std::unique_ptr<test::buffer>> out;
            for (int i = 0; i < n; ++i) {
                auto& c = clients[static_cast<std::size_t>(i)];
                REQUIRE_FALSE(c.error);
                out.push_back(std::make_unique<test::buffer>(c.c->pd(), 64));
                std::string const msg = "client " + std::to_string(i);
                std::memcpy(out.back()->bytes_.data(), msg.data(), msg.size());
                c.c->qp().post(rx::send{out.back()->span().first(msg.size())}.id(2));
                auto const wc = c.c->cq().wait_one(20s);
                REQUIRE(wc.has_value());
                CHECK(wc->ok());
            }
            std::vector<std::string> got;
            for (std::size_t i = 0; i < served.size(); ++i) {
                // served[i] made its receive into served_bufs[i] (one accept at a time, in order)
                auto const wc = served[i]->cq().wait_one(20s);
                REQUIRE(wc.has_value());
                REQUIRE(wc->ok());
                got.emplace_back(reinterpret_cast<char const*>(served_bufs[i]->bytes_.data()), wc->byte_len());
            }
            std::sort(got.begin(), got.end());
            std::vector<std::string> want;
            for (int i = 0; i < n; ++i)
                want.push_back("client " + std::to_string(i));
            std::sort(want.begin(), want.end());
            CHECK(got == want);

            // Disconnect from the client side: every server side's on_end comes from process().
            int ended = 0;
            for (auto& s : served)
                s->on_end([&](cm::connection_state st) {
                    CHECK(st == cm::connection_state::disconnected);
                    ++ended;
                });
            for (auto& c : clients)
                c.c->disconnect(0ms); // no wait: the engine (this thread) sees the rest
            drive(eng, [&] { return ended == n; });
            for (auto& s : served)
                CHECK(s->qp().state() == IBV_QPS_ERR);
            CHECK(test::proc_entries("/proc/self/task") == threads0);
        }
        CHECK(test::proc_entries("/proc/self/fd") == fds0);
    }

    TEST_CASE("cm engine: a disconnect from the server side reaches the client's on_end") {
        cm::engine eng;
        std::optional<rc_connection> served;
        cm::listener<rx::rc> server{eng, device_address(), {}, [&](cm::connect_request req) {
                                        cm::accept<rx::rc, rx::busy_poll>(
                                            eng, std::move(req), {}, {}, {},
                                            [&](std::exception_ptr error, std::optional<rc_connection> c) {
                                                REQUIRE_FALSE(error);
                                                served = std::move(c);
                                            });
                                    }};
        outcome<rc_connection> client;
        cm::connect<rx::rc, rx::busy_poll>(eng, device_address(server.port()), {}, {}, client.handler());
        drive(eng, [&] { return served.has_value() && client.finished; });
        REQUIRE(client.c.has_value());
        bool ended = false;
        client.c->on_end([&](cm::connection_state) { ended = true; });
        served->disconnect(0ms);
        drive(eng, [&] { return ended; });
        CHECK(client.c->state() == cm::connection_state::disconnected);
        CHECK(client.c->qp().state() == IBV_QPS_ERR);
    }

    TEST_CASE("cm engine: a reject with private data reaches the client as rejected_error with the bytes") {
        cm::engine eng;
        std::vector<std::byte> const why = bytes_of("server full");
        cm::listener<rx::rc> server{eng, device_address(), {}, [&](cm::connect_request req) { req.reject(why); }};
        outcome<rc_connection> client;
        cm::connect<rx::rc, rx::busy_poll>(eng, device_address(server.port()), {}, {}, client.handler());
        drive(eng, [&] { return client.finished; });
        REQUIRE(client.error);
        CHECK_FALSE(client.c.has_value());
        try {
            std::rethrow_exception(client.error);
        } catch (cm::rejected_error const& e) {
            MESSAGE("rejected: " << std::string{e.what()});
            REQUIRE(e.private_data().size() >= why.size());
            CHECK(std::equal(why.begin(), why.end(), e.private_data().begin()));
        }
        CHECK(eng.pending() == 0);
        CHECK(eng.registered() == 1);
    }

    TEST_CASE("cm engine: the connect deadline fails the handshake with timeout_error naming the step, within "
              "its bound, through process()") {
        cm::engine eng;
        cm::connection_options opt;
        opt.deadlines.connect = 1500ms;
        outcome<rc_connection> client;
        auto const start = steady::now();
        // A host on the device's subnet that does not exist: the connect request goes unanswered.
        cm::connect<rx::rc, rx::busy_poll>(eng, cm::address::resolve("198.18.0.77", 7471), opt, {}, client.handler());
        drive(eng, [&] { return client.finished; });
        double const took = engine_test::ms_since(start);
        REQUIRE(client.error);
        try {
            std::rethrow_exception(client.error);
        } catch (cm::timeout_error const& e) {
            MESSAGE("after " << took << " ms: " << std::string{e.what()});
            CHECK((e.step() == cm::step::connect || e.step() == cm::step::resolve_address));
        }
        CHECK(took < 1500.0 + 3000.0 + 2000.0); // address resolution (2 s + 1 s slack) and the step
        CHECK(eng.pending() == 0);
    }

    TEST_CASE("cm engine: the accept deadline fails an accept whose client never completes the handshake, and "
              "the server goes on serving") {
        cm::engine eng;
        std::vector<std::exception_ptr> failures;
        std::vector<rc_connection> served;
        cm::connection_options opt;
        opt.deadlines.accept = 1000ms;
        cm::listener<rx::rc> server{eng, device_address(), {}, [&](cm::connect_request req) {
                                        cm::accept<rx::rc, rx::busy_poll>(
                                            eng, std::move(req), opt, {}, {},
                                            [&](std::exception_ptr error, std::optional<rc_connection> c) {
                                                if (error)
                                                    failures.push_back(error);
                                                else
                                                    served.push_back(std::move(*c));
                                            });
                                    }};
        // A hand-driven client on a channel of its own: it never sends the RTU.
        cm::event_channel ch;
        cm::id silent{ch, cm::port_space::tcp};
        silent.resolve_address(device_address(server.port()), 2000ms);
        REQUIRE(ch.get(5s)->type() == cm::event_type::addr_resolved);
        silent.resolve_route(2000ms);
        REQUIRE(ch.get(5s)->type() == cm::event_type::route_resolved);
        silent.connect({}, {}, 0x1234, false);
        auto const start = steady::now();
        drive(eng, [&] { return !failures.empty(); });
        double const took = engine_test::ms_since(start);
        try {
            std::rethrow_exception(failures.front());
        } catch (cm::timeout_error const& e) {
            MESSAGE("after " << took << " ms: " << std::string{e.what()});
            CHECK(e.step() == cm::step::accept);
        }
        CHECK(took < 1000.0 + 2000.0);
        // The same server accepts the next client.
        outcome<rc_connection> client;
        cm::connect<rx::rc, rx::busy_poll>(eng, device_address(server.port()), {}, {}, client.handler());
        drive(eng, [&] { return client.finished && served.size() == 1; });
        CHECK_FALSE(client.error);
        CHECK(served.front().state() == cm::connection_state::established);
    }

    TEST_CASE("cm engine: UD through the engine: the accept finishes at once, the client learns the server's QPN") {
        cm::engine eng;
        std::optional<cm::connection<rx::ud, rx::busy_poll>> served;
        cm::listener<rx::ud> server{
            eng, device_address(), {}, [&](cm::connect_request req) {
                cm::accept<rx::ud, rx::busy_poll>(
                    eng, std::move(req), {}, {}, {},
                    [&](std::exception_ptr error, std::optional<cm::connection<rx::ud, rx::busy_poll>> c) {
                        REQUIRE_FALSE(error);
                        served = std::move(c); // called before accept() returns
                    });
                CHECK(served.has_value());
            }};
        outcome<cm::connection<rx::ud, rx::busy_poll>> client;
        cm::connect<rx::ud, rx::busy_poll>(eng, device_address(server.port()), {}, {}, client.handler());
        drive(eng, [&] { return client.finished; });
        REQUIRE_FALSE(client.error);
        REQUIRE(served.has_value());
        CHECK(client.c->peer_qpn() == served->qp().qp_num());
    }

    TEST_CASE("cm engine: bad input is refused before anything is sent, and the completion is never called") {
        cm::engine eng;
        cm::connection_options opt;
        opt.private_data.assign(57, std::byte{1}); // over the 56 bytes of a TCP connect request
        bool called = false;
        auto start = [&] {
            cm::connect<rx::rc, rx::busy_poll>(
                eng, device_address(7471), opt, {},
                [&](std::exception_ptr, std::optional<rc_connection>) { called = true; });
        };
        CHECK_THROWS_AS(start(), rx::argument_error);
        CHECK(eng.pending() == 0);
        (void)eng.process();
        CHECK_FALSE(called);
    }
}
