// qp_settings and the CM's connection parameters on a real device: the attributes each
// option sets are those the device reports (ibv_query_qp(3)); remote access only as asked;
// several READs in flight; two QPs given different path MTUs agree on the smaller.

#include "fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace {

using test::device_ip;

constexpr int queried = IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
                        IBV_QP_ACCESS_FLAGS | IBV_QP_AV;

// What the device says the QP's attributes are.
ibv_qp_attr query(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    REQUIRE(::ibv_query_qp(qp, &attr, queried, &init) == 0);
    return attr;
}

ibv_device_attr limits(ibv_context* ctx) {
    ibv_device_attr dev{};
    REQUIRE(::ibv_query_device(ctx, &dev) == 0);
    return dev;
}

// The responder refused the request for want of access rights: IBV_WC_REM_ACCESS_ERR, or on rxe
// (which checks the QP's access flags as it parses the request) IBV_WC_REM_INV_REQ_ERR.
bool refused(rx::work_completion const& wc) {
    MESSAGE("refused with " << std::string{::ibv_wc_status_str(wc.status())});
    return wc.status() == IBV_WC_REM_ACCESS_ERR || wc.status() == IBV_WC_REM_INV_REQ_ERR;
}

// A connected RC pair, each side with its own options.
struct pair {
    pair(rx::qp_settings const& oa, rx::qp_settings const& ob)
        : ctx(test::open_test_device()), port(ctx), pd(ctx), cq_a(ctx, 64), cq_b(ctx, 64), a(pd, cq_a, cq_a),
          b(pd, cq_b, cq_b) {
        a.connect(port, b.local_endpoint(port, ob), oa);
        b.connect(port, a.local_endpoint(port, oa), ob);
    }
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    rx::completion_queue<rx::busy_poll> cq_a, cq_b;
    rx::queue_pair<rx::rc, rx::busy_poll> a, b;
};

// Joins a thread however the test leaves its scope (its waits are bounded).
struct joiner {
    explicit joiner(std::thread& thread) : t(thread) {}
    joiner(joiner const&) = delete;
    joiner& operator=(joiner const&) = delete;
    ~joiner() {
        if (t.joinable()) t.join();
    }
    std::thread& t;
};

} // namespace

TEST_CASE("options: the default qp_settings set what the device allows and finite RNR retries") {
    pair p{{}, {}};
    ibv_device_attr const dev = limits(p.ctx.native_handle());
    MESSAGE("device max_qp_init_rd_atom " << dev.max_qp_init_rd_atom << ", max_qp_rd_atom " << dev.max_qp_rd_atom
                                          << ", atomic_cap " << static_cast<int>(dev.atomic_cap));
    REQUIRE(dev.max_qp_init_rd_atom > 1); // rxe: 128
    for (auto* qp : {p.a.native_handle(), p.b.native_handle()}) {
        ibv_qp_attr const attr = query(qp);
        CHECK(attr.qp_state == IBV_QPS_RTS);
        CHECK(attr.max_rd_atomic == dev.max_qp_init_rd_atom); // not 1
        CHECK(attr.max_dest_rd_atomic == dev.max_qp_rd_atom);
        CHECK(attr.timeout == 14);        // 67 ms → 4.096 µs × 2^14
        CHECK(attr.retry_cnt == 6);       // finite on rxe too (7 retries for ever there)
        CHECK(attr.rnr_retry == 6);       // finite
        CHECK(attr.min_rnr_timer == 14);  // 1.28 ms, not 0 (655 ms)
        CHECK(attr.qp_access_flags == 0); // nothing remote granted unless asked
    }
    CHECK(p.a.supports_atomics() == (dev.atomic_cap != IBV_ATOMIC_NONE));
}

TEST_CASE("options: durations and counts reach the QP as the codes they map to") {
    rx::qp_settings o;
    o.local_ack_timeout = 100ms; // → 15 (134 ms)
    o.retry_count = 3;
    o.rnr_retry_count = rx::rnr_retry_infinite;
    o.min_rnr_timer = 5ms; // → 18 (5.12 ms)
    o.initiator_depth = 4;
    o.responder_resources = 8;
    o.remote_access = rx::access::remote_read | rx::access::remote_write;
    pair p{o, o};
    for (auto* qp : {p.a.native_handle(), p.b.native_handle()}) {
        ibv_qp_attr const attr = query(qp);
        CHECK(attr.timeout == 15);
        CHECK(attr.retry_cnt == 3);
        CHECK(attr.rnr_retry == 7);
        CHECK(attr.min_rnr_timer == 18);
        CHECK(attr.max_rd_atomic == 4);
        CHECK(attr.max_dest_rd_atomic == 8);
        CHECK(attr.qp_access_flags == (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE));
    }
}

