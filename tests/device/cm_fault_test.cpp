// Device tests of the RDMA connection manager's faults on a real device: a peer killed with
// SIGKILL surfaces as flushed completions and a disconnect within a bound (measured); destroying
// a connection while holding its event does not deadlock; every CM wait has a bounded twin; a
// multicast group that fails after its join leaks nothing; reply_to refuses a short GRH. The
// churn clients (the "churn" child) serve cm_drivers_test.cpp's churn through every driver.
//
// The peers that die, and the scenarios that could deadlock, run in a child process: this
// binary re-executed (/proc/self/exe) with RDMACXX_CM_FAULT_CHILD set, which a static object
// below catches before doctest starts. The parent bounds every wait and kills what overstays.
#include "child_process.hpp"
#include "fixture.hpp"

#include "rdmacxx/cm/connection.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using test::child_process;

namespace {

std::string env_device_ip() {
    char const* a = std::getenv("RDMACXX_ADDR");
    if (a == nullptr || *a == '\0') throw std::runtime_error("RDMACXX_ADDR is not set: run under tools/softroce");
    return a;
}

double ms_since(steady::time_point t0) { return std::chrono::duration<double, std::milli>(steady::now() - t0).count(); }

// ---- the child side -------------------------------------------------------------------------

void child_say(int fd, std::string const& line) {
    std::string const l = line + "\n";
    (void)!::write(fd, l.data(), l.size());
}

// A peer that connects to (or accepts from) the parent, says "up", posts no receive and waits
// to be killed (at most two minutes).
int child_peer(std::istringstream& args, int out) {
    std::string role;
    args >> role;
    if (role == "connect") {
        std::uint16_t port = 0;
        args >> port;
        auto conn = cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(env_device_ip(), port));
        child_say(out, "up");
        std::this_thread::sleep_for(120s);
        return 0;
    }
    cm::listener<rx::rc> server{cm::address::resolve(env_device_ip(), 0)};
    child_say(out, "port " + std::to_string(server.port()));
    auto conn = server.get_request(30s).accept<rx::rc, rx::busy_poll>();
    child_say(out, "up");
    std::this_thread::sleep_for(120s);
    return 0;
}

// The natural event loop of a server on one shared channel, destroying each connection (and a
// plain id) while still holding the event that ended it. Deadlocked in rdma_destroy_id before
// events were acknowledged on arrival.
int child_hold_event(int out) {
    // A plain id destroyed while its addr_resolved event is held.
    {
        cm::event_channel ch;
        std::optional<cm::event> held;
        {
            cm::id id{ch, cm::port_space::tcp};
            id.resolve_address(cm::address::resolve(env_device_ip(), 1), 2000ms);
            held = ch.get(10s);
            if (!held || held->type() != cm::event_type::addr_resolved) return 3;
        } // rdma_destroy_id with the event still held
        // The event outlives its id, its data intact; a move keeps it valid.
        if (held->id() == nullptr || held->status() != 0 || !held->private_data().empty()) return 4;
        cm::event const copied = *held;
        held.reset();
        if (copied.native().event != RDMA_CM_EVENT_ADDR_RESOLVED || copied.id() == nullptr) return 4;
        child_say(out, "id destroyed while its event was held");
    }
    // A connection on an engine, destroyed by its end callback: inside engine.process(), which
    // holds the `disconnected` event of the id being destroyed.
    using conn_t = cm::connection<rx::rc, rx::busy_poll>;
    cm::engine eng;
    std::unique_ptr<conn_t> served;
    bool destroyed = false;
    cm::listener<rx::rc> server{
        eng, cm::address::resolve(env_device_ip(), 0), {}, [&](cm::connect_request req) {
            cm::accept<rx::rc, rx::busy_poll>(
                eng, std::move(req), {}, {}, {}, [&](std::exception_ptr error, std::optional<conn_t> c) {
                    if (error) return;
                    served = std::make_unique<conn_t>(std::move(*c));
                    served->on_end([&](cm::connection_state) {
                        served.reset(); // destroys the connection's id while its event is held
                        destroyed = true;
                        child_say(out, "connection destroyed while its disconnected event was held");
                    });
                });
        }};
    auto const port = server.port();
    std::thread client([port] {
        auto conn = cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(env_device_ip(), port));
        conn.disconnect(20s);
    });
    auto const deadline = steady::now() + 30s;
    while (!destroyed && steady::now() < deadline)
        (void)eng.wait(100ms);
    client.join();
    return destroyed ? 0 : 5;
}

