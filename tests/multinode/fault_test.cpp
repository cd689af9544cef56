// Faults on the wire, across two Soft-RoCE nodes (tools/softroce --nodes 2; tools/nodes-faults
// runs it): each fault is a pair of test cases, a "server" role started on node 2 over ssh and a
// "client" role here on node 1, connected through the RDMA CM (cm::listener, cm::connect) on
// the nodes' own addresses. Every wait is bounded; every byte that arrives is checked.
//
//   loss      a stream of RDMACXX_FAULT_MESSAGES (10,000) RC SENDs of 1 ... 3 path MTUs arrives
//             complete, in order, byte for byte, while netem drops 5 % of the packets;
//   link      node 2 takes its link down mid-stream: the sender's next SEND completes with
//             IBV_WC_RETRY_EXC_ERR within the bound its ACK timeout and retry count imply; the
//             server reports what its CM says once the link is back; a new connection works;
//   kill      the server process is killed (kill -9 over ssh): the client's WRs in flight are
//             flushed and its connection reports `disconnected`, within a bound; destructors return;
//   poweroff  node 2 is powered off mid-stream: IBV_WC_RETRY_EXC_ERR within the bound;
//             destructors return.
//   nobody    not a pair: an address on the nodes' subnet that no node has; ARP gets no
//             answer, and connecting fails with the resolve-address step's timeout_error
//             within that step's bound;
//   ops       not a fault: WRITE with immediate (3 path MTUs, checked in place with its immediate),
//             compare-and-swap that swaps and one that does not, fetch-and-add, across the wire.
//
// Environment: RDMACXX_ADDR (this node's address, set by softroce), RDMACXX_FAULT_PEER (the
// client's: the server's address), RDMACXX_SSH (the client's: softroce's ssh wrapper),
// RDMACXX_CM_DRIVER (the client's: blocking, the default, or engine — the CM driver it connects
// through; tools/nodes-wire runs the link fault through both).
#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

std::string env(char const* name) {
    char const* v = std::getenv(name);
    if (v == nullptr || *v == '\0')
        throw std::runtime_error(std::string{name} +
                                 " is not set: run through tools/nodes-faults under softroce --nodes 2");
    return v;
}