TEST_CASE("options: out-of-range counts and depths are refused before the device sees them") {
    rx::context ctx = test::open_test_device();
    rx::end_port port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_queue<rx::busy_poll> cq{ctx, 16};
    ibv_device_attr const dev = limits(ctx.native_handle());
    REQUIRE(dev.max_qp_init_rd_atom < 255);
    REQUIRE(dev.max_qp_rd_atom < 255);
    std::vector<rx::qp_settings> bad(4);
    bad[0].retry_count = 8;
    bad[1].rnr_retry_count = 8;
    bad[2].initiator_depth = static_cast<std::uint8_t>(dev.max_qp_init_rd_atom + 1);
    bad[3].responder_resources = static_cast<std::uint8_t>(dev.max_qp_rd_atom + 1);
    for (std::size_t i = 0; i < bad.size(); ++i) {
        CAPTURE(i);
        rx::queue_pair<rx::rc, rx::busy_poll> a{pd, cq, cq}, b{pd, cq, cq};
        CHECK_THROWS_AS(a.connect(port, b.local_endpoint(port), bad[i]), rx::argument_error);
        CHECK(a.state() == IBV_QPS_RESET); // refused before the first ibv_modify_qp
    }
    // A path MTU over the port's active MTU is refused before the first transition too.
    rx::queue_pair<rx::rc, rx::busy_poll> a{pd, cq, cq}, b{pd, cq, cq};
    REQUIRE(rx::mtu_bytes(port.attributes().active_mtu()) < 4096);
    rx::qp_settings too_big;
    too_big.path_mtu = IBV_MTU_4096;
    CHECK_THROWS_AS(a.connect(port, b.local_endpoint(port), too_big), rx::argument_error);
    CHECK(a.state() == IBV_QPS_RESET);
}

TEST_CASE("options: remote access is granted only as asked") {
    rx::qp_settings granted;
    granted.remote_access = rx::access::remote_write;
    SUBCASE("a WRITE to a QP that granted nothing fails with a remote access error") {
        pair p{{}, {}};
        test::buffer src(p.pd, 64), dst(p.pd, 64);
        p.a.post(rx::write{src.span(), dst.mr.remote()}.id(1));
        CHECK(refused(test::next_completion(p.cq_a)));
    }
    SUBCASE("a WRITE to a QP that granted remote write succeeds; a READ from it fails") {
        pair p{{}, granted};
        test::buffer src(p.pd, 64), dst(p.pd, 64);
        test::fill_pattern(src.bytes_, 3);
        p.a.post(rx::write{src.span(), dst.mr.remote()}.id(1));
        auto const wc = test::next_completion(p.cq_a);
        CHECK(wc.ok());
        CHECK(dst.bytes_ == src.bytes_);
        p.a.post(rx::read{src.span(), dst.mr.remote()}.id(2));
        CHECK(refused(test::next_completion(p.cq_a)));
    }
}

TEST_CASE("options: several RDMA READs and atomics in flight at once all complete") {
    rx::qp_settings o;
    o.remote_access = rx::all_remote;
    pair p{o, o};
    CHECK(query(p.a.native_handle()).max_rd_atomic >= 16);
    CHECK(query(p.b.native_handle()).max_dest_rd_atomic >= 16);
    constexpr std::size_t n = 16, chunk = 256;
    test::buffer local(p.pd, n * chunk), remote(p.pd, n * chunk);
    test::fill_pattern(remote.bytes_, 7);
    std::vector<rx::read<>> reads;
    for (std::size_t i = 0; i < n; ++i)
        reads.push_back(
            rx::read{local.span().subspan(i * chunk, chunk), remote.mr.remote().subspan(i * chunk, chunk)}.id(i));
    p.a.post(std::span<rx::read<> const>{reads}); // one chain: 16 READs outstanding together
    std::vector<bool> seen(n);
    for (std::size_t i = 0; i < n; ++i) {
        auto const wc = test::next_completion(p.cq_a);
        REQUIRE(wc.ok());
        REQUIRE(wc.wr_id() < n);
        seen[wc.wr_id()] = true;
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](bool s) { return s; }));
    CHECK(local.bytes_ == remote.bytes_);

    test::buffer counter(p.pd, 8), results(p.pd, 8 * n);
    for (std::uint64_t i = 0; i < n; ++i)
        p.a.post(rx::fetch_add{results.mr.span<std::uint64_t>(i, 1), counter.mr.remote<std::uint64_t>(), 1}.id(i));
    for (std::size_t i = 0; i < n; ++i)
        REQUIRE(test::next_completion(p.cq_a).ok());
    std::uint64_t total = 0;
    std::memcpy(&total, counter.bytes_.data(), 8);
    CHECK(total == n);
}

