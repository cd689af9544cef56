// Device tests of the defaults a user gets, and of cm::listener's moves.
//
// A connection made with nothing but the defaults, whose peer's QP vanishes without a word
// (destroyed, or moved to RESET: no DREQ, no ACK, no NAK), must complete the survivor's SEND with
// IBV_WC_RETRY_EXC_ERR within the bound that its default ACK timeout and retry count imply: on
// the verbs path (queue_pair::connect) and on the CM path (cm::connect / cm::listener), from
// either side. rxe never runs out of a retry count of 7: every wait here has a deadline, so such
// defaults fail the test at the deadline instead of hanging it.
//
// A live listener move-assigned into another live one (the implicit assignment destroyed the
// channel before the id on it) keeps accepting, and the port of the replaced one is free again.
#include "fixture.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

static_assert(std::is_nothrow_move_constructible_v<cm::listener<rx::rc>>);
static_assert(std::is_nothrow_move_assignable_v<cm::listener<rx::rc>>);
static_assert(!std::is_copy_constructible_v<cm::listener<rx::rc>>);
static_assert(std::is_nothrow_move_constructible_v<cm::connection<rx::rc, rx::busy_poll>>);
static_assert(std::is_nothrow_move_assignable_v<cm::connection<rx::rc, rx::busy_poll>>); // written: tears down first
static_assert(std::is_nothrow_move_constructible_v<cm::multicast_group<rx::busy_poll>>);
static_assert(std::is_nothrow_move_assignable_v<cm::multicast_group<rx::busy_poll>>);

// Helpers in a namespace of their own: unity builds put several test files in one translation
// unit, where anonymous namespaces merge.
namespace dead_peer_test {

// No default may take longer than this to detect a dead peer; past it the test gives up (a retry
// count of 7 on rxe would wait for ever).
constexpr std::chrono::seconds give_up{30};

double ms_since(steady::time_point t0) { return std::chrono::duration<double, std::milli>(steady::now() - t0).count(); }

// The bound the settings imply (`rx::dead_peer_bound`: ACK timeout × (retry count + 1)) with the
// allowance for rxe in the tools/softroce VM, as tests/multinode/fault_test.cpp: rxe's
// retransmit timer counts jiffies (10 ms per try covers HZ >= 100), and a TCG guest on a loaded
// 2-core host is not always running when its timer is due (3 s).
std::chrono::milliseconds allowed(rx::ack_timeout t, std::uint8_t retry_count) {
    auto const per_try = std::chrono::ceil<std::chrono::milliseconds>(t.duration()) + 10ms;
    return per_try * (retry_count + 1) + 3000ms;
}

ibv_qp_attr query(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    REQUIRE(::ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &init) == 0);
    return attr;
}

// The QP carries the settings the defaults promise: one `qp_settings` on both paths.
void check_defaults_applied(ibv_qp* qp, char const* which) {
    rx::qp_settings const defaults;
    CAPTURE(std::string{which});
    CHECK(defaults.retry_count < rx::max_retry_count); // finite on rxe too
    ibv_qp_attr const attr = query(qp);
    CHECK(attr.qp_state == IBV_QPS_RTS);
    CHECK(attr.timeout == defaults.local_ack_timeout.code());
    CHECK(attr.retry_cnt == defaults.retry_count);
}

// A message from `from` to `to` arrives: the connection works before its peer vanishes.
template <class From, class To>
void exchange(From& from, rx::completion_queue<rx::busy_poll>& from_cq, To& to,
              rx::completion_queue<rx::busy_poll>& to_cq, rx::protection_domain& from_pd,
              rx::protection_domain& to_pd) {
    test::buffer out(from_pd, 64, std::byte{0x5a}), in(to_pd, 64);
    to.post_recv(rx::recv{in.span()}.id(1));
    from.post(rx::send{out.span()}.id(2));
    auto const sent = from_cq.wait_one(10s);
    auto const got = to_cq.wait_one(10s);
    REQUIRE(sent.has_value());
    REQUIRE(got.has_value());
    CHECK(sent->ok());
    CHECK(got->ok());
    CHECK(in.bytes_[63] == std::byte{0x5a});
}

// Posts a SEND on `qp`, whose peer is gone, and checks that it completes with
// IBV_WC_RETRY_EXC_ERR within the bound the defaults imply; never waits past `give_up`.
template <class QueuePair>
void send_to_the_dead(QueuePair& qp, rx::completion_queue<rx::busy_poll>& cq, rx::protection_domain& pd,
                      char const* path) {
    // What the defaults gave the QP (check_defaults_applied compares them with the defaults).
    ibv_qp_attr const attr = query(qp.native_handle());
    rx::ack_timeout const ack = rx::ack_timeout::from_code(attr.timeout);
    std::uint8_t const retries = attr.retry_cnt;
    auto const nominal = std::chrono::duration<double, std::milli>(rx::dead_peer_bound(ack, retries));
    auto const bound = allowed(ack, retries);

    test::buffer msg(pd, 64);
    auto const t0 = steady::now();
    qp.post(rx::send{msg.span()}.id(42));
    auto const wc = cq.wait_one(give_up);
    double const took = ms_since(t0);

    REQUIRE_MESSAGE(wc.has_value(), std::string{path} << ": the SEND to a dead peer did not complete within "
                                                      << give_up.count() << " s (defaults: ACK timeout code "
                                                      << int{ack.code()} << ", retry count " << int{retries}
                                                      << "; rxe retransmits a count of 7 for ever)");
    MESSAGE(std::string{path} << ": SEND to a dead peer completed with "
                              << std::string{::ibv_wc_status_str(wc->status())} << " after " << took
                              << " ms; defaults: ACK timeout " << ack.duration().count() / 1000 << " us (code "
                              << int{ack.code()} << "), retry count " << int{retries} << " -> bound " << nominal.count()
                              << " ms, allowed " << bound.count() << " ms");
    CHECK(wc->status() == IBV_WC_RETRY_EXC_ERR);
    CHECK(wc->wr_id() == 42);
    CHECK(took <= static_cast<double>(bound.count()));
    CHECK(took >= 0.5 * nominal.count()); // retried, not refused at once
}