double ms_since(steady::time_point t0) { return std::chrono::duration<double, std::milli>(steady::now() - t0).count(); }
double ms_between(steady::time_point a, steady::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

constexpr std::uint16_t loss_port = 18601;
constexpr std::uint16_t link_port = 18602;
constexpr std::uint16_t relink_port = 18603;
constexpr std::uint16_t kill_port = 18604;
constexpr std::uint16_t poweroff_port = 18605;
constexpr std::uint16_t ops_port = 18606;

constexpr std::size_t slot_bytes = 4096; // receive slots; messages are at most 3 path MTUs (1024)
constexpr std::size_t ring = 64;         // receives posted / sends in flight

std::size_t message_count() {
    char const* v = std::getenv("RDMACXX_FAULT_MESSAGES");
    return v != nullptr ? static_cast<std::size_t>(std::stoul(v)) : 10000;
}

// Message i: 1 ... 3072 bytes (1 to 3 path MTUs of 1024), its index in its first 4 bytes (if it
// has them), then a pattern that depends on i and the position.
std::size_t size_of(std::size_t i) { return 1 + (i * 7919) % 3072; }
std::byte byte_of(std::size_t i, std::size_t j) {
    if (j < 4) return static_cast<std::byte>((i >> (8 * j)) & 0xff);
    return static_cast<std::byte>((i * 131 + j * 31 + j / 251) & 0xff);
}
void fill(std::span<std::byte> s, std::size_t i) {
    for (std::size_t j = 0; j < s.size(); ++j)
        s[j] = byte_of(i, j);
}
// The first position where `s` is not message i, or s.size() when it is.
std::size_t mismatch(std::span<std::byte const> s, std::size_t i) {
    for (std::size_t j = 0; j < s.size(); ++j)
        if (s[j] != byte_of(i, j)) return j;
    return s.size();
}

using conn_t = cm::connection<rx::rc, rx::event_driven>;

cm::connection_options options(std::uint8_t retry_count, rx::ack_timeout timeout) {
    cm::connection_options opt;
    opt.caps.max_send_wr = ring;
    opt.caps.max_recv_wr = ring;
    opt.cq_entries = 2 * ring;
    opt.settings.retry_count = retry_count;
    opt.settings.local_ack_timeout = timeout;
    opt.settings.rnr_retry_count = 7; // the peer waits for receives forever: only the wire may fail
    opt.deadlines.event = 30s;
    return opt;
}

// One connect through the driver RDMACXX_CM_DRIVER names: blocking (the default) or engine (a
// cm::engine of the test's, driven here until the handshake ends; nobody drives it afterwards:
// what the connection then meets, it meets on its QP). Throws the handshake's error.
conn_t connect_once(cm::address const& peer, cm::connection_options const& opt) {
    char const* driver = std::getenv("RDMACXX_CM_DRIVER");
    if (driver == nullptr || std::string{driver} == "blocking") return cm::connect<rx::rc, rx::event_driven>(peer, opt);
    REQUIRE(std::string{driver} == "engine");
    static cm::engine eng; // outlives the connections made on it
    std::exception_ptr error;
    std::optional<conn_t> made;
    bool done = false;
    cm::connect<rx::rc, rx::event_driven>(eng, peer, opt, {}, [&](std::exception_ptr e, std::optional<conn_t> c) {
        error = std::move(e);
        made = std::move(c);
        done = true;
    });
    for (auto const end = steady::now() + 120s; !done && steady::now() < end;) // the deadlines end it first
        (void)eng.wait(100ms);
    REQUIRE(done);
    if (error) std::rethrow_exception(error);
    return std::move(*made);
}

// A connect to the server on node 2, which may not listen yet (it starts over ssh): tries again
// while it is rejected or unreachable, for `limit` at most.
conn_t connect_retrying(std::uint16_t port, cm::connection_options const& opt, std::chrono::seconds limit = 90s) {
    auto const deadline = steady::now() + limit;
    auto const peer = cm::address::resolve(env("RDMACXX_FAULT_PEER"), port);
    for (;;) {
        try {
            return connect_once(peer, opt);
        } catch (cm::cm_error const& e) {
            if (steady::now() > deadline) throw;
            std::this_thread::sleep_for(500ms);
        }
    }
}

// Registered memory: `slots` slots of slot_bytes.
struct slots {
    slots(rx::protection_domain& pd, std::size_t n)
        : bytes(n * slot_bytes), mr(pd.register_memory(std::span{bytes}, rx::access::local_write)) {}
    rx::local_span<std::byte> slot(std::size_t k, std::size_t size = slot_bytes) const {
        return mr.span().subspan(k * slot_bytes, size);
    }
    std::span<std::byte> raw(std::size_t k, std::size_t size = slot_bytes) {
        return std::span{bytes}.subspan(k * slot_bytes, size);
    }
    std::vector<std::byte> bytes;
    rx::memory_region mr;
};

// The receiving side of a stream: receives into a ring of slots, checks that message i arrives
// i-th with its size and every byte, reposts. Stops after `n` messages, at the first failed
// completion (returned), or when nothing came for `quiet`. Made in `before_accept`, on the
// connection being accepted: `attach` it to the connection `accept` returned (the one it was
// made on was moved from).
struct receiver {
    receiver(conn_t& c) : conn(&c), buf(c.pd(), ring) {}
    void attach(conn_t& c) noexcept { conn = &c; }
    void post_all() {
        for (std::size_t k = 0; k < ring; ++k)
            conn->qp().post_recv(rx::recv{buf.slot(k)}.id(k));
    }
    std::optional<rx::work_completion> run(std::size_t n, std::chrono::milliseconds quiet) {
        while (got < n) {
            auto wc = conn->cq().wait_one(quiet);
            if (!wc) return std::nullopt;
            if (!wc->ok()) return wc;
            auto const k = static_cast<std::size_t>(wc->wr_id());
            REQUIRE(k == got % ring); // in order
            REQUIRE_MESSAGE(wc->byte_len() == size_of(got),
                            "message " << got << ": " << wc->byte_len() << " bytes, expected " << size_of(got));
            auto const at = mismatch(buf.raw(k, wc->byte_len()), got);
            REQUIRE_MESSAGE(at == wc->byte_len(), "message " << got << " differs at byte " << at);
            bytes += wc->byte_len();
            ++got;
            conn->qp().post_recv(rx::recv{buf.slot(k)}.id(k));
        }
        return std::nullopt;
    }
    conn_t* conn;
    slots buf;
    std::size_t got = 0;
    std::size_t bytes = 0;
};

// The sending side of a stream: up to `ring` SENDs in flight, each completion checked in order.
// Stops after `n` messages completed or at the first failed completion (returned, with the time
// of the last successful one in `last_ok`); every wait bounded by `quiet`. `after(k)` runs once
// k messages completed.
template <class After>
std::optional<rx::work_completion> stream(conn_t& conn, std::size_t n, std::chrono::milliseconds quiet,
                                          steady::time_point& last_ok, std::size_t& done, After&& after) {
    slots buf(conn.pd(), ring);
    std::size_t posted = 0;
    done = 0;
    last_ok = steady::now();
    while (done < n) {
        while (posted < n && posted - done < ring) {
            auto const k = posted % ring;
            fill(buf.raw(k, size_of(posted)), posted);
            conn.qp().post(rx::send{buf.slot(k, size_of(posted))}.id(posted));
            ++posted;
        }
        auto wc = conn.cq().wait_one(quiet);
        REQUIRE_MESSAGE(wc.has_value(),
                        "no completion within " << quiet.count() << " ms after " << done << " of " << n);
        if (!wc->ok()) return wc;
        REQUIRE(wc->wr_id() == done); // in order
        last_ok = steady::now();
        ++done;
        after(done);
    }
    return std::nullopt;
}

// The bound of a sender's detection of a silent peer: (retry_count + 1) ACK timeouts, each
// rounded up to the guest kernel's timer tick (rxe's retransmit timer counts jiffies; 10 ms
// covers HZ >= 100), plus 3 s for a TCG guest on a loaded 2-core host (its vCPU is not always
// scheduled when its timer is due) and for retransmitting the SENDs in flight.
std::chrono::milliseconds detection_bound(rx::ack_timeout t, std::uint8_t retry_count) {
    auto const per_try = std::chrono::duration_cast<std::chrono::microseconds>(t.duration()) + 10ms;
    return std::chrono::duration_cast<std::chrono::milliseconds>(per_try * (retry_count + 1)) + 3000ms;
}

// What a user sees through the throwing path: the wc_error's message.
std::string describe(rx::work_completion const& wc) { return rx::wc_error(wc.native(), !wc.is_recv()).what(); }

int run(std::string const& command) {
    std::cout << "running: " << command << std::endl;
    return std::system(command.c_str());
}

template <class F>
double timed_ms(F&& f) {
    auto const t0 = steady::now();
    f();
    return ms_since(t0);
}

// The fault settings of the link and power-off tests: a short ACK timeout, 3 retries.
constexpr std::uint8_t fault_retries = 3;
rx::ack_timeout const fault_timeout{67ms};

// Streams SENDs until one fails (the peer went silent): checks it is IBV_WC_RETRY_EXC_ERR within
// `bound` of the last ACKed SEND, the rest flushed; prints the times.
template <class After = void (*)(std::size_t)>
void expect_retry_exceeded(
    conn_t& conn, std::chrono::milliseconds bound, char const* what, After&& after = [](std::size_t) {}) {
    steady::time_point last_ok;
    std::size_t done = 0;
    auto failed = stream(conn, 1000000, 60000ms, last_ok, done, after);
    auto const detected = steady::now();
    REQUIRE_MESSAGE(failed.has_value(), "the stream did not fail");
    double const ms = ms_between(last_ok, detected);
    MESSAGE(std::string{what} << ": after " << done << " SENDs, SEND " << failed->wr_id() << " completed with "
                              << describe(*failed) << " " << ms << " ms after the last ACKed one; bound "
                              << bound.count() << " ms = (retry_count " << int{fault_retries} << " + 1) x (ACK timeout "
                              << std::chrono::duration<double, std::milli>(fault_timeout.duration()).count()
                              << " ms + 10 ms timer tick) + 3000 ms");
    CHECK(failed->status() == IBV_WC_RETRY_EXC_ERR);
    CHECK(ms <= static_cast<double>(bound.count()));
    std::size_t flushed = 0;
    while (auto wc = conn.cq().wait_one(2s)) {
        CHECK(wc->status() == IBV_WC_WR_FLUSH_ERR);
        ++flushed;
    }
    MESSAGE(std::string{what} << ": " << flushed << " SENDs behind it flushed");
}

} // namespace

