// Device tests of the CM flows for servers: connections on resources the caller owns (one PD,
// CQ, SRQ and completion channel for several connections), queue pairs the caller created
// (extended post API, checked) connected through the CM, typed private data (a struct, a
// remote_span, an endpoint) and the timeout of every CM step, each naming its step.
#include "fixture.hpp"

#include "rdmacxx/checked.hpp" // opt-in: not part of the umbrella header
#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/cm/private_data.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
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

// One completion of `cq` within 20 s, which must be successful.
template <class Completion>
rx::work_completion next_ok(rx::completion_queue<Completion>& cq) {
    auto wc = cq.wait_one(20s);
    REQUIRE(wc.has_value());
    wc->throw_if_error();
    return *wc;
}

// What a client sends in its connect request: a plain struct, copied as its bytes.
struct hello {
    std::uint32_t client = 0;
    std::uint32_t messages = 0;
    char name[16] = {};
};

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A raw client id on `ch` with the address and route of the device's `port` resolved: a test's
// hand-driven peer (it names any QPN, and completes or refuses the handshake as told).
cm::id raw_client(cm::event_channel& ch, std::uint16_t port) {
    cm::id client{ch, cm::port_space::tcp};
    client.resolve_address(device_address(port), 2000ms);
    REQUIRE(ch.get(5s)->type() == cm::event_type::addr_resolved);
    client.resolve_route(2000ms);
    REQUIRE(ch.get(5s)->type() == cm::event_type::route_resolved);
    return client;
}

} // namespace