TEST_CASE("options: two QPs given different path MTUs use the smaller one") {
    rx::qp_settings small;
    small.path_mtu = IBV_MTU_256;
    pair p{small, {}}; // a asks for 256; b would use the port's active MTU (1024 on rxe)
    CHECK(p.a.local_endpoint(p.port, small).path_mtu == IBV_MTU_256);
    CHECK(p.b.local_endpoint(p.port).path_mtu == p.port.attributes().active_mtu());
    CHECK(query(p.a.native_handle()).path_mtu == IBV_MTU_256);
    CHECK(query(p.b.native_handle()).path_mtu == IBV_MTU_256);
    CHECK(p.a.path_mtu_bytes() == 256);
    CHECK(p.b.path_mtu_bytes() == 256);
    // Messages of several path MTUs, both ways, arrive byte for byte.
    test::buffer a_buf(p.pd, 1000), b_buf(p.pd, 1000), a_in(p.pd, 1000), b_in(p.pd, 1000);
    test::fill_pattern(a_buf.bytes_, 1);
    test::fill_pattern(b_buf.bytes_, 2);
    p.a.post_recv(rx::recv{a_in.span()}.id(10));
    p.b.post_recv(rx::recv{b_in.span()}.id(20));
    p.a.post(rx::send{a_buf.span()}.id(1));
    p.b.post(rx::send{b_buf.span()}.id(2));
    for (int i = 0; i < 2; ++i) {
        CHECK(test::next_completion(p.cq_a).ok());
        CHECK(test::next_completion(p.cq_b).ok());
    }
    CHECK(b_in.bytes_ == a_buf.bytes_);
    CHECK(a_in.bytes_ == b_buf.bytes_);
}

TEST_CASE("options: on the CM path qp_settings reach each side's own QP, as on the verbs path") {
    cm::listener<rx::rc> server{cm::address::resolve(device_ip(), 0)};
    auto const port = server.port();
    ibv_qp_attr server_attr{};
    std::exception_ptr server_error;
    std::thread srv([&] {
        try {
            auto req = server.get_request(20s);
            cm::connection_options opt;
            opt.settings.rnr_retry_count = 3;                      // the server's sends retry RNR NAKs 3 times
            opt.settings.retry_count = 5;                          // the server's sends retransmit 5 times
            opt.settings.min_rnr_timer = 5ms;                      // the server's RNR NAKs ask for 5.12 ms (18)
            opt.settings.local_ack_timeout = 250ms;                // the server's ACK timeout: 268 ms (16)
            opt.settings.remote_access = rx::access::remote_write; // the client may WRITE, not READ
            opt.settings.responder_resources = 4;
            auto conn = req.accept<rx::rc, rx::busy_poll>(opt);
            server_attr = query(conn.qp().native_handle());
            (void)conn.wait_disconnected(20s);
        } catch (...) {
            server_error = std::current_exception();
        }
    });
    joiner const join_server{srv};
    cm::connection_options opt;
    opt.settings.rnr_retry_count = 2;       // the client's sends retry RNR NAKs twice
    opt.settings.min_rnr_timer = 2560us;    // 16
    opt.settings.local_ack_timeout = 500ms; // 17 (537 ms)
    opt.settings.initiator_depth = 2;
    opt.settings.service_level = 3;
    opt.settings.hop_limit = 17;
    opt.settings.traffic_class = 0x68;
    opt.settings.flow_label = 0xabcde;
    opt.settings.path_mtu = IBV_MTU_512;
    ibv_qp_attr client_attr{};
    ibv_device_attr dev{};
    {
        auto conn = cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(device_ip(), port), opt);
        client_attr = query(conn.qp().native_handle());
        dev = limits(conn.qp().native_handle()->context);
        conn.disconnect();
    }
    srv.join();
    if (server_error) std::rethrow_exception(server_error);
    // Each side's sender settings are its own, whatever the peer asked.
    CHECK(client_attr.rnr_retry == 2);
    CHECK(server_attr.rnr_retry == 3);
    CHECK(client_attr.retry_cnt == 6); // the default
    CHECK(server_attr.retry_cnt == 5);
    CHECK(client_attr.min_rnr_timer == 16);
    CHECK(server_attr.min_rnr_timer == 18);
    CHECK(client_attr.timeout == 17);
    CHECK(server_attr.timeout == 16);
    // RD-atomic depths: as asked, else the device's limits (no more than the peer offered), not 1.
    CHECK(client_attr.max_rd_atomic == 2);
    CHECK(server_attr.max_dest_rd_atomic == 4);
    CHECK(server_attr.max_rd_atomic > 1);
    CHECK(server_attr.max_rd_atomic <= dev.max_qp_init_rd_atom);
    CHECK(client_attr.max_dest_rd_atomic > 1);
    // Access: as asked, not the kernel CM's WRITE and READ for every connection.
    CHECK(server_attr.qp_access_flags == IBV_ACCESS_REMOTE_WRITE);
    CHECK(client_attr.qp_access_flags == 0);
    // The path's fields replace the CM's route where set. rxe reports neither the SL nor the
    // hop limit back (its address vector keeps no SL, and its query gives the hop limit it
    // routes with); both only reach ibv_modify_qp, which accepted them.
    CHECK(client_attr.ah_attr.grh.traffic_class == 0x68);
    CHECK(client_attr.ah_attr.grh.flow_label == 0xabcde);
    MESSAGE("SL and hop limit reported by the device: " << int{client_attr.ah_attr.sl} << ", "
                                                        << int{client_attr.ah_attr.grh.hop_limit});
    CHECK(client_attr.path_mtu == IBV_MTU_512);
}

