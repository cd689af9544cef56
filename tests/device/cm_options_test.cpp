// Device tests of the connection options on a real device: the CM's type of service, ACK
// timeout, reuseaddr and AF_IB (rdma_set_option(3)) and the QoS fields of raw connects and
// address handles, each checked where it lands (ibv_query_qp(3), the received GRH); and UC
// connections through the CM carrying SEND and RDMA WRITE.
#include "fixture.hpp"

#include "rdmacxx/cm/connection.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace {

using test::background;
using test::device_address;
using test::device_ip;

ibv_qp_attr query_path(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    REQUIRE(::ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_TIMEOUT, &init) == 0);
    return attr;
}

} // namespace

TEST_SUITE("cm options") {

    TEST_CASE("cm options: type of service becomes both QPs' traffic class, the ACK timeout the QP's timeout") {
        constexpr std::uint8_t tos = 0x68; // DSCP 26 (AF31), ECN 0
        rx::ack_timeout const client_timeout = 50ms, server_timeout = 200ms;
        // The passive QP takes the traffic class from the connect request: the listener need
        // not set it (second pass), though it may (first pass).
        for (bool const listener_sets_tos : {true, false}) {
            CAPTURE(listener_sets_tos);
            cm::listener_options lopt;
            if (listener_sets_tos) lopt.type_of_service = tos;
            cm::listener<rx::rc> server{device_address(), lopt};
            std::uint16_t const port = server.port();
            ibv_qp_attr server_attr{};
            std::string server_got;
            // The client sends once the server's receive is posted: a SEND that finds none is an
            // RNR NAK, and a slow server (ASan under emulation) could run out the RNR retries.
            std::atomic<bool> receive_posted{false};
            background srv([&] {
                cm::connection_options opt;
                opt.settings.local_ack_timeout = server_timeout;
                auto conn = server.get_request(20s).accept<rx::rc, rx::busy_poll>(opt);
                server_attr = query_path(conn.qp().native_handle());
                test::buffer buf(conn.pd(), 256);
                conn.qp().post_recv(rx::recv{buf.span()});
                receive_posted = true;
                auto const wc = test::wait_ok(conn.cq());
                server_got.assign(reinterpret_cast<char const*>(buf.bytes_.data()), wc.byte_len());
                (void)conn.wait_disconnected(20s);
            });
            cm::connection_options opt;
            opt.type_of_service = tos;
            opt.settings.local_ack_timeout = std::chrono::milliseconds{50}; // a duration, rounded up to 4.096 µs × 2ⁿ
            auto conn = cm::connect<rx::rc, rx::busy_poll>(device_address(port), opt);
            ibv_qp_attr const client_attr = query_path(conn.qp().native_handle());
            std::string const msg = "sent with DSCP 26";
            test::buffer out(conn.pd(), msg.size());
            std::memcpy(out.bytes_.data(), msg.data(), msg.size());
            auto const ready_by = std::chrono::steady_clock::now() + 20s;
            while (!receive_posted && std::chrono::steady_clock::now() < ready_by)
                std::this_thread::sleep_for(1ms);
            REQUIRE(receive_posted);
            conn.qp().post(rx::send{out.span()});
            (void)test::wait_ok(conn.cq());
            conn.disconnect(20s);
            srv.join();

            MESSAGE("client QP: traffic class " << int{client_attr.ah_attr.grh.traffic_class} << ", timeout code "
                                                << int{client_attr.timeout} << "; server QP: traffic class "
                                                << int{server_attr.ah_attr.grh.traffic_class} << ", timeout code "
                                                << int{server_attr.timeout});
            CHECK(client_attr.qp_state == IBV_QPS_RTS);
            CHECK(client_attr.ah_attr.grh.traffic_class == tos);
            CHECK(server_attr.ah_attr.grh.traffic_class == tos);
            CHECK(client_attr.timeout == client_timeout.code());
            CHECK(client_timeout.code() == 14); // 67.1 ms, the first step at least 50 ms
            CHECK(server_attr.timeout == server_timeout.code());
            CHECK(server_got == msg);
        }
    }

    TEST_CASE("cm options: reuseaddr lets ids share a bound port, and a listener binds a just-closed port") {
        cm::event_channel channel;
        cm::id a{channel, cm::port_space::tcp}, b{channel, cm::port_space::tcp}, plain{channel, cm::port_space::tcp};
        a.set_reuse_address(true);
        a.bind(device_address());
        std::uint16_t const shared = a.local_address().port();
        b.set_reuse_address(true);
        CHECK_NOTHROW(b.bind(device_address(shared))); // both asked: they share the port
        try {
            plain.bind(device_address(shared));
            FAIL("an id without reuseaddr bound a port two ids hold");
        } catch (cm::address_error const& e) {
            MESSAGE(std::string{e.what()});
            CHECK(e.code() == std::error_code{EADDRINUSE, std::system_category()});
        }

        // A listener's port, bound again the moment the listener is gone (this kernel frees it
        // at once; reuseaddr makes it so where the port lingers), and serving there.
        std::uint16_t port = 0;
        {
            cm::listener<rx::rc> first{device_address(), cm::listener_options{.reuse_address = true}};
            port = first.port();
            background srv([&] {
                auto conn = first.get_request(20s).accept<rx::rc, rx::busy_poll>();
                (void)conn.wait_disconnected(20s);
            });
            auto conn = cm::connect<rx::rc, rx::busy_poll>(device_address(port));
            conn.disconnect(20s);
            srv.join();
        }
        cm::listener<rx::rc> again{device_address(port), cm::listener_options{.reuse_address = true}};
        CHECK(again.port() == port);
        background srv([&] {
            auto conn = again.get_request(20s).accept<rx::rc, rx::busy_poll>();
            (void)conn.wait_disconnected(20s);
        });
        auto conn = cm::connect<rx::rc, rx::busy_poll>(device_address(port));
        CHECK(conn.state() == cm::connection_state::established);
        conn.disconnect(20s);
        srv.join();
        // A listening id takes no reuseaddr: refused with the typed error naming the option.
        try {
            again.cm_id().set_reuse_address(true);
            FAIL("reuseaddr on a listening id was accepted");
        } catch (rx::not_supported_error const& e) {
            MESSAGE(std::string{e.what()});
            CHECK(std::string{e.what()}.find("RDMA_OPTION_ID_REUSEADDR") != std::string::npos);
        }
    }

    TEST_CASE("cm options: AF_IB is refused on RoCE with a typed error naming the family and the device") {
        cm::event_channel channel;
        cm::id id{channel, cm::port_space::tcp};
        rx::context ctx = test::open_test_device();
        rx::end_port const port{ctx};
        REQUIRE(port.attributes().is_ethernet()); // rxe: RoCE
        cm::address const ib = cm::address::ib(port.gid().gid, 7471);
        CHECK(ib.family() == AF_IB);
        CHECK(ib.port() == 7471);
        try {
            id.bind(ib);
            FAIL("binding an AF_IB address on RoCE succeeded");
        } catch (rx::not_supported_error const& e) {
            std::string const what = e.what();
            MESSAGE(what);
            CHECK(what.find("AF_IB") != std::string::npos);
            CHECK(what.find(std::string{ctx.name()}) != std::string::npos);
            CHECK(e.code() == std::error_code{EAFNOSUPPORT, std::system_category()});
        }
        CHECK_THROWS_AS(id.resolve_address(ib, 1000ms), rx::not_supported_error);
        // The IPv6-only option itself is known to the kernel, before bind.
        cm::id v6{channel, cm::port_space::tcp};
        CHECK_NOTHROW(v6.set_address_family_only(true));
    }

    TEST_CASE("cm options: raw qp_settings put SL, traffic class and flow label in the QP's address vector") {
        rx::qp_settings opt{.remote_access = rx::all_remote};
        opt.service_level = 3;
        opt.traffic_class = 0x68;
        opt.flow_label = 0xabcde;
        test::loopback<rx::rc, rx::busy_poll> lb({}, opt);
        ibv_qp_attr const attr = query_path(lb.a.native_handle());
        CHECK(attr.ah_attr.is_global == 1);
        CHECK(attr.ah_attr.grh.traffic_class == 0x68);
        CHECK(attr.ah_attr.grh.flow_label == 0xabcde);
        // rxe keeps no SL in its address vector (ibv_query_qp reports 0): the SL is only shown
        // to reach ibv_modify_qp, which accepted it.
        MESSAGE("SL reported by the device: " << int{attr.ah_attr.sl});
        test::buffer src(lb.pd, 64, std::byte{0x5a}), dst(lb.pd, 64);
        lb.b.post_recv(rx::recv{dst.span()});
        lb.a.post(rx::send{src.span()});
        (void)test::wait_ok(lb.cq_a);
        (void)test::wait_ok(lb.cq_b);
        CHECK(dst.bytes_ == src.bytes_);

        rx::completion_queue<rx::busy_poll> cq{lb.ctx, 16};
        rx::queue_pair<rx::rc, rx::busy_poll> bad{lb.pd, cq, cq};
        rx::qp_settings too_long{};
        too_long.flow_label = rx::max_flow_label + 1;
        CHECK_THROWS_AS(bad.connect(lb.port, lb.a.local_endpoint(lb.port), too_long), rx::argument_error);
        rx::qp_settings bad_sl{};
        bad_sl.service_level = 16;
        CHECK_THROWS_AS(bad.connect(lb.port, lb.a.local_endpoint(lb.port), bad_sl), rx::argument_error);
    }

    TEST_CASE("cm options: an address handle's traffic class is the one on the wire (the received IPv4 TOS)") {
        rx::context ctx = test::open_test_device();
        rx::end_port const port{ctx};
        rx::protection_domain pd{ctx};
        rx::completion_queue<rx::busy_poll> cq{ctx, 16};
        rx::queue_pair<rx::ud, rx::busy_poll> tx{pd, cq, cq}, rx_qp{pd, cq, cq};
        tx.activate(port);
        rx_qp.activate(port);
        constexpr std::uint8_t tc = 0xb8; // DSCP 46 (EF)
        rx::address_handle ah{pd, port, port.lid(), port.gid().gid,
                              rx::address_qos{.service_level = 0, .traffic_class = tc, .flow_label = 0x1234}};
        test::buffer in(pd, rx::ud::grh_bytes + 64), out(pd, 64, std::byte{0x42});
        rx_qp.post_recv(rx::recv{in.span()});
        tx.post(rx::send{out.span()}.to(ah, rx_qp.qp_num(), rx::default_qkey));
        rx::work_completion wc = test::wait_ok(cq);
        if (!wc.is_recv()) wc = test::wait_ok(cq);
        REQUIRE(wc.is_recv());
        // RoCE v2 over IPv4: the last 20 bytes of the 40-byte GRH area hold the IPv4 header, whose
        // second byte is the TOS, which carries the traffic class.
        auto const ipv4 = std::span{in.bytes_}.subspan(20, 20);
        MESSAGE("received IPv4 header byte 0 " << int(ipv4[0]) << ", TOS " << int(ipv4[1]));
        CHECK(int(ipv4[0]) == 0x45);
        CHECK(int(ipv4[1]) == tc);
        CHECK_THROWS_AS((rx::address_handle{pd, port, port.lid(), port.gid().gid,
                                            rx::address_qos{.flow_label = rx::max_flow_label + 1}}),
                        rx::argument_error);
    }

    TEST_CASE("cm options: UC through the CM carries SEND and RDMA WRITE both ways") {
        cm::listener<rx::uc> server{device_address()};
        std::uint16_t const port = server.port();
        std::vector<std::byte> server_mem(4096);
        std::optional<rx::remote_span<std::byte>> server_target;
        std::string server_got;
        std::atomic<bool> ready{false};
        background srv([&] {
            // The client WRITEs into server_mem: granted, as nothing remote is by default.
            auto conn = server.get_request(20s).accept<rx::uc, rx::busy_poll>(
                {.settings = {.remote_access = rx::access::remote_write}});
            auto mr =
                conn.pd().register_memory(std::span{server_mem}, rx::access::local_write | rx::access::remote_write);
            test::buffer buf(conn.pd(), 256);
            conn.qp().post_recv(rx::recv{buf.span()});
            server_target = mr.remote();
            ready = true;
            // The client WRITEs into server_mem, then SENDs; UC delivers in order.
            auto const wc = test::wait_ok(conn.cq());
            server_got.assign(reinterpret_cast<char const*>(buf.bytes_.data()), wc.byte_len());
            std::string const reply = "uc reply";
            std::memcpy(buf.bytes_.data(), reply.data(), reply.size());
            conn.qp().post(rx::send{buf.span().first(reply.size())});
            (void)test::wait_ok(conn.cq());
            (void)conn.wait_disconnected(20s);
        });
        auto conn = cm::connect<rx::uc, rx::busy_poll>(device_address(port));
        CHECK(conn.state() == cm::connection_state::established);
        ibv_qp_attr const attr = query_path(conn.qp().native_handle());
        CHECK(attr.qp_state == IBV_QPS_RTS);
        CHECK(conn.qp().native_handle()->qp_type == IBV_QPT_UC);
        test::buffer in(conn.pd(), 256);
        conn.qp().post_recv(rx::recv{in.span()});
        auto const deadline = std::chrono::steady_clock::now() + 20s;
        while (!ready && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(1ms);
        REQUIRE(ready);
        test::buffer data(conn.pd(), 4096);
        test::fill_pattern(std::span{data.bytes_}, 13);
        conn.qp().post(rx::write{data.span(), *server_target});
        std::string const msg = "uc hello after the write";
        test::buffer out(conn.pd(), msg.size());
        std::memcpy(out.bytes_.data(), msg.data(), msg.size());
        conn.qp().post(rx::send{out.span()});
        std::string client_got;
        for (int i = 0; i < 3; ++i) {
            auto const wc = test::wait_ok(conn.cq());
            if (wc.is_recv()) client_got.assign(reinterpret_cast<char const*>(in.bytes_.data()), wc.byte_len());
        }
        conn.disconnect(20s);
        srv.join();
        CHECK(server_got == msg);
        CHECK(client_got == "uc reply");
        CHECK(server_mem == data.bytes_);
    }
}