// A churn client: connects to ADDR PORT, then sends 64-byte messages (its id and a sequence
// number, then a pattern) one at a time and checks each echo byte for byte, until killed; says
// "connected" once and "echoed N" every 20 messages.
int child_churn(std::istringstream& args, int out) {
    std::string ip;
    int port = 0;
    std::uint32_t id = 0;
    args >> ip >> port >> id;
    auto conn = cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(ip, static_cast<std::uint16_t>(port)));
    test::buffer buf(conn.pd(), 128);
    child_say(out, "connected");
    for (std::uint32_t seq = 1;; ++seq) {
        for (std::size_t i = 0; i < 64; ++i)
            buf.bytes_[i] = static_cast<std::byte>((i * 7 + id * 13 + seq) & 0xff);
        std::memcpy(buf.bytes_.data(), &id, 4);
        std::memcpy(buf.bytes_.data() + 4, &seq, 4);
        conn.qp().post_recv(rx::recv{buf.span().subspan(64, 64)}.id(1));
        conn.qp().post(rx::send{buf.span().first(64)}.id(2));
        for (int k = 0; k < 2; ++k) {
            auto const wc = conn.cq().wait_one(20s);
            if (!wc || !wc->ok()) return 3;
        }
        if (std::memcmp(buf.bytes_.data(), buf.bytes_.data() + 64, 64) != 0) return 4;
        if (seq % 20 == 0) child_say(out, "echoed " + std::to_string(seq));
    }
}

int run_child(char const* spec, int out) {
    try {
        std::istringstream args{spec};
        std::string what;
        args >> what;
        if (what == "peer") return child_peer(args, out);
        if (what == "hold-event") return child_hold_event(out);
        if (what == "churn") return child_churn(args, out);
        return 2;
    } catch (std::exception const& e) {
        std::cerr << "cm fault child: " << e.what() << '\n';
        return 1;
    }
}

struct child_entry {
    child_entry() {
        if (char const* spec = std::getenv("RDMACXX_CM_FAULT_CHILD")) {
            char const* fd = std::getenv("RDMACXX_CM_FAULT_FD");
            std::_Exit(run_child(spec, fd != nullptr ? std::atoi(fd) : 2));
        }
    }
};
child_entry const child_entry_instance;

// ---- the parent side ------------------------------------------------------------------------

// Every completion of `cq` until `n` came or `deadline` passed: busy-polls, or for a CQ with a
// completion channel arms it and sleeps on the channel's descriptor (100 ms at a time).
template <class Completion>
std::vector<rx::work_completion> collect(rx::completion_queue<Completion>& cq, std::size_t n,
                                         steady::time_point deadline, std::optional<steady::time_point>& first) {
    std::vector<rx::work_completion> got;
    while (got.size() < n && steady::now() < deadline) {
        rx::work_completion wc;
        if (cq.poll(std::span{&wc, 1}) == 1) {
            if (!first) first = steady::now();
            got.push_back(wc);
            continue;
        }
        if constexpr (Completion::uses_channel) {
            cq.arm();
            if (cq.poll(std::span{&wc, 1}) == 1) {
                if (!first) first = steady::now();
                got.push_back(wc);
                continue;
            }
            pollfd pfd{cq.native_handle()->channel->fd, POLLIN, 0};
            if (::poll(&pfd, 1, 100) > 0) {
                ibv_cq* ev_cq = nullptr;
                void* ev_ctx = nullptr;
                if (::ibv_get_cq_event(cq.native_handle()->channel, &ev_cq, &ev_ctx) == 0) cq.note_event();
            }
        }
    }
    return got;
}

