// Management datagrams over a real wire (rdmacxx/mad.hpp): umad ports, agents, RPCs with
// timeouts and retries, and the MAD error family, with real MADs between real kernels; and an RC
// QP connected by a PathRecord.
//
// Roles (run by name, -tc=):
//   mad loopback   one node (tools/check's device suite): the responders below in threads and
//                  the requester against this node's own link-local GID, the RC connection
//                  included (both of its QPs on this node);
//   mad responder  node 2 (tools/nodes-wire): serves, until a stop request or 150 s, a ping
//                  class (vendor class 0x32 with OUI 0x001405, as ibping) whose replies carry
//                  the request's payload inverted, that does not answer attribute 0xDEAD, and
//                  whose attribute 0x0001 (connect) carries the requester's RC endpoint in the
//                  Get and, in the GetResp, the endpoint of an RC QP connected to it; that QP
//                  checks the requester's message byte for byte and sends its own back (the
//                  role fails unless it did); and a test SA (class 0x03 version 2) that knows
//                  PathRecords (path MTU 512) to its own GIDs and to its caller's, and answers
//                  ERR_NO_RECORDS for any other DGID;
//   mad requester  node 1: against node 2's link-local GID (RDMACXX_MAD_PEER_GID) and
//                  IPv4-mapped GID (RDMACXX_MAD_PEER_V4_GID): a Get/GetResp round trip with its
//                  payload checked (and round-trip figures), no answer → mad_timeout_error within
//                  its bound (measured), PerfMgt (no agent there) → the kernel's 0x000C as a
//                  mad_error, a PathRecord resolved from the test SA (resolve_path) and applied
//                  (apply) to the settings of an RC QP on the record's SGID, connected through
//                  the connect attribute to node 2's QP on the record's DGID, and 7.6 path MTUs
//                  moved each way over it, every byte checked, both QPs' path MTU the record's;
//                  the SA's ERR_NO_RECORDS → sa_path_not_found_error, the IPv4-mapped GID's
//                  dropped reply, and dump_detailed level 2 against the packets.
// Every wait is bounded.
#include "rdmacxx/mad.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <span>
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
// Get: the requester's RC endpoint (rdmacxx::endpoint's wire form) in the data; GetResp: the
// responder's, of a QP connected to it.
constexpr std::uint16_t attr_connect = 0x0001;

// The test SA's path MTU: 512 bytes (MTU code 2), below rxe's active MTU on a 1500-byte Ethernet
// (1024), so that a QP whose path MTU is 512 bytes has it from the record.
constexpr std::uint8_t sa_path_mtu = 2;
// The RC connection's messages, one each way: 7 path MTUs of 512 bytes and a part.
constexpr std::size_t rc_message = 7 * 512 + 300;
constexpr std::uint64_t send_id = 1;
constexpr std::uint64_t recv_id = 2;
// The messages' contents: byte i is (i * 13 + seed) mod 256.
constexpr unsigned from_requester = 5;
constexpr unsigned from_responder = 11;

std::string env(char const* name) {
    char const* v = std::getenv(name);
    if (v == nullptr || *v == '\0')
        throw std::runtime_error(std::string{name} + " is not set: run through tools/nodes-wire");
    return v;
}