TEST_SUITE("cm server") {

    TEST_CASE_TEMPLATE("cm server: connections borrow one PD, CQ, SRQ and completion channel and never take each "
                       "other's completions",
                       C, rx::busy_poll, rx::event_driven) {
        cm::listener<rx::rc> server{device_address()};
        auto const port = server.port();
        rx::context& ctx = server.cm_id().context();
        rx::protection_domain pd{ctx};
        std::optional<rx::completion_channel> channel;
        std::optional<rx::completion_queue<C>> cq;
        if constexpr (C::uses_channel) {
            channel.emplace(ctx);
            cq.emplace(ctx, 256, *channel);
        } else {
            cq.emplace(ctx, 256);
        }
        rx::shared_receive_queue srq{pd, 64};
        test::buffer mem{pd, 8 * 64}; // one registration: slots 0-3 receive, 4-7 send
        cm::resources<C> const shared{
            .pd = pd, .send_cq = *cq, .recv_cq = *cq, .srq = &srq, .channel = channel ? &*channel : nullptr};
        for (std::size_t i = 0; i < 4; ++i)
            srq.post_recv(rx::recv{mem.span().subspan(i * 64, 64)}.id(i));

        // Two clients, self-contained.
        std::vector<cm::connection<rx::rc, rx::busy_poll>> clients;
        std::vector<std::unique_ptr<cm::connection<rx::rc, C>>> served;
        for (int i = 0; i < 2; ++i) {
            background srv([&] {
                served.push_back(std::make_unique<cm::connection<rx::rc, C>>(
                    server.get_request(20s).accept({}, cm::shared_qp<rx::rc>(shared))));
            });
            clients.push_back(cm::connect<rx::rc, rx::busy_poll>(device_address(port)));
            srv.join();
        }
        for (auto& s : served) {
            CHECK_FALSE(s->owns_resources());
            CHECK(&s->pd() == &pd);
            CHECK(&s->cq() == &*cq);
            CHECK(s->srq() == &srq);
            CHECK(s->cq_channel() == (channel ? &*channel : nullptr));
        }
        CHECK(clients[0].owns_resources());
        CHECK(clients[0].cq_channel() == nullptr); // busy_poll: no channel

        // Each client sends one message; both land in the one SRQ and the one CQ.
        for (std::size_t i = 0; i < 2; ++i) {
            test::buffer out{clients[i].pd(), 64};
            std::string const text = "from client " + std::to_string(i);
            std::memcpy(out.bytes_.data(), text.data(), text.size());
            clients[i].qp().post(rx::send{out.span().first(text.size())}.id(100 + i));
            CHECK(next_ok(clients[i].cq()).wr_id() == 100 + i);
        }
        std::map<std::uint32_t, std::string> got;
        for (int k = 0; k < 2; ++k) {
            auto const wc = next_ok(*cq);
            REQUIRE(wc.is_recv());
            got[wc.qp_num()] =
                std::string(reinterpret_cast<char const*>(mem.bytes_.data() + wc.wr_id() * 64), wc.byte_len());
        }
        CHECK(got[served[0]->qp().qp_num()] == "from client 0");
        CHECK(got[served[1]->qp().qp_num()] == "from client 1");

        // Client 1 sends again; destroying served connection 0 must leave that completion in the
        // shared CQ for us.
        test::buffer out1{clients[1].pd(), 64};
        std::memcpy(out1.bytes_.data(), "again", 5);
        clients[1].qp().post(rx::send{out1.span().first(5)}.id(7));
        CHECK(next_ok(clients[1].cq()).wr_id() == 7);
        std::uint32_t const qpn1 = served[1]->qp().qp_num();
        served.erase(served.begin());
        bool seen = false;
        for (int k = 0; k < 8 && !seen; ++k) {
            auto wc = cq->wait_one(5s);
            REQUIRE(wc.has_value());
            if (wc->qp_num() == qpn1) {
                REQUIRE(wc->ok());
                CHECK(wc->byte_len() == 5);
                seen = true;
            }
        }
        CHECK(seen);

        // The server answers client 1 from the shared registration.
        clients[1].qp().post_recv(rx::recv{out1.span()}.id(8));
        std::memcpy(mem.bytes_.data() + 5 * 64, "answer", 6);
        served[0]->qp().post(rx::send{mem.span().subspan(5 * 64, 6)}.id(9));
        CHECK(next_ok(*cq).wr_id() == 9);
        auto const wc = next_ok(clients[1].cq());
        CHECK(wc.wr_id() == 8);
        CHECK(std::string(reinterpret_cast<char const*>(out1.bytes_.data()), wc.byte_len()) == "answer");
        clients[1].disconnect(20s);
        CHECK(served[0]->wait_disconnected(20s));
    }

    TEST_CASE("cm server: UD through the CM and a multicast group on resources the caller owns") {
        cm::listener<rx::ud> server{device_address()};
        auto const port = server.port();
        rx::context& ctx = server.cm_id().context();
        rx::protection_domain pd{ctx};
        rx::completion_channel channel{ctx};
        rx::completion_queue<rx::event_driven> cq{ctx, 256, channel};
        cm::resources<rx::event_driven> const shared{
            .pd = pd, .send_cq = cq, .recv_cq = cq, .srq = nullptr, .channel = &channel};
        constexpr std::size_t n = 128;
        test::buffer mem{pd, 4 * (rx::ud::grh_bytes + n)}; // one registration for everything
        auto slot = [&](std::size_t i) {
            return mem.span().subspan(i * (rx::ud::grh_bytes + n), rx::ud::grh_bytes + n);
        };
        test::fill_pattern(std::span{mem.bytes_}.subspan(rx::ud::grh_bytes + n, n), 3);

        // UD: the server's QP and the client's on the same shared PD and CQ.
        std::optional<cm::connection<rx::ud, rx::event_driven>> served;
        background srv([&] {
            served.emplace(server.get_request(20s).accept(
                {}, cm::shared_qp<rx::ud>(shared), [&](auto& c) { c.qp().post_recv(rx::recv{slot(0)}.id(10)); }));
        });
        auto client = cm::connect(device_address(port), {}, cm::shared_qp<rx::ud>(shared));
        srv.join();
        CHECK_FALSE(client.owns_resources());
        CHECK(client.cq_channel() == &channel);
        client.qp().post(
            rx::send{slot(1).first(n)}.to(*client.peer_ah(), client.peer_qpn(), client.peer_qkey()).id(11));
        bool sent = false, received = false;
        for (int k = 0; k < 2; ++k) {
            auto const wc = next_ok(cq);
            if (wc.wr_id() == 11) sent = true;
            if (wc.wr_id() == 10) {
                CHECK(wc.qp_num() == served->qp().qp_num());
                auto const got = rx::ud_payload(std::span<std::byte>{mem.bytes_}.subspan(0, rx::ud::grh_bytes + n), wc);
                CHECK(std::equal(got.begin(), got.end(), mem.bytes_.begin() + (rx::ud::grh_bytes + n)));
                received = true;
            }
        }
        CHECK(sent);
        CHECK(received);

        // Multicast: a receiving and a sending group member, both on the shared PD and CQ.
        auto const group = cm::address::resolve("239.1.2.4", 0);
        cm::multicast_group<rx::event_driven> receiver{device_address(), group, {}, cm::shared_qp<rx::ud>(shared)};
        cm::multicast_group<rx::event_driven> sender{device_address(), group, {}, cm::shared_qp<rx::ud>(shared)};
        CHECK(&receiver.pd() == &pd);
        CHECK(receiver.cq_channel() == &channel);
        receiver.qp().post_recv(rx::recv{slot(2)}.id(20));
        sender.qp().post(rx::send{slot(1).first(n)}.to(sender.ah(), sender.qpn(), sender.qkey()).id(21));
        sent = received = false;
        for (int k = 0; k < 2; ++k) {
            auto const wc = next_ok(cq);
            if (wc.wr_id() == 21) sent = true;
            if (wc.wr_id() == 20) {
                CHECK(wc.qp_num() == receiver.qp().qp_num());
                CHECK(wc.byte_len() == rx::ud::grh_bytes + n);
                received = true;
            }
        }
        CHECK(sent);
        CHECK(received);
    }

    TEST_CASE("cm server: resources whose channel is not the CQs' are refused before anything is sent") {
        cm::listener<rx::rc> server{device_address()};
        rx::context& ctx = server.cm_id().context();
        rx::protection_domain pd{ctx};
        rx::completion_channel ch_a{ctx}, ch_b{ctx};
        rx::completion_queue<rx::event_driven> cq{ctx, 16, ch_a};
        cm::resources<rx::event_driven> const wrong{
            .pd = pd, .send_cq = cq, .recv_cq = cq, .srq = nullptr, .channel = &ch_b};
        auto connect_wrong = [&] {
            return cm::connect(device_address(server.port()), {}, cm::shared_qp<rx::rc>(wrong));
        };
        CHECK_THROWS_AS((void)connect_wrong(), rx::argument_error);
        CHECK_THROWS_AS((void)server.get_request(300ms), cm::timeout_error); // nothing reached the listener
    }

    TEST_CASE_TEMPLATE("cm server: a QP the caller created, with a remote_span and a struct as typed private data", Q,
                       rx::queue_pair<rx::rc, rx::busy_poll, rx::extended_post>,
                       rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>, rx::legacy_post>) {
        using C = typename Q::completion_type;
        cm::listener<rx::rc> server{device_address()};
        auto const port = server.port();
        rx::context& ctx = server.cm_id().context();
        rx::protection_domain pd{ctx};
        rx::completion_queue<C> scq{ctx, 64}, ccq{ctx, 64};
        Q sqp{pd, scq, scq}, cqp{pd, ccq, ccq};
        test::buffer target{pd, 4096}, source{pd, 4096}, inbox{pd, 64};
        test::fill_pattern(source.bytes_, 5);

        hello seen{};
        std::vector<std::byte> accept_data;
        background srv([&] {
            auto req = server.get_request(20s);
            seen = cm::from_private_data<hello>(req.private_data());
            // The remote_span and the endpoint travel in their wire formats: 64 of 196 bytes.
            rx::endpoint me;
            me.qpn = sqp.qp_num();
            auto const pd_bytes = cm::to_private_data<cm::private_data_message::accept, rx::rc>(target.mr.remote(), me);
            cm::connection_options opt;
            opt.settings.remote_access = rx::access::remote_write; // the client WRITEs into target
            opt.settings.local_ack_timeout = 50ms; // on the passive side of a user's QP too: 50 ms -> 14
            opt.private_data.assign(pd_bytes.begin(), pd_bytes.end());
            auto conn =
                req.accept(opt, cm::user_qp(sqp), [&](auto& c) { c.qp().post_recv(rx::recv{inbox.span()}.id(1)); });
            ibv_qp_attr attr{};
            ibv_qp_init_attr init{};
            CHECK(::ibv_query_qp(sqp.native_handle(), &attr, IBV_QP_TIMEOUT, &init) == 0);
            CHECK(attr.timeout == 14);
            CHECK(conn.wait_disconnected(20s));
        });
        hello const h{.client = 7, .messages = 1, .name = "typed"};
        auto const hello_bytes = cm::to_private_data<cm::private_data_message::connect, rx::rc>(h);
        cm::connection_options opt;
        opt.private_data.assign(hello_bytes.begin(), hello_bytes.end());
        auto conn = cm::connect(device_address(port), opt, cm::user_qp(cqp));
        CHECK(&conn.qp() == &cqp);
        CHECK(cqp.state() == IBV_QPS_RTS);
        auto const [where, ep] =
            cm::from_private_data<rx::remote_span<std::byte>, rx::endpoint>(conn.peer_private_data());
        CHECK(where.size() == 4096);
        CHECK(where.rkey() == target.mr.rkey());
        CHECK(ep.qpn == conn.peer_parameters().qp_num);
        CHECK(ep.qpn == sqp.qp_num());

        // WRITE through the received remote_span, then SEND to the posted receive.
        cqp.post(rx::write{source.span(), where}.id(2));
        CHECK(next_ok(ccq).wr_id() == 2);
        cqp.post(rx::send{source.span().first(64)}.id(3));
        CHECK(next_ok(ccq).wr_id() == 3);
        CHECK(next_ok(scq).wr_id() == 1);
        CHECK(target.bytes_ == source.bytes_);
        if constexpr (rx::detail::tracks_in_flight<C>) CHECK(cqp.in_flight_sends() == 0);
        conn.disconnect(20s);
        CHECK(cqp.state() == IBV_QPS_ERR);
        srv.join();
        CHECK(seen.client == 7);
        CHECK(std::string{seen.name} == "typed");
    }

    TEST_CASE("cm server: typed private data that does not decode is an argument_error") {
        std::array<std::byte, 8> short_data{};
        CHECK_THROWS_AS((void)cm::from_private_data<hello>(short_data), rx::argument_error);
        std::array<std::byte, 40> not_a_span{};
        CHECK_THROWS_AS((void)cm::from_private_data<rx::remote_span<std::byte>>(not_a_span), rx::argument_error);
        static_assert(cm::private_data_size<rx::remote_span<int>> == 32);
        static_assert(cm::private_data_size<hello> == sizeof(hello));
    }

    TEST_CASE("cm server: every CM step that can be made to time out throws timeout_error naming it, within its "
              "bound") {
        SUBCASE("connect: a connect request to a host that drops it") {
            // x.y.z.77 on the device's subnet, where nobody is: on the dummy netdev of Soft-RoCE the
            // neighbour resolves without asking and the request is dropped unanswered.
            std::string ip = device_ip();
            ip = ip.substr(0, ip.rfind('.')) + ".77";
            cm::connection_options opt;
            opt.deadlines.resolve = 1000ms;
            opt.deadlines.connect = 1500ms;
            auto const bound = 2 * (opt.deadlines.resolve + 1000ms) + *opt.deadlines.connect;
            auto const start = std::chrono::steady_clock::now();
            try {
                (void)cm::connect<rx::rc, rx::busy_poll>(cm::address::resolve(ip, 7471), opt);
                FAIL("connected to an absent host");
            } catch (cm::timeout_error const& e) {
                MESSAGE("connect: " << std::string{e.what()} << " after " << seconds_since(start) << " s (bound "
                                    << std::chrono::duration<double>(bound).count() << " s + 2 s slack)");
                CHECK(e.step() == cm::step::connect);
                CHECK(std::string{e.what()}.find("connect timed out") != std::string::npos);
            }
            CHECK(std::chrono::steady_clock::now() - start < bound + 2s);
        }
        SUBCASE("connect of a caller's QP: the timeout names the step and leaves the QP in ERR") {
            std::string ip = device_ip();
            ip = ip.substr(0, ip.rfind('.')) + ".77";
            cm::listener<rx::rc> bound{device_address()}; // only for the device's context
            rx::context& ctx = bound.cm_id().context();
            rx::protection_domain pd{ctx};
            rx::completion_queue<rx::busy_poll> cq{ctx, 16};
            rx::queue_pair<rx::rc, rx::busy_poll, rx::extended_post> qp{pd, cq, cq};
            cm::connection_options opt;
            opt.deadlines.connect = 1000ms;
            auto const start = std::chrono::steady_clock::now();
            try {
                (void)cm::connect(cm::address::resolve(ip, 7471), opt, cm::user_qp(qp));
                FAIL("connected to an absent host");
            } catch (cm::timeout_error const& e) {
                CHECK(e.step() == cm::step::connect);
            }
            CHECK(std::chrono::steady_clock::now() - start < 2 * (opt.deadlines.resolve + 1000ms) + 1000ms + 2s);
            CHECK(qp.state() == IBV_QPS_ERR);
        }
        SUBCASE("accept: a client that never completes the handshake") {
            cm::listener<rx::rc> server{device_address()};
            auto const port = server.port();
            // A raw client id: connects naming a QPN, takes the connect response and never sends the RTU.
            cm::event_channel ch;
            cm::id client = raw_client(ch, port);
            client.connect({}, {}, 0x1234, false);
            auto req = server.get_request(10s);
            cm::connection_options opt;
            opt.deadlines.accept = 1000ms;
            auto const start = std::chrono::steady_clock::now();
            try {
                (void)req.accept<rx::rc, rx::busy_poll>(opt);
                FAIL("accepted a client that never sent its RTU");
            } catch (cm::timeout_error const& e) {
                MESSAGE("accept: " << std::string{e.what()} << " after " << seconds_since(start)
                                   << " s (bound 1 s + 2 s slack)");
                CHECK(e.step() == cm::step::accept);
            }
            CHECK(std::chrono::steady_clock::now() - start < 3s);
            auto const resp = ch.get(5s);
            REQUIRE(resp);
            CHECK(resp->type() == cm::event_type::connect_response);
        }
        SUBCASE("disconnect: a peer that never answers the DREQ") {
            // Accepted on an engine nobody drives once it is established: no DREP goes back.
            cm::engine eng;
            std::optional<cm::connection<rx::rc, rx::busy_poll>> silent;
            cm::listener<rx::rc> server{
                eng, device_address(), {}, [&](cm::connect_request req) {
                    cm::accept<rx::rc, rx::busy_poll>(
                        eng, std::move(req), {}, {}, {},
                        [&](std::exception_ptr error, std::optional<cm::connection<rx::rc, rx::busy_poll>> c) {
                            if (!error) silent = std::move(c);
                        });
                }};
            auto const port = server.port();
            background srv([&] {
                for (auto const end = std::chrono::steady_clock::now() + 20s;
                     !silent && std::chrono::steady_clock::now() < end;)
                    (void)eng.wait(100ms);
            });
            cm::connection_options opt;
            opt.deadlines.disconnect = 800ms;
            auto conn = cm::connect<rx::rc, rx::busy_poll>(device_address(port), opt);
            srv.join();
            auto const start = std::chrono::steady_clock::now();
            try {
                conn.disconnect();
                FAIL("a DREQ nobody answered completed");
            } catch (cm::timeout_error const& e) {
                MESSAGE("disconnect: " << std::string{e.what()} << " after " << seconds_since(start)
                                       << " s (bound 0.8 s + 2 s slack)");
                CHECK(e.step() == cm::step::disconnect);
            }
            CHECK(std::chrono::steady_clock::now() - start < 2800ms);
            CHECK(conn.state() == cm::connection_state::disconnected);
        }
    }

    TEST_CASE("cm server: a failure event ends an accept on an engine: a typed error, the user's QP in ERR, the "
              "server's loop goes on") {
        // Before the engine: the connection stayed `connecting` with its QP in RTS, and
        // wait_disconnected never returned true.
        cm::engine eng;
        rx::context ctx = test::open_test_device();
        std::optional<cm::connect_request> request;
        cm::listener<rx::rc> server{
            eng, device_address(), {}, [&](cm::connect_request r) { request.emplace(std::move(r)); }};
        auto const port = server.port();
        rx::protection_domain pd{server.cm_id().context()};
        rx::completion_queue<rx::busy_poll> cq{server.cm_id().context(), 16};
        rx::queue_pair<rx::rc, rx::busy_poll> qp{pd, cq, cq};
        cm::event_channel ch;
        cm::id client = raw_client(ch, port);
        client.connect({}, {}, 0x1234, false); // a raw client: it will refuse the server's reply
        for (auto const end = std::chrono::steady_clock::now() + 10s;
             !request && std::chrono::steady_clock::now() < end;)
            (void)eng.wait(100ms);
        REQUIRE(request.has_value());
        std::exception_ptr failure;
        bool finished = false;
        cm::accept<rx::rc, rx::busy_poll>(eng, std::move(*request), {}, cm::user_qp(qp), {},
                                          [&](std::exception_ptr error, auto c) {
                                              failure = error;
                                              finished = true;
                                              CHECK_FALSE(c.has_value());
                                          });
        CHECK(qp.state() == IBV_QPS_RTS);
        CHECK(eng.pending() == 1);
        auto const reply = ch.get(10s);
        REQUIRE(reply.has_value());
        REQUIRE(reply->type() == cm::event_type::connect_response);
        client.reject(); // the client refuses the reply: the server's id sees `rejected`
        for (auto const end = std::chrono::steady_clock::now() + 10s;
             !finished && std::chrono::steady_clock::now() < end;)
            (void)eng.wait(100ms);
        REQUIRE(finished);
        REQUIRE(failure);
        try {
            std::rethrow_exception(failure);
        } catch (cm::cm_error const& e) {
            MESSAGE("the accept ended with: " << e.what());
        }
        CHECK(qp.state() == IBV_QPS_ERR);
        CHECK(eng.pending() == 0);
        CHECK(eng.registered() == 1); // the listener alone: the failed connection left
    }

    TEST_CASE("cm server: a deadline of milliseconds::max() waits for ever, and one over 24.8 days is clamped") {
        // Before: now() + max() overflowed (undefined, and timed out at once), and the resolution's
        // int milliseconds wrapped negative.
        cm::listener<rx::rc> server{device_address()};
        auto const port = server.port();
        background srv([&] {
            auto req = server.get_request(20s);
            std::this_thread::sleep_for(300ms); // the client waits on its "forever" connect deadline
            auto conn = req.accept<rx::rc, rx::busy_poll>();
            (void)conn.wait_disconnected(20s);
        });
        cm::connection_options opt;
        opt.deadlines.resolve = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours{24 * 26});
        opt.deadlines.connect = std::chrono::milliseconds::max();
        opt.deadlines.disconnect = 20s;
        auto const start = std::chrono::steady_clock::now();
        auto conn = cm::connect<rx::rc, rx::busy_poll>(device_address(port), opt);
        CHECK(std::chrono::steady_clock::now() - start >= 300ms); // it waited for the late accept
        CHECK(conn.state() == cm::connection_state::established);
        conn.disconnect();
        srv.join();
    }
}