// An established pair: `server` accepted on `listener`, `client` connected, both with default
// options. Every wait bounded (accept 20 s; connect within its default step timeouts).
struct cm_pair {
    explicit cm_pair(cm::listener<rx::rc>& listener) {
        auto const port = listener.port();
        test::background t([&] { client.emplace(cm::connect<rx::rc, rx::busy_poll>(test::device_address(port))); });
        server.emplace(listener.get_request(20s).accept<rx::rc, rx::busy_poll>());
        t.join();
    }
    std::optional<cm::connection<rx::rc, rx::busy_poll>> client, server;
};

TEST_SUITE("device") {
    TEST_CASE("defaults: on the verbs path a SEND to a peer whose QP vanished fails with RETRY_EXC_ERR in bound") {
        rx::context ctx = test::open_test_device();
        rx::end_port port{ctx};
        rx::protection_domain pd{ctx};
        rx::completion_queue<rx::busy_poll> cq_a{ctx, 64}, cq_b{ctx, 64};
        rx::queue_pair<rx::rc, rx::busy_poll> a{pd, cq_a, cq_a};
        std::optional<rx::queue_pair<rx::rc, rx::busy_poll>> b{std::in_place, pd, cq_b, cq_b};
        a.connect(port, b->local_endpoint(port)); // nothing but the defaults
        b->connect(port, a.local_endpoint(port));
        check_defaults_applied(a.native_handle(), "verbs QP");
        exchange(a, cq_a, *b, cq_b, pd, pd);

        SUBCASE("the peer's QP destroyed") { b.reset(); }
        SUBCASE("the peer's QP moved to RESET") { b->reset(); }
        send_to_the_dead(a, cq_a, pd, "verbs path");
    }

    TEST_CASE("defaults: on the CM path a SEND to a peer whose QP vanished without a DREQ fails with RETRY_EXC_ERR "
              "in bound") {
        cm::listener<rx::rc> listener{test::device_address()};
        cm_pair p{listener};
        auto& client = *p.client;
        auto& server = *p.server;
        check_defaults_applied(client.qp().native_handle(), "CM, active side");
        check_defaults_applied(server.qp().native_handle(), "CM, passive side");

        SUBCASE("the survivor connected") {
            exchange(client.qp(), client.cq(), server.qp(), server.cq(), client.pd(), server.pd());
            server.qp().reset(); // no rdma_disconnect: no DREQ
            send_to_the_dead(client.qp(), client.cq(), client.pd(), "CM path, survivor connected");
            CHECK(server.state() == cm::connection_state::established); // its CM heard nothing
        }
        SUBCASE("the survivor accepted") {
            exchange(server.qp(), server.cq(), client.qp(), client.cq(), server.pd(), client.pd());
            client.qp().reset();
            send_to_the_dead(server.qp(), server.cq(), server.pd(), "CM path, survivor accepted");
            CHECK(client.state() == cm::connection_state::established);
        }
    }

    TEST_CASE("cm listener: a live listener move-assigned into another keeps accepting; the replaced port is free") {
        cm::listener<rx::rc> a{test::device_address()};
        cm::listener<rx::rc> b{test::device_address()};
        std::uint16_t const a_port = a.port(), b_port = b.port();
        REQUIRE(a_port != b_port);

        a = std::move(b); // a's id is destroyed before its channel, then b's channel and id are a's
        CHECK(a.port() == b_port);
        {
            cm::listener<rx::rc> again{test::device_address(a_port)}; // the replaced id let go of its port
            CHECK(again.port() == a_port);
        }
        cm::listener<rx::rc> c{std::move(a)}; // by construction, then back into the emptied one
        a = std::move(c);
        CHECK(a.port() == b_port);

        // Accept on the result, then move the accepted connection and use it.
        cm_pair p{a};
        cm::connection<rx::rc, rx::busy_poll> moved{std::move(*p.server)};
        p.server.reset(); // the moved-from connection owns nothing
        exchange(p.client->qp(), p.client->cq(), moved.qp(), moved.cq(), p.client->pd(), moved.pd());
        exchange(moved.qp(), moved.cq(), p.client->qp(), p.client->cq(), moved.pd(), p.client->pd());
        p.client->disconnect(20s);
        CHECK(moved.wait_disconnected(20s));

        // And a second connection on the same moved listener.
        cm_pair second{a};
        exchange(second.client->qp(), second.client->cq(), second.server->qp(), second.server->cq(),
                 second.client->pd(), second.server->pd());
    }
}

} // namespace dead_peer_test