double ms(steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One end of the RC connection a PathRecord sets up: a QP on `port` (a GID of the path), the
// message it sends and a buffer for the peer's, `rc_message` bytes each.
struct rc_end {
    rx::end_port port;
    rx::protection_domain pd;
    rx::completion_queue<rx::event_driven> cq;
    rx::queue_pair<rx::rc, rx::event_driven> qp;
    std::vector<std::byte> in = std::vector<std::byte>(rc_message);
    std::vector<std::byte> out;
    rx::memory_region in_mr;
    rx::memory_region out_mr;

    // On `p`'s port, sending from its GID `gid`.
    rc_end(mad::port const& p, rx::gid const& gid, unsigned seed)
        : port(p.where().context(), p.where().port_num(), on(gid)), pd(p.where().context()), cq(p.where().context(), 4),
          qp(pd, cq, cq), out(message(seed)), in_mr(pd.register_memory(std::span{in}, rx::access::local_write)),
          out_mr(pd.register_memory(std::span{out}, rx::access::none)) {}

    static rx::gid_selector on(rx::gid const& gid) {
        rx::gid_selector want;
        want.address = gid;
        return want;
    }

    static std::vector<std::byte> message(unsigned seed) {
        std::vector<std::byte> m(rc_message);
        for (std::size_t i = 0; i < m.size(); ++i)
            m[i] = static_cast<std::byte>((i * 13 + seed) & 0xffU);
        return m;
    }

    // RESET → RTS towards `remote`, and the receive posted: the peer may send from then on.
    void connect(rx::endpoint const& remote, rx::qp_settings const& settings) {
        qp.connect(port, remote, settings);
        qp.post_recv(rx::recv{in_mr.span()}.id(recv_id));
    }

    void send() { qp.post(rx::send{out_mr.span<std::byte const>()}.id(send_id)); }

    // Empty when `wc` completes the receive of the peer's message (made with `seed`) with every
    // byte right; else what is wrong.
    [[nodiscard]] std::string received(rx::work_completion const& wc, unsigned seed) const {
        if (wc.status() != IBV_WC_SUCCESS)
            return std::string{"the receive completed with "} + ::ibv_wc_status_str(wc.status());
        if (wc.byte_len() != rc_message)
            return std::to_string(wc.byte_len()) + " bytes received, not " + std::to_string(rc_message);
        if (in != message(seed)) return "the bytes received are not the peer's";
        return {};
    }

    // The path MTU the device holds for the QP (ibv_query_qp), in bytes; 0 when the query fails.
    [[nodiscard]] std::uint32_t device_path_mtu() const {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        if (::ibv_query_qp(qp.native_handle(), &attr, IBV_QP_PATH_MTU, &init) != 0) return 0;
        return rx::mtu_bytes(attr.path_mtu);
    }
};

// How the responder's side of the RC connection went, for the thread that checks it.
struct rc_report {
    bool passed = false;
    std::string what = "no requester connected an RC QP";
};

// The responder's side of the RC connection. A connect request carries the requester's endpoint;
// the answer carries the endpoint of a QP connected to it (path MTU: the requester's, which is
// the record's), whose receive is posted before the answer leaves. When the requester's message
// arrives it is checked, and this side's sent back. Runs in the ping class's thread, without
// blocking it: `progress` takes the completions there are.
class rc_responder {
public:
    // Makes `reply`, the response to the connect request `got`. The kernel's resend of the same
    // request gets the same answer; a malformed endpoint, another requester or a QP that cannot
    // be connected gets Status 0x001C (an invalid value in the attribute), and the exchange fails.
    void answer(mad::port& p, mad::received_mad const& got, mad::packet& reply) {
        try {
            rx::endpoint const remote = rx::endpoint::from_bytes(got.mad.data());
            if (!end_) {
                end_.emplace(p, p.source_gid_for(remote.gid).gid, from_responder);
                settings_.path_mtu = remote.path_mtu;
                end_->connect(remote, settings_);
                remote_ = remote;
                report_.what = "connected to QPN " + std::to_string(remote.qpn) + ", no message came";
            } else if (remote != remote_) {
                throw rx::argument_error("a second requester, QPN " + std::to_string(remote.qpn));
            }
            auto const mine = end_->qp.local_endpoint(end_->port, settings_).to_bytes();
            std::copy(mine.begin(), mine.end(), reply.data().begin());
        } catch (std::exception const& e) {
            reply = mad::make_response(got.mad, 0x001c);
            if (!report_.passed) finish(false, std::string{"a connect request refused: "} + e.what());
        }
    }

    // Whether the exchange is under way: connected, and not yet checked or failed.
    [[nodiscard]] bool pending() const noexcept { return end_ && !done_; }

    // Takes the QP's completions, without waiting: the requester's message checked and this
    // side's sent in answer, then that send's completion.
    void progress() {
        if (!pending()) return;
        std::array<rx::work_completion, 2> wcs{};
        std::size_t const n = end_->cq.poll(wcs);
        for (std::size_t i = 0; i < n && !done_; ++i) {
            if (wcs[i].wr_id() == recv_id) {
                if (std::string const why = end_->received(wcs[i], from_requester); why.empty())
                    end_->send();
                else
                    finish(false, "the requester's message: " + why);
            } else if (wcs[i].status() != IBV_WC_SUCCESS) {
                finish(false, std::string{"the answer's send completed with "} + ::ibv_wc_status_str(wcs[i].status()));
            } else if (std::uint32_t const mtu = end_->device_path_mtu(); mtu != rx::mtu_bytes(remote_.path_mtu)) {
                finish(false, "path MTU " + std::to_string(mtu) + " bytes, not the requester's " +
                                  std::to_string(rx::mtu_bytes(remote_.path_mtu)));
            } else {
                finish(true, "QPN " + std::to_string(end_->qp.qp_num()) + " on " + end_->port.gid().gid.to_string() +
                                 " connected to QPN " + std::to_string(remote_.qpn) + " on " + remote_.gid.to_string() +
                                 ", path MTU " + std::to_string(mtu) + " bytes: " + std::to_string(rc_message) +
                                 " bytes received and checked, " + std::to_string(rc_message) + " sent back");
            }
        }
    }

    // Takes completions until the exchange is over or `deadline` passes.
    void settle(steady::time_point deadline) {
        while (pending() && steady::now() < deadline) {
            progress();
            std::this_thread::sleep_for(1ms);
        }
    }

    [[nodiscard]] rc_report const& report() const noexcept { return report_; }

private:
    void finish(bool passed, std::string what) {
        done_ = true;
        report_ = {passed, std::move(what)};
    }

    std::optional<rc_end> end_;
    rx::qp_settings settings_;
    rx::endpoint remote_;
    bool done_ = false;
    rc_report report_;
};

// The ping class: the reply's data is the request's, each byte inverted; 0xDEAD is never
// answered; a connect request sets up the responder's side of the RC connection, whose report
// ends in `report` when the thread does.
void serve_ping(std::atomic<bool>& stop, std::atomic<int>& ready, steady::time_point until, rc_report& report) {
    mad::port p{""};
    auto a = mad::agent::responder(p, ping_class, 1, {mad::method::get}, ping_oui);
    rc_responder rc; // after the port: its QP goes before the port's device
    ++ready;
    while (!stop && steady::now() < until) {
        rc.progress();
        auto got = a.receive(rc.pending() ? 1ms : 50ms);
        if (!got) continue;
        mad::mad_header const h = got->mad.header();
        if (h.attribute_id == attr_silent) continue;
        mad::packet reply = mad::make_response(got->mad);
        if (h.attribute_id == attr_connect) {
            rc.answer(p, *got, reply);
        } else {
            for (auto& b : reply.data())
                b = ~b;
        }
        a.respond(*got, reply);
        if (h.attribute_id == attr_stop) stop = true;
    }
    rc.settle(std::min(until, steady::now() + 10s)); // the last completions, after a stop request
    report = rc.report();
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
        r.mtu = sa_path_mtu;
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
    rc_report rc; // the responder's side of the RC connection: read it after `wait`
    explicit responders(std::chrono::seconds limit) {
        auto const until = steady::now() + limit;
        ping = std::thread([this, until] { serve_ping(stop, ready, until, rc); });
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
    // Waits for both to stop, then checks the responder's side of the RC connection.
    void check_rc() {
        wait();
        std::cout << "responder's RC QP: " << rc.what << "\n";
        CHECK_MESSAGE(rc.passed, "the responder's RC QP: " << rc.what);
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

// The requester's side of the RC connection: an RC QP on the record's SGID with the settings
// `path` gives, connected through the ping class's connect attribute to a QP the peer makes on
// the record's DGID; a message each way, every byte checked; both QPs' path MTU the record's.
void connect_by_path(mad::port& p, mad::agent& ping, rx::gid const& peer, mad::path_record const& path) {
    rx::qp_settings settings;
    mad::apply(path, settings);
    REQUIRE(settings.path_mtu == IBV_MTU_512);
    CHECK(settings.hop_limit == 1);
    std::uint32_t const path_mtu = rx::mtu_bytes(*settings.path_mtu);
    rc_end mine(p, path.sgid, from_requester);
    // Below the port's active MTU: a QP with this path MTU has it from the record.
    CHECK(mine.port.attributes().active_mtu_bytes() > path_mtu);

    rx::endpoint const ours = mine.qp.local_endpoint(mine.port, settings);
    CHECK(ours.path_mtu == *settings.path_mtu);
    mad::packet request = ping.make_request(mad::method::get, attr_connect);
    auto const wire = ours.to_bytes();
    std::copy(wire.begin(), wire.end(), request.data().begin());
    auto const t0 = steady::now();
    rx::endpoint const theirs = rx::endpoint::from_bytes(ping.call(request, to(peer)).data());
    CHECK(theirs.gid == path.dgid);
    CHECK(theirs.path_mtu == *settings.path_mtu);
    mine.connect(theirs, settings);
    CHECK(mine.device_path_mtu() == path_mtu);
    CHECK(mine.qp.path_mtu_bytes() == path_mtu);
    mine.send();

    // The send's completion and the responder's message, which it sends once it has ours.
    bool sent = false;
    std::string got = "no message in 10 s";
    auto const deadline = steady::now() + 10s;
    for (int n = 0; n < 2;) {
        auto const wc = mine.cq.wait_one(deadline - steady::now());
        if (!wc) break;
        ++n;
        if (wc->wr_id() == send_id) {
            CHECK_MESSAGE(wc->status() == IBV_WC_SUCCESS,
                          "the send completed with " << ::ibv_wc_status_str(wc->status()));
            sent = true;
        } else {
            got = mine.received(*wc, from_responder);
        }
    }
    double const took = ms(steady::now() - t0);
    CHECK_MESSAGE(sent, "the send did not complete in 10 s");
    CHECK_MESSAGE(got.empty(), "the responder's message: " << got);
    if (sent && got.empty())
        std::cout << "RC QP connected by a PathRecord: QPN " << ours.qpn << " on " << ours.gid << " to QPN "
                  << theirs.qpn << " on " << theirs.gid << ", path MTU " << mine.device_path_mtu()
                  << " bytes (the record's; the port's " << mine.port.attributes().active_mtu_bytes() << "), "
                  << rc_message << " bytes each way, every byte checked, in " << took << " ms (connect MAD included)\n";
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

    // The test SA: a PathRecord resolved and used to connect an RC QP, and ERR_NO_RECORDS →
    // sa_path_not_found_error with the path's context on top.
    {
        mad::agent sa(p, mad::mgmt_class::subn_adm, mad::sa_class_version);
        rx::gid const self = p.source_gid_for(peer).gid;
        mad::path_record const found = mad::resolve_path(sa, to(peer), self, peer);
        CHECK(found.dgid == peer);
        CHECK(found.sgid == self);
        CHECK(found.mtu == sa_path_mtu);
        CHECK(found.p_key == 0xffff);
        connect_by_path(p, ping, peer, found);
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

TEST_CASE("mad loopback") {
    rx::gid const self = own_link_local();
    responders r{120s};
    REQUIRE(r.ready == 2);
    requester(self, std::nullopt);
    r.stop = true;
    r.check_rc();
}

TEST_CASE("mad responder") {
    responders r{150s};
    REQUIRE(r.ready == 2);
    std::cout << "responders ready\n" << std::flush;
    r.check_rc();
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