TEST_SUITE("multinode") {
    // ---- packet loss -------------------------------------------------------------------------
    TEST_CASE("loss server") {
        cm::listener<rx::rc> server{cm::address::resolve(env("RDMACXX_ADDR"), loss_port)};
        std::optional<receiver> rx_side;
        auto req = server.get_request(120s);
        auto conn = req.accept<rx::rc, rx::event_driven>(options(7, 67ms), {}, [&](conn_t& c) {
            rx_side.emplace(c);
            rx_side->post_all();
        });
        rx_side->attach(conn);
        auto const n = message_count();
        auto const t0 = steady::now();
        auto failed = rx_side->run(n, 30s);
        REQUIRE_MESSAGE(!failed, "receive failed: " << describe(*failed));
        REQUIRE_MESSAGE(rx_side->got == n,
                        "only " << rx_side->got << " of " << n << " messages within 30 s of the last");
        double const s = ms_since(t0) / 1000.0;
        MESSAGE("loss: received " << n << " of " << n << " messages (" << rx_side->bytes
                                  << " bytes, 1 ... 3072 each) in order, every byte checked, in " << s << " s");
        // The client disconnects once its SENDs completed: its DREQ (resent by its CM if lost)
        // reaches this side's monitor.
        auto const t1 = steady::now();
        bool const left = conn.wait_disconnected(60s);
        MESSAGE("loss: the client's disconnect " << std::string{left ? "arrived" : "did not arrive"} << " within "
                                                 << ms_since(t1) << " ms");
        CHECK(left);
    }

    TEST_CASE("loss client") {
        auto conn = connect_retrying(loss_port, options(7, 67ms));
        auto const n = message_count();
        steady::time_point last_ok;
        std::size_t done = 0;
        auto const t0 = steady::now();
        auto failed = stream(conn, n, 30000ms, last_ok, done, [](std::size_t) {});
        REQUIRE_MESSAGE(!failed, "SEND " << done << " failed: " << describe(*failed));
        CHECK(done == n);
        MESSAGE("loss: " << done << " SENDs completed in order in " << ms_since(t0) / 1000.0 << " s");
        // An explicit disconnect waits for the peer's DREP (or the CM's DREQ retries to run out), so
        // the DREQ is resent if lost; the destructor alone destroys the id at once, which can cancel
        // its DREQ before it left.
        auto const t1 = steady::now();
        CHECK_NOTHROW(conn.disconnect(30s));
        MESSAGE("loss: disconnect() returned after " << ms_since(t1) << " ms");
    }

    // ---- link down mid-stream ----------------------------------------------------------------
    TEST_CASE("link server") {
        std::optional<receiver> rx_side;
        {
            cm::listener<rx::rc> server{cm::address::resolve(env("RDMACXX_ADDR"), link_port)};
            auto req = server.get_request(120s);
            auto conn = req.accept<rx::rc, rx::event_driven>(options(fault_retries, fault_timeout), {}, [&](conn_t& c) {
                rx_side.emplace(c);
                rx_side->post_all();
            });
            rx_side->attach(conn);
            auto failed = rx_side->run(500, 30s);
            REQUIRE(!failed);
            REQUIRE(rx_side->got == 500);
            MESSAGE("link: 500 messages received in order, every byte checked; taking eth0 down for 8 s");
            REQUIRE(run("ip link set eth0 down") == 0);
            std::this_thread::sleep_for(8s);
            REQUIRE(run("ip link set eth0 up") == 0);
            // What this side's CM says of the connection the client gave up on: its DREQ (sent
            // when the client destroyed its side) arrives if the CM still retries it.
            auto const t0 = steady::now();
            bool const ended = conn.wait_disconnected(20s);
            MESSAGE("link: after the link came back, the CM "
                    << std::string{ended ? "reported `disconnected`" : "reported nothing"} << " within " << ms_since(t0)
                    << " ms");
            if (!ended) {
                // Then the traffic tells: a SEND to the client's destroyed QP is never ACKed.
                slots out(conn.pd(), 1);
                conn.qp().post(rx::send{out.slot(0, 64)}.id(1));
                auto const t1 = steady::now();
                std::optional<rx::work_completion> wc;
                while (!wc || wc->is_recv())
                    REQUIRE((wc = conn.cq().wait_one(detection_bound(fault_timeout, fault_retries) + 5s)));
                MESSAGE("link: this side's SEND then completed with " << describe(*wc) << " after " << ms_since(t1)
                                                                      << " ms");
                CHECK(wc->status() == IBV_WC_RETRY_EXC_ERR);
            }
            rx_side.reset();
        }
        // A new connection works: one message of 3 path MTUs each way, every byte checked.
        cm::listener<rx::rc> server{cm::address::resolve(env("RDMACXX_ADDR"), relink_port)};
        auto conn = server.get_request(120s).accept<rx::rc, rx::event_driven>(options(fault_retries, fault_timeout));
        slots buf(conn.pd(), 2);
        conn.qp().post_recv(rx::recv{buf.slot(0)}.id(0));
        // Posted after the accept: the client's SEND may be RNR-NAKed first (its RNR retries are
        // infinite, options()).
        auto wc = conn.cq().wait_one(30s);
        REQUIRE(wc.has_value());
        REQUIRE(wc->ok());
        REQUIRE(wc->byte_len() == 3072);
        CHECK(mismatch(buf.raw(0, 3072), 77) == 3072);
        fill(buf.raw(1, 3072), 78);
        conn.qp().post(rx::send{buf.slot(1, 3072)}.id(1));
        wc = conn.cq().wait_one(30s);
        REQUIRE(wc.has_value());
        REQUIRE(wc->ok());
        CHECK(conn.wait_disconnected(60s));
        MESSAGE("link: a new connection after the link came back: 3072 bytes each way, every byte checked");
    }

    TEST_CASE("link client") {
        auto const bound = detection_bound(fault_timeout, fault_retries);
        char const* driver = std::getenv("RDMACXX_CM_DRIVER");
        MESSAGE("link: the client connects through the " << std::string{driver != nullptr ? driver : "blocking"}
                                                         << " driver");
        {
            std::optional<conn_t> conn{connect_retrying(link_port, options(fault_retries, fault_timeout))};
            expect_retry_exceeded(*conn, bound, "link");
            auto const t0 = steady::now();
            conn.reset();
            MESSAGE("link: the connection's destructor returned in " << ms_since(t0) << " ms");
        }
        // A new connection once the link is back (node 2 brings it up after 8 s).
        auto conn = connect_retrying(relink_port, options(fault_retries, fault_timeout), 120s);
        slots buf(conn.pd(), 2);
        conn.qp().post_recv(rx::recv{buf.slot(1)}.id(1));
        fill(buf.raw(0, 3072), 77);
        conn.qp().post(rx::send{buf.slot(0, 3072)}.id(0));
        int seen = 0;
        while (seen < 2) {
            auto wc = conn.cq().wait_one(30s);
            REQUIRE(wc.has_value());
            REQUIRE(wc->ok());
            if (wc->is_recv()) {
                REQUIRE(wc->byte_len() == 3072);
                CHECK(mismatch(buf.raw(1, 3072), 78) == 3072);
            }
            ++seen;
        }
        MESSAGE("link: a new connection after the link came back: 3072 bytes each way, every byte checked");
    }

    // ---- the peer process killed -------------------------------------------------------------
    TEST_CASE("kill server") {
        cm::listener<rx::rc> server{cm::address::resolve(env("RDMACXX_ADDR"), kill_port)};
        auto conn = server.get_request(120s).accept<rx::rc, rx::event_driven>(options(fault_retries, fault_timeout));
        std::cout << "kill: accepted; posting no receive, waiting to be killed" << std::endl;
        std::this_thread::sleep_for(100s);
        FAIL("not killed within 100 s");
    }

    TEST_CASE("kill client") {
        std::optional<conn_t> conn{connect_retrying(kill_port, options(fault_retries, fault_timeout))};
        constexpr std::size_t receives = 4;
        slots buf(conn->pd(), receives + 1);
        for (std::size_t k = 0; k < receives; ++k)
            conn->qp().post_recv(rx::recv{buf.slot(k)}.id(100 + k));
        // The server posts no receive and RNR-NAKs this SEND forever (rnr_retry 7): in flight.
        conn->qp().post(rx::send{buf.slot(receives, 3072)}.id(7));
        std::this_thread::sleep_for(500ms);
        REQUIRE(conn->state() == cm::connection_state::established);
        constexpr auto bound = 20s; // ssh's own 1-3 s, then the dead process's DREQ at once
        auto const t0 = steady::now();
        REQUIRE(run(env("RDMACXX_SSH") + " " + env("RDMACXX_FAULT_PEER") + " pkill -9 -x fault_test") == 0);
        double const killed_ms = ms_since(t0);
        std::vector<rx::work_completion> got;
        while (got.size() < receives + 1 && steady::now() < t0 + bound)
            if (auto wc = conn->cq().wait_one(500ms)) got.push_back(*wc);
        double const all_ms = ms_since(t0);
        bool const ended = conn->wait_disconnected(5000ms);
        double const ended_ms = ms_since(t0);
        REQUIRE_MESSAGE(got.size() == receives + 1, "only " << got.size() << " of " << receives + 1
                                                            << " WRs completed within " << bound.count() << " s");
        // The receives are flushed. The SEND was being RNR-NAKed; once the peer's QP is gone
        // its retransmissions go unanswered, so it ends flushed when the DREQ of the dead
        // process's kernel moves the QP to ERR first, or with IBV_WC_RETRY_EXC_ERR when its ACK
        // timeout × retries runs out first (a busy host can delay the DREQ's handling that long).
        for (auto const& wc : got) {
            CAPTURE(wc.wr_id());
            if (wc.wr_id() == 7)
                CHECK((wc.status() == IBV_WC_WR_FLUSH_ERR || wc.status() == IBV_WC_RETRY_EXC_ERR));
            else
                CHECK(wc.status() == IBV_WC_WR_FLUSH_ERR);
        }
        CHECK(ended);
        CHECK(all_ms <= std::chrono::duration<double, std::milli>(bound).count());
        auto const t1 = steady::now();
        conn.reset();
        MESSAGE("kill: kill -9 over ssh returned after "
                << killed_ms << " ms; all " << got.size() << " WRs flushed " << all_ms << " ms after the ssh started, "
                << "CM `disconnected` by " << ended_ms << " ms (bound " << bound.count()
                << " s); destructor returned in " << ms_since(t1) << " ms");
    }

    // ---- the peer node powered off -----------------------------------------------------------
    TEST_CASE("poweroff server") {
        cm::listener<rx::rc> server{cm::address::resolve(env("RDMACXX_ADDR"), poweroff_port)};
        std::optional<receiver> rx_side;
        auto req = server.get_request(120s);
        auto conn = req.accept<rx::rc, rx::event_driven>(options(fault_retries, fault_timeout), {}, [&](conn_t& c) {
            rx_side.emplace(c);
            rx_side->post_all();
        });
        rx_side->attach(conn);
        (void)rx_side->run(1000000, 100s);
        FAIL("still running 100 s after the last message");
    }

    TEST_CASE("poweroff client") {
        auto const bound = detection_bound(fault_timeout, fault_retries);
        std::optional<conn_t> conn{connect_retrying(poweroff_port, options(fault_retries, fault_timeout))};
        expect_retry_exceeded(*conn, bound, "poweroff", [](std::size_t done) {
            if (done == 500)
                (void)run("timeout 5 " + env("RDMACXX_SSH") + " " + env("RDMACXX_FAULT_PEER") +
                          " 'echo o >/proc/sysrq-trigger' >/dev/null 2>&1 &");
        });
        auto const t0 = steady::now();
        conn.reset();
        MESSAGE("poweroff: the connection's destructor returned in " << ms_since(t0) << " ms");
    }

    // ---- one-sided operations across the wire (what the examples and mpi_tests do not cover) --
    // 198.18.0.250 is on the nodes' segment, but no node has it: nothing answers the ARP
    // request, and the kernel's address resolution gives up when its timeout runs out.
    TEST_CASE("nobody at the address") {
        constexpr auto bound = 500ms;
        cm::connection_options opt;
        opt.deadlines.resolve_address = bound;
        auto const t0 = steady::now();
        try {
            auto c = cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve("198.18.0.250", 18610), opt);
            FAIL("connected to an address no node has");
        } catch (cm::timeout_error const& e) {
            double const ms = ms_since(t0);
            MESSAGE("nobody: " << std::string{to_string(e.step())} << " timed out after " << ms
                               << " ms (timeout 500 ms): " << std::string{e.what()});
            CHECK(e.step() == cm::step::resolve_address);
            CHECK(ms >= 400.0);
            CHECK(ms < 500.0 + 1000.0 + 2000.0); // the step's timeout, the CM's event slack, scheduling
        }
    }

    TEST_CASE("ops server") {
        cm::listener<rx::rc> server{cm::address::resolve(env("RDMACXX_ADDR"), ops_port)};
        auto req = server.get_request(120s);
        std::vector<std::byte> target(4096);
        std::vector<std::uint64_t> word{42};
        std::optional<rx::memory_region> target_mr, word_mr;
        std::optional<slots> in;
        std::array<std::byte, 2 * rx::remote_span<std::byte>::wire_size> pdata{};
        auto opt = options(7, 67ms);
        opt.settings.remote_access = rx::all_remote; // the client WRITEs and runs atomics here
        auto conn = req.accept<rx::rc, rx::event_driven>(opt, {}, [&](conn_t& c) {
            target_mr.emplace(c.pd().register_memory(std::span{target}, rx::all_remote));
            word_mr.emplace(c.pd().register_memory(std::span{word}, rx::all_remote));
            auto const a = target_mr->remote().to_bytes();
            auto const b = word_mr->remote<std::uint64_t>().to_bytes();
            std::copy(a.begin(), a.end(), pdata.begin());
            std::copy(b.begin(), b.end(), pdata.begin() + static_cast<std::ptrdiff_t>(a.size()));
            in.emplace(c.pd(), 2);
            c.qp().post_recv(rx::recv{in->slot(0, 0)}.id(0));  // for the WRITE with immediate
            c.qp().post_recv(rx::recv{in->slot(1, 64)}.id(1)); // "done"
            return pdata;                                      // the accept's private data
        });
        // The WRITE with immediate: 3000 bytes (3 path MTUs) in place, its immediate with it.
        auto wc = conn.cq().wait_one(60s);
        REQUIRE(wc.has_value());
        REQUIRE_MESSAGE(wc->ok(), describe(*wc));
        CHECK(wc->opcode() == IBV_WC_RECV_RDMA_WITH_IMM);
        CHECK(wc->has_imm());
        CHECK(wc->imm_data() == 0xC0FFEEU);
        CHECK(wc->byte_len() == 3000);
        CHECK(mismatch(std::span{target}.first(3000), 5) == 3000);
        CHECK(std::all_of(target.begin() + 3000, target.end(), [](std::byte b) { return b == std::byte{0}; }));
        // After the compare-and-swaps and the fetch-and-add: 42 -> 7 (swapped), 7 (not: compare
        // 42 fails), 7 + 5 = 12.
        wc = conn.cq().wait_one(60s);
        REQUIRE(wc.has_value());
        REQUIRE_MESSAGE(wc->ok(), describe(*wc));
        CHECK(word[0] == 12);
        MESSAGE("ops: WRITE with immediate of 3000 bytes checked byte for byte; atomics left " << word[0]);
        CHECK(conn.wait_disconnected(60s));
    }

    TEST_CASE("ops client") {
        auto conn = connect_retrying(ops_port, options(7, 67ms));
        auto const pd = conn.peer_private_data();
        REQUIRE(pd.size() >= 64);
        auto const target = rx::remote_span<std::byte>::from_bytes(pd.first(32));
        auto const word = rx::remote_span<std::uint64_t>::from_bytes(pd.subspan(32, 32));
        REQUIRE(target.size() == 4096);
        REQUIRE(word.size() == 1);
        slots out(conn.pd(), 1);
        fill(out.raw(0, 3000), 5);
        std::vector<std::uint64_t> results(3, 0);
        auto results_mr = conn.pd().register_memory(std::span{results}, rx::access::local_write);
        auto next = [&] {
            auto wc = conn.cq().wait_one(60s);
            REQUIRE(wc.has_value());
            REQUIRE_MESSAGE(wc->ok(), describe(*wc));
        };
        conn.qp().post(rx::write_imm{out.slot(0, 3000), target.first(3000), 0xC0FFEEU}.id(1));
        next();
        conn.qp().post(rx::compare_swap{results_mr.span<std::uint64_t>().subspan(0, 1), word, 42, 7}.id(2));
        next();
        conn.qp().post(rx::compare_swap{results_mr.span<std::uint64_t>().subspan(1, 1), word, 42, 9}.id(3));
        next();
        conn.qp().post(rx::fetch_add{results_mr.span<std::uint64_t>().subspan(2, 1), word, 5}.id(4));
        next();
        CHECK(results[0] == 42); // swapped
        CHECK(results[1] == 7);  // compare failed: the value as it was, nothing swapped
        CHECK(results[2] == 7);
        conn.qp().post(rx::send{out.slot(0, 8)}.id(5));
        next();
        MESSAGE("ops: WRITE with immediate, compare-and-swap (hit and miss), fetch-and-add across the wire");
    }
}
