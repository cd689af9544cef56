// Management datagrams over a real wire (rdmacxx/mad.hpp): umad ports, agents, RPCs with
// timeouts and retries, and the MAD error family, with real MADs between real kernels.
//
// Roles (run by name, -tc=):
//   mad loopback   one node (tools/check's device suite): the responders below in threads and
//                  the requester against this node's own link-local GID; then a PathRecord
//                  from the test SA connects an RC pair (its path MTU) that moves checked bytes;
//   mad responder  node 2 (tools/nodes-wire): serves, until a stop request or 150 s, a ping
//                  class (vendor class 0x32 with OUI 0x001405, as ibping) whose replies carry
//                  the request's payload inverted, and does not answer attribute 0xDEAD; and a
//                  test SA (class 0x03 version 2) that knows PathRecords to its own GID and to
//                  its caller's, and answers ERR_NO_RECORDS for any other DGID;
//   mad requester  node 1: against node 2's link-local GID (RDMACXX_MAD_PEER_GID) and
//                  IPv4-mapped GID (RDMACXX_MAD_PEER_V4_GID): a Get/GetResp round trip with its
//                  payload checked (and round-trip figures), no answer → mad_timeout_error within
//                  its bound (measured), PerfMgt (no agent there) → the kernel's 0x000C as a
//                  mad_error, a PathRecord resolved from the test SA (resolve_path) and applied
//                  to a QP's settings, its ERR_NO_RECORDS → sa_path_not_found_error, the
//                  IPv4-mapped GID's dropped reply, and
//                  dump_detailed level 2 against the packets.
// Every wait is bounded.
#include "rdmacxx/mad.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace mad = rdmacxx::mad;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

constexpr std::uint8_t ping_class = 0x32;
constexpr std::uint32_t ping_oui = 0x001405;
constexpr std::uint16_t attr_echo = 0x0000;
constexpr std::uint16_t attr_silent = 0xdead;
constexpr std::uint16_t attr_stop = 0xffff;

std::string env(char const* name) {
    char const* v = std::getenv(name);
    if (v == nullptr || *v == '\0')
        throw std::runtime_error(std::string{name} + " is not set: run through tools/nodes-wire");
    return v;
}