// Posts receives and a SEND (which the peer, with no receive posted, RNR-NAKs, so it stays
// outstanding), kills the peer, and checks that everything completes in error and the
// connection ends within `bound`; prints the times.
template <class Connection>
void survive_the_kill(Connection& conn, child_process& peer, char const* side) {
    constexpr std::size_t receives = 4;
    test::buffer buf(conn.pd(), 4096);
    for (std::size_t i = 0; i < receives; ++i)
        conn.qp().post_recv(rx::recv{buf.span().subspan(i * 512, 512)}.id(100 + i));
    conn.qp().post(rx::send{buf.span().subspan(3072, 64)}.id(7));
    std::this_thread::sleep_for(50ms); // the SEND is in its RNR back-off now
    CHECK(conn.state() == cm::connection_state::established);

    constexpr auto bound = 20s; // the DREQ of the dead peer's kernel comes at once; generous for TCG
    auto const killed = steady::now();
    peer.kill();
    std::optional<steady::time_point> first;
    auto const got = collect(conn.cq(), receives + 1, killed + bound, first);
    double const all_ms = ms_since(killed);
    bool const ended = conn.wait_disconnected(5000ms); // after the flush, the state is already set
    double const ended_ms = ms_since(killed);

    REQUIRE_MESSAGE(got.size() == receives + 1, "only " << got.size() << " of " << receives + 1
                                                        << " WRs completed within " << bound.count()
                                                        << " s of the peer's SIGKILL");
    CHECK(ended);
    CHECK(conn.state() == cm::connection_state::disconnected);
    for (auto const& wc : got) {
        CHECK_FALSE(wc.ok());
        if (wc.wr_id() >= 100) {
            CHECK(wc.status() == IBV_WC_WR_FLUSH_ERR);
        } else {
            CHECK(wc.wr_id() == 7);
            // Flushed; RNR_RETRY_EXC_ERR only if finite RNR retries ran out before the kill.
            CHECK((wc.status() == IBV_WC_WR_FLUSH_ERR || wc.status() == IBV_WC_RNR_RETRY_EXC_ERR));
        }
        // What a user sees through the throwing path: a wc_error naming the status.
        rx::wc_error const err(wc.native(), !wc.is_recv());
        CHECK(err.status() == wc.status());
    }
    MESSAGE(std::string{side} << ": kill -9 of the peer -> first flushed completion after "
                              << std::chrono::duration<double, std::milli>(*first - killed).count() << " ms, all "
                              << got.size() << " after " << all_ms << " ms, wait_disconnected() woke after " << ended_ms
                              << " ms (bound " << bound.count() << " s)");
}

// Mappings of the RDMA device files: an rxe QP or CQ keeps its queues mapped from
// /dev/infiniband/uverbsN until it is destroyed (the heap's own mappings do not count).
std::size_t device_mapping_count() {
    std::ifstream in{"/proc/self/maps"};
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);)
        if (line.find("/dev/infiniband/") != std::string::npos) ++n;
    return n;
}

} // namespace