TEST_CASE("options: the CM path refuses bad settings before anything is sent") {
    cm::listener<rx::rc> server{cm::address::resolve(device_ip(), 0)};
    auto const port = server.port();
    std::vector<cm::connection_options> bad(3);
    bad[0].settings.retry_count = 8;
    bad[1].settings.flow_label = rx::max_flow_label + 1;
    bad[2].settings.initiator_depth = 255;
    for (std::size_t i = 0; i < bad.size(); ++i) {
        CAPTURE(i);
        try {
            auto conn = cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(device_ip(), port), bad[i]);
            FAIL("connected with bad settings");
        } catch (rx::argument_error const& e) {
            CHECK(std::string{e.what()}.find("nothing was sent") != std::string::npos);
        }
    }
    // Nothing reached the listener.
    auto const req = server.channel().get(300ms);
    CHECK_FALSE(req.has_value());
}

TEST_CASE("wire: a remote_span encoded into the CM's private data is written to by the peer") {
    cm::listener<rx::rc> server{cm::address::resolve(device_ip(), 0)};
    auto const port = server.port();
    std::vector<std::byte> target(256);
    std::exception_ptr server_error;
    std::thread srv([&] {
        try {
            auto req = server.get_request(20s);
            std::optional<rx::memory_region> mr;
            cm::connection_options opt;
            opt.settings.remote_access = rx::access::remote_write; // the client WRITEs here
            auto conn = req.accept<rx::rc, rx::busy_poll>(opt, {}, [&](auto& c) {
                mr.emplace(
                    c.pd().register_memory(std::span{target}, rx::access::local_write | rx::access::remote_write));
                return mr->template remote<std::byte>().to_bytes(); // the accept's private data
            });
            (void)conn.wait_disconnected(20s);
            mr.reset(); // before the connection's PD
        } catch (...) {
            server_error = std::current_exception();
        }
    });
    joiner const join_server{srv};
    {
        auto conn = cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(device_ip(), port));
        auto const peer = rx::remote_span<std::byte>::from_bytes(conn.peer_private_data());
        CHECK(peer.size() == target.size());
        test::buffer src(conn.pd(), 256);
        test::fill_pattern(src.bytes_, 5);
        conn.qp().post(rx::write{src.span(), peer}.id(1));
        auto const wc = test::next_completion(conn.cq());
        CHECK(wc.ok());
        conn.disconnect();
        srv.join();
        if (server_error) std::rethrow_exception(server_error);
        CHECK(target == src.bytes_);
    }
}
