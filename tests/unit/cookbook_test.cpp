// The snippets of docs/cm-cookbook.md, compiled as written (each in a function of its own), and
// the figures the cookbook states, checked; plus the QoS argument checks and AF_IB addresses,
// which need no device.
#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/cm/listener.hpp"

#include "rdmacxx/ah.hpp"
#include "rdmacxx/qp_settings.hpp"
#include "rdmacxx/timeouts.hpp"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <span>
#include <string>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace cookbook {

// "The retry and timeout knobs"
inline std::chrono::nanoseconds knobs(cm::connection_options& out) {
    rx::ack_timeout const ack = 50ms; // rounds up to 4.096 µs × 2^14 = 67.1 ms (code 14)
    cm::connection_options opt;
    opt.settings.local_ack_timeout = ack; // this QP as a sender: wait for an ACK before retransmitting
    opt.settings.retry_count = 3;         // this QP as a sender: retransmissions
    opt.settings.rnr_retry_count = 6;     // this QP as a sender: retries after an RNR NAK
    opt.settings.min_rnr_timer = 1280us;  // this QP as a receiver: the back-off its RNR NAKs ask
    auto const dead_peer_bound = ack.duration() * (opt.settings.retry_count + 1); // about 268 ms
    out = opt;
    return dead_peer_bound;
}

// "READ depth"
inline rx::qp_settings read_depth() {
    rx::qp_settings read_heavy;
    read_heavy.initiator_depth = 16;     // READs this side may have in flight
    read_heavy.responder_resources = 16; // READs from the peer this side serves at once
    return read_heavy;
}

// "Tearing down under load"
template <class Connection>
void close_under_load(Connection& conn, std::size_t in_flight) {
    conn.disconnect(5s); // QP in ERR: the rest flush
    std::array<rx::work_completion, 16> wcs;
    auto const deadline = std::chrono::steady_clock::now() + 5s;
    while (in_flight > 0 && std::chrono::steady_clock::now() < deadline)
        in_flight -= conn.cq().poll(std::span{wcs}); // successes and IBV_WC_WR_FLUSH_ERR alike
} // then let `conn` go: QP, CQ, PD and id are destroyed in order
template void close_under_load(cm::connection<rx::rc, rx::busy_poll>&, std::size_t);
template void close_under_load(cm::connection<rx::uc, rx::event_driven>&, std::size_t);

// "QoS options" (a server; needs a device, so compiled, not run)
[[maybe_unused]] inline void restartable_server() {
    cm::listener<rx::rc> server{cm::address::any_ipv4(7471),
                                cm::listener_options{.reuse_address = true, .type_of_service = 0x68}};
}

inline rx::address_qos qos_fields(rx::qp_settings& out) {
    rx::qp_settings qos;
    qos.service_level = 3;    // SL, 0 … 15
    qos.traffic_class = 0xb8; // DSCP 46 (EF)
    qos.flow_label = 0x12345; // 20 bits
    rx::address_qos const ah_qos{.service_level = 3, .traffic_class = 0xb8, .flow_label = 0x12345};
    out = qos;
    return ah_qos;
}

} // namespace cookbook

TEST_CASE("cookbook: the knobs' figures are what the text says") {
    cm::connection_options opt;
    auto const bound = cookbook::knobs(opt);
    CHECK(opt.settings.local_ack_timeout.code() == 14);
    CHECK(opt.settings.min_rnr_timer.code() == 14);
    CHECK(bound == 4 * rx::ack_timeout::unit * (1 << 14));
    CHECK(bound > 268ms);
    CHECK(bound < 269ms);
    CHECK(cookbook::read_depth().initiator_depth == 16);
    rx::qp_settings qos;
    auto const ah = cookbook::qos_fields(qos);
    CHECK(qos.flow_label == ah.flow_label);
    CHECK(qos.traffic_class == 0xb8);
}

TEST_CASE("qos: a flow label over 20 bits or an SL over 15 is refused before the device") {
    CHECK_NOTHROW(rx::detail::check_qos(rx::max_flow_label, 15, "a test"));
    CHECK_THROWS_AS(rx::detail::check_qos(rx::max_flow_label + 1, 0, "a test"), rx::argument_error);
    CHECK_THROWS_AS(rx::detail::check_qos(0, 16, "a test"), rx::argument_error);
    CHECK(rx::max_flow_label == (1u << 20) - 1);
}

TEST_CASE("cm::address::ib: an AF_IB address with the GID, the port in the TCP service-ID range and the P_Key") {
    rx::gid const g = rx::gid::parse("fe80::1:2:3:4");
    cm::address const a = cm::address::ib(g, 7471);
    CHECK(a.family() == AF_IB);
    CHECK(a.port() == 7471);
    CHECK(a.to_string() == "AF_IB [fe80::1:2:3:4]:7471");
    auto const* sib = reinterpret_cast<sockaddr_ib const*>(a.native());
    CHECK(be64toh(sib->sib_sid) == (RDMA_IB_IP_PS_TCP | 7471));
    CHECK(ntohs(sib->sib_pkey) == 0xffff);
}