TEST_SUITE("device") {
    TEST_CASE_TEMPLATE("cm fault: a peer killed with SIGKILL flushes everything in flight and ends the connection", C,
                       rx::busy_poll, rx::event_driven) {
        SUBCASE("the survivor accepted") {
            cm::listener<rx::rc> server{cm::address::resolve(env_device_ip(), 0)};
            child_process peer{"peer connect " + std::to_string(server.port())};
            auto conn = server.get_request(30s).template accept<rx::rc, C>();
            REQUIRE(peer.line(30s) == "up");
            survive_the_kill(conn, peer, "survivor accepted");
            CHECK(peer.wait(10s).has_value());
        }
        SUBCASE("the survivor connected") {
            child_process peer{"peer accept"};
            auto const said = peer.line(30s);
            REQUIRE(said.rfind("port ", 0) == 0);
            auto const port = static_cast<std::uint16_t>(std::stoi(said.substr(5)));
            auto conn = cm::connect<rx::rc, C>(cm::address::resolve(env_device_ip(), port));
            REQUIRE(peer.line(30s) == "up");
            survive_the_kill(conn, peer, "survivor connected");
            CHECK(peer.wait(10s).has_value());
        }
    }

    TEST_CASE("cm fault: destroying a connection or id while holding its event does not deadlock") {
        child_process child{"hold-event"};
        auto const status = child.wait(90s);
        REQUIRE_MESSAGE(status.has_value(), "the child is stuck (rdma_destroy_id waiting for an unacknowledged event)");
        CHECK(WIFEXITED(*status));
        CHECK(WEXITSTATUS(*status) == 0);
        CHECK(child.line(1s) == "id destroyed while its event was held");
        CHECK(child.line(1s).rfind("connection destroyed while its disconnected event was held", 0) == 0);
    }

    TEST_CASE("cm fault: every CM wait has a bounded twin whose timeout is an outcome, not an exception") {
        cm::event_channel ch;
        auto t0 = steady::now();
        CHECK_FALSE(ch.get(20ms).has_value());
        CHECK_FALSE(ch.get(1500us).has_value()); // any std::chrono duration
        CHECK_FALSE(ch.get(0s).has_value());
        CHECK(ms_since(t0) < 5000.0); // the bound the timeouts imply, with room for TCG

        // A connection on an engine (no channel of its own): wait_disconnected is bounded and
        // answers false while the peer stays.
        cm::engine eng;
        std::optional<cm::connection<rx::rc, rx::busy_poll>> served;
        cm::listener<rx::rc> server{
            eng, cm::address::resolve(env_device_ip(), 0), {}, [&](cm::connect_request req) {
                cm::accept<rx::rc, rx::busy_poll>(
                    eng, std::move(req), {}, {}, {},
                    [&](std::exception_ptr error, std::optional<cm::connection<rx::rc, rx::busy_poll>> c) {
                        if (!error) served = std::move(c);
                    });
            }};
        auto const port = server.port();
        std::optional<cm::connection<rx::rc, rx::busy_poll>> client;
        std::thread t(
            [&] { client.emplace(cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(env_device_ip(), port))); });
        auto const deadline = steady::now() + 30s;
        while (!served && steady::now() < deadline)
            (void)eng.wait(100ms);
        t.join();
        REQUIRE(served.has_value());
        REQUIRE(served->state() == cm::connection_state::established);
        t0 = steady::now();
        CHECK_FALSE(served->wait_disconnected(50ms));
        CHECK_FALSE(client->wait_disconnected(50ms));
        CHECK(ms_since(t0) < 5000.0);
        // The client leaves; the engine's loop (another thread, now the only one driving it)
        // takes the event, which answers the client's DREQ, and the waiter here wakes.
        std::thread loop([&] {
            auto const end = steady::now() + 20s;
            while (served->state() != cm::connection_state::disconnected && steady::now() < end)
                (void)eng.wait(100ms);
        });
        client->disconnect(20s);
        CHECK(served->wait_disconnected(20s));
        loop.join();
        CHECK(client->wait_disconnected(0ms));
    }

    TEST_CASE("cm fault: a multicast group whose constructor fails after the join leaks no QP, CQ or PD") {
        // Every AH of the device taken, the group's own AH (made after the join) cannot be.
        rx::context ctx = test::open_test_device();
        rx::end_port port{ctx};
        rx::protection_domain pd{ctx};
        ibv_ah_attr attr{};
        attr.is_global = 1;
        attr.port_num = 1;
        attr.grh.sgid_index = 1;
        attr.grh.hop_limit = 1;
        REQUIRE(::ibv_query_gid(ctx.native_handle(), 1, 1, &attr.grh.dgid) == 0);
        auto const local = cm::address::resolve(env_device_ip(), 0);
        auto const group = cm::address::resolve("239.1.2.9", 0);
        { cm::multicast_group<rx::busy_poll> warm{local, group}; } // first-use mappings, made once
        std::size_t const before = device_mapping_count();
        std::vector<std::unique_ptr<rx::address_handle>> hogs;
        try {
            for (int i = 0; i < 100000; ++i)
                hogs.push_back(std::make_unique<rx::address_handle>(pd, attr));
        } catch (rx::sys_error const&) {}
        MESSAGE("the device ran out of AHs after " << hogs.size());
        REQUIRE(hogs.size() < 100000);
        CHECK_THROWS_AS(cm::multicast_group<rx::busy_poll>(local, group), rx::sys_error);
        hogs.clear();
        CHECK(device_mapping_count() == before); // the QP and CQ of the failed group are unmapped
        // And the group can be joined again at once (it was left).
        cm::multicast_group<rx::busy_poll> again{local, group};
        CHECK(again.qpn() == 0xffffffU);
    }

    TEST_CASE("cm fault: reply_to refuses a buffer or completion shorter than the 40-byte GRH") {
        cm::listener<rx::ud> server{cm::address::resolve(env_device_ip(), 0)};
        auto const port = server.port();
        std::optional<cm::connection<rx::ud, rx::busy_poll>> client;
        std::thread t(
            [&] { client.emplace(cm::connect<rx::ud, rx::busy_poll>(cm::address::resolve(env_device_ip(), port))); });
        auto conn = server.get_request(30s).accept<rx::ud, rx::busy_poll>();
        t.join();
        std::vector<std::byte> buf(39);
        rx::work_completion const wc{}; // value-initialised: zeros (default-initialised it is indeterminate)
        CHECK_THROWS_AS(conn.reply_to(wc, buf), rx::argument_error);
        buf.resize(64);
        CHECK_THROWS_AS(conn.reply_to(wc, buf), rx::argument_error); // not a receive of 40 bytes or more
        CHECK(conn.peer_ah() == nullptr);
    }
}