double ms(steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The ping class: the reply's data is the request's, each byte inverted; 0xDEAD is never answered.
void serve_ping(std::atomic<bool>& stop, std::atomic<int>& ready, steady::time_point until) {
    mad::port p{""};
    auto a = mad::agent::responder(p, ping_class, 1, {mad::method::get}, ping_oui);
    ++ready;
    while (!stop && steady::now() < until) {
        auto got = a.receive(50ms);
        if (!got) continue;
        mad::mad_header const h = got->mad.header();
        if (h.attribute_id == attr_silent) continue;
        mad::packet reply = mad::make_response(got->mad);
        for (auto& b : reply.data())
            b = ~b;
        a.respond(*got, reply);
        if (h.attribute_id == attr_stop) stop = true;
    }
}

// The test SA: PathRecords to its own GIDs and to the caller's; ERR_NO_RECORDS for others.
void serve_sa(std::atomic<bool>& stop, std::atomic<int>& ready, steady::time_point until) {
    mad::port p{""};
    auto a = mad::agent::responder(p, mad::mgmt_class::subn_adm, 2, {mad::method::get});
    std::vector<rx::gid> own;
    for (auto const& e : p.where().context().gid_table(p.where().port_num()))
        own.push_back(e.gid);
    ++ready;
    while (!stop && steady::now() < until) {
        auto got = a.receive(50ms);
        if (!got) continue;
        mad::mad_header const h = got->mad.header();
        if (h.attribute_id != mad::path_record::id) {
            a.respond(*got, mad::make_response(got->mad, 0x000c));
            continue;
        }
        auto const query = got->mad.attribute<mad::path_record>();
        bool const known = std::find(own.begin(), own.end(), query.dgid) != own.end() || query.dgid == got->from.gid;
        if (!known) {
            a.respond(*got, mad::make_response(got->mad, static_cast<std::uint16_t>(mad::sa_status::no_records << 8)));
            continue;
        }
        mad::packet reply = mad::make_response(got->mad);
        mad::path_record r;
        r.dgid = query.dgid;
        r.sgid = got->from.gid;
        r.hop_limit = 1;
        r.reversible = 1;
        r.num_path = 1;
        r.p_key = 0xffff;
        r.mtu_selector = 2;
        r.mtu = 3; // 1024 bytes
        r.rate_selector = 2;
        r.rate = 3;
        r.packet_life_time = 14;
        reply.set_attribute(r);
        a.respond(*got, reply);
    }
}

struct responders {
    std::atomic<bool> stop{false};
    std::atomic<int> ready{0};
    std::thread ping, sa;
    explicit responders(std::chrono::seconds limit) {
        auto const until = steady::now() + limit;
        ping = std::thread([this, until] { serve_ping(stop, ready, until); });
        sa = std::thread([this, until] { serve_sa(stop, ready, until); });
        auto const t0 = steady::now();
        while (ready < 2 && steady::now() - t0 < 10s)
            std::this_thread::sleep_for(10ms);
    }
    responders(responders const&) = delete;
    responders& operator=(responders const&) = delete;
    // Until both have stopped: at the stop request, or at their time limit.
    void wait() {
        if (ping.joinable()) ping.join();
        if (sa.joinable()) sa.join();
    }
    ~responders() {
        stop = true;
        wait();
    }
};

mad::address to(rx::gid const& g) {
    mad::address a;
    a.gid = g;
    return a;
}

// The requester's checks against a peer serving the roles above at `peer` (link-local GID).
void requester(rx::gid const& peer, std::optional<rx::gid> const& peer_v4) {
    mad::port p{""};
    mad::agent ping(p, ping_class, 1, ping_oui);
    std::cout << "requester on " << p.to_string() << ", peer " << peer << "\n";

    // The peer's agents may not be registered yet: the first ping is retried for 60 s.
    {
        auto const t0 = steady::now();
        for (;;) {
            try {
                (void)ping.call(ping.make_request(mad::method::get, attr_echo), to(peer));
                break;
            } catch (mad::mad_error const&) {
                if (steady::now() - t0 > 60s) throw;
                std::this_thread::sleep_for(200ms);
            }
        }
    }

    // A Get/GetResp round trip with its payload checked; figures over 50 round trips.
    {
        std::vector<double> rtt;
        for (int i = 0; i < 50; ++i) {
            mad::packet q = ping.make_request(mad::method::get, attr_echo);
            auto data = q.data();
            for (std::size_t k = 0; k < data.size(); ++k)
                data[k] = static_cast<std::byte>((k * 7 + static_cast<std::size_t>(i)) & 0xffU);
            auto const t0 = steady::now();
            mad::packet const r = ping.call(q, to(peer));
            rtt.push_back(ms(steady::now() - t0));
            mad::mad_header const rh = r.header();
            CHECK(rh.method == mad::method::get_resp);
            CHECK(rh.mgmt_class == ping_class);
            CHECK(r.oui() == ping_oui);
            auto const back = r.data();
            bool same = back.size() == data.size();
            for (std::size_t k = 0; same && k < back.size(); ++k)
                same = back[k] == ~data[k];
            CHECK_MESSAGE(same, "round trip " << i << ": the reply's payload is not the request's inverted");
        }
        std::sort(rtt.begin(), rtt.end());
        std::cout << "MAD RPC round trip over " << rtt.size() << ": min " << rtt.front() << " ms, median "
                  << rtt[rtt.size() / 2] << " ms, max " << rtt.back() << " ms\n";
        CHECK(rtt.back() < 1000.0);
    }

    // No answer: mad_timeout_error after the retries, within the bound.
    {
        mad::rpc_options o;
        o.timeout = 100ms;
        o.retries = 2;
        auto const t0 = steady::now();
        try {
            (void)ping.call(ping.make_request(mad::method::get, attr_silent), to(peer), o);
            FAIL("a request nobody answers returned");
        } catch (mad::mad_timeout_error const& e) {
            double const took = ms(steady::now() - t0);
            std::cout << "no answer: mad_timeout_error after " << took << " ms (3 tries of 100 ms, bound "
                      << o.bound().count() << " ms): " << e.what() << "\n";
            CHECK(e.tries() == 3);
            CHECK(e.code() == std::errc::timed_out);
            CHECK(took >= 290.0);
            CHECK(took <= static_cast<double>(o.bound().count()));
        }
    }

    // PerfMgt: no agent serves it there (rxe has none): the kernel answers 0x000C.
    {
        mad::agent perf(p, mad::mgmt_class::perf_mgt, 1);
        try {
            (void)perf.get<mad::port_counters>(to(peer));
            FAIL("PortCounters from a port without a PerfMgt agent returned");
        } catch (mad::mad_class_error const& e) {
            FAIL("0x000C is not class-specific: " << e.what());
        } catch (mad::mad_error const& e) {
            std::cout << "PerfMgt: " << e.what() << "\n";
            CHECK(e.status() == 0x000c);
            CHECK(std::string{e.what()}.find("got error status 0x000c") != std::string::npos);
            CHECK(std::string{e.what()}.find("method/attribute combination is not supported") != std::string::npos);
            REQUIRE(e.reply());
            CHECK(e.reply()->header().method == mad::method::get_resp);
            // dump_detailed level 2 against the packets: both headers, the Status, the bytes.
            std::ostringstream os;
            e.dump_detailed(os, "E:", 2);
            std::string const d = os.str();
            std::cout << d;
            mad::mad_header const qh = e.request()->header();
            CHECK(d.find("MADHeader MAD_METHOD_GET(1) PerfMgt(4.1) PMPortCounters(18)") != std::string::npos);
            CHECK(d.find("MADHeader MAD_METHOD_GET_RESP(129) PerfMgt(4.1) PMPortCounters(18)") != std::string::npos);
            CHECK(d.find("Status: 0xc\n") != std::string::npos);
            CHECK(d.find("TransactionID: 0x" + rx::detail::hex(qh.transaction_id)) != std::string::npos);
            std::ostringstream hex; // the reply's first 16 bytes, as the dump's hex lines print them
            mad::print_hex(hex, e.reply()->bytes().first(16), "E:       ");
            CHECK(d.find(hex.str()) != std::string::npos);
            CHECK(d.find("  0 01040181 000c0000 ") != std::string::npos);
        }
    }

    // The test SA: a PathRecord resolved and applied to a QP's settings, and ERR_NO_RECORDS →
    // sa_path_not_found_error with the path's context on top.
    {
        mad::agent sa(p, mad::mgmt_class::subn_adm, mad::sa_class_version);
        rx::gid const self = p.source_gid_for(peer).gid;
        mad::path_record const found = mad::resolve_path(sa, to(peer), self, peer);
        CHECK(found.dgid == peer);
        CHECK(found.sgid == self);
        CHECK(found.mtu == 3);
        CHECK(found.p_key == 0xffff);
        rx::qp_settings settings;
        mad::apply(found, settings);
        CHECK(settings.path_mtu == IBV_MTU_1024);
        CHECK(settings.hop_limit == 1);
        rx::gid const nobody = rx::gid::parse("fe80::dead:beef");
        try {
            (void)mad::resolve_path(sa, to(peer), self, nobody);
            FAIL("a PathRecord to nobody was found");
        } catch (mad::sa_path_not_found_error const& e) {
            std::cout << "SA: " << e.what() << "\n";
            CHECK(e.class_status() == mad::sa_status::no_records);
            CHECK(std::string{e.what()}.find("Failed getting a PathRecord from " + self.to_string() +
                                             " to fe80::dead:beef") == 0);
            CHECK(std::string{e.what()}.find("got class specific error 3: ERR_NO_RECORDS") != std::string::npos);
            REQUIRE(e.reply());
            CHECK(e.reply()->header().status == 0x0300);
            CHECK(e.request()->attribute<mad::path_record>().dgid == nobody);
        }
        mad::agent perf(p, mad::mgmt_class::perf_mgt, 1);
        CHECK_THROWS_AS((void)mad::resolve_path(perf, to(peer), self, peer), rx::argument_error);
    }

    // The IPv4-mapped GID: the peer answers, but Linux 6.1 drops the reply; the timeout says so.
    if (peer_v4) {
        mad::rpc_options o;
        o.timeout = 100ms;
        o.retries = 1;
        CHECK(p.source_gid_for(*peer_v4).gid.is_ipv4_mapped());
        try {
            (void)ping.call(ping.make_request(mad::method::get, attr_echo), to(*peer_v4), o);
            std::cout << "IPv4-mapped GID: the reply came (this kernel matches it)\n";
        } catch (mad::mad_timeout_error const& e) {
            std::cout << "IPv4-mapped GID: " << e.what() << "\n";
            CHECK(std::string{e.what()}.find("IPv4-mapped GID") != std::string::npos);
        }
    }

    // Misuse is refused before anything is sent.
    CHECK_THROWS_AS(mad::agent(p, mad::mgmt_class::subn_lid_routed, 1), rx::argument_error);
    CHECK_THROWS_AS(mad::agent(p, 0x33, 1), rx::argument_error);
    CHECK_THROWS_AS(mad::agent(p, ping_class, 2, ping_oui), rx::argument_error);
    {
        mad::agent moved(p, ping_class, 1, ping_oui);
        mad::agent const taker = std::move(moved);
        CHECK(taker.id() >= 0);
        CHECK_THROWS_AS((void)moved.receive(1ms), rx::argument_error); // NOLINT(bugprone-use-after-move)
    }
    mad::rpc_options bad;
    bad.timeout = 0ms;
    CHECK_THROWS_AS((void)ping.call(ping.make_request(mad::method::get, attr_echo), to(peer), bad), rx::argument_error);
    CHECK_THROWS_AS((void)ping.call(ping.make_request(mad::method::get_resp, attr_echo), to(peer)), rx::argument_error);
    mad::address wide = to(peer);
    wide.flow_label = 0x100000; // 21 bits
    CHECK_THROWS_AS((void)ping.call(ping.make_request(mad::method::get, attr_echo), wide), rx::argument_error);
    wide = to(peer);
    wide.gid_index = 4000; // not in the table
    CHECK_THROWS_AS((void)ping.call(ping.make_request(mad::method::get, attr_echo), wide), rx::argument_error);
}

rx::gid own_link_local() {
    mad::port p{""};
    for (auto const& e : p.where().context().gid_table(p.where().port_num()))
        if (e.gid.is_link_local()) return e.gid;
    throw std::runtime_error("no link-local GID on " + p.to_string());
}

} // namespace

// A PathRecord resolved from the test SA, applied to the settings of an RC pair on this node:
// the pair connects with its path MTU (1024 bytes) and moves 3 path MTUs of checked bytes.
void connect_by_path(rx::gid const& self) {
    mad::port p{""};
    mad::agent sa(p, mad::mgmt_class::subn_adm, mad::sa_class_version);
    mad::address sa_at;
    sa_at.gid = self;
    mad::path_record const path = mad::resolve_path(sa, sa_at, self, self);
    rx::qp_settings settings{.remote_access = rx::access::none};
    mad::apply(path, settings);
    REQUIRE(settings.path_mtu == IBV_MTU_1024);

    rx::context& ctx = p.where().context();
    rx::end_port const& port = p.where();
    rx::protection_domain pd(ctx);
    rx::completion_queue<rx::busy_poll> cq_a(ctx, 16), cq_b(ctx, 16);
    rx::queue_pair<rx::rc, rx::busy_poll> a(pd, cq_a, cq_a), b(pd, cq_b, cq_b);
    a.connect(port, b.local_endpoint(port, settings), settings);
    b.connect(port, a.local_endpoint(port, settings), settings);
    CHECK(a.path_mtu_bytes() == 1024);
    CHECK(b.path_mtu_bytes() == 1024);
    std::vector<std::byte> src(3072), dst(3072);
    for (std::size_t i = 0; i < src.size(); ++i)
        src[i] = static_cast<std::byte>((i * 13 + 5) & 0xffU);
    auto src_mr = pd.register_memory(std::span{src}, rx::access::none);
    auto dst_mr = pd.register_memory(std::span{dst}, rx::access::local_write);
    b.post_recv(rx::recv{dst_mr.span()}.id(2));
    a.post(rx::send{src_mr.span<std::byte const>()}.id(1));
    auto const sent = cq_a.wait_one(10s);
    auto const got = cq_b.wait_one(10s);
    REQUIRE(sent);
    REQUIRE(got);
    CHECK(sent->status() == IBV_WC_SUCCESS);
    CHECK(got->status() == IBV_WC_SUCCESS);
    CHECK(got->byte_len() == 3072);
    CHECK(dst == src);
    std::cout << "RC pair connected by a PathRecord: path MTU " << a.path_mtu_bytes() << " bytes, 3072 bytes moved\n";
}

TEST_CASE("mad loopback") {
    rx::gid const self = own_link_local();
    responders r{120s};
    REQUIRE(r.ready == 2);
    requester(self, std::nullopt);
    connect_by_path(self);
}

TEST_CASE("mad responder") {
    responders r{150s};
    REQUIRE(r.ready == 2);
    std::cout << "responders ready\n" << std::flush;
    r.wait();
    CHECK(r.stop); // the requester's stop came before the 150 s ran out
}

TEST_CASE("mad requester") {
    rx::gid const peer = rx::gid::parse(env("RDMACXX_MAD_PEER_GID"));
    rx::gid const peer_v4 = rx::gid::parse(env("RDMACXX_MAD_PEER_V4_GID"));
    requester(peer, peer_v4);
    mad::port p{""};
    mad::agent ping(p, ping_class, 1, ping_oui);
    (void)ping.call(ping.make_request(mad::method::get, attr_stop), to(peer));
}
