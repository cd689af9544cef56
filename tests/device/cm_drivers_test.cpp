// The one CM handshake through its three drivers — blocking calls, a user's loop on a
// `cm::engine`, Asio's reactor on an `io::cm_engine` — with the same scenario table and the same
// outcomes: connect and accept with a verified exchange, a disconnect from either side, a
// reject with private data, each step's deadline (connect — also to an address nobody answers —
// and accept), a peer killed with SIGKILL on either side. Each driver is a small adapter below; the scenarios are
// written once.
//
// The killed peers are the device_tests program re-executed (cm_fault_test.cpp's child entry:
// "peer connect PORT", "peer accept"), beside this program in the build tree.
#include "asio_net.hpp"
#include "child_process.hpp"
#include "fixture.hpp"

#include "rdmacxx/asio.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace drivers_test {

using conn = cm::connection<rx::rc, rx::busy_poll>;
using before_accept_fn = std::function<void(conn&)>;

// What one side's handshake gave: the connection or the error.
struct result {
    std::exception_ptr error;
    std::optional<conn> c;
    std::atomic<bool> done{false};

    // The `done` of a handshake on an engine (or an Asio completion handler) that fills it.
    auto handler() {
        return [this](std::exception_ptr e, std::optional<conn> made) {
            error = std::move(e);
            c = std::move(made);
            done = true;
        };
    }

    // Ready for the next handshake.
    void reset() {
        error = nullptr;
        c.reset();
        done = false;
    }
};

double ms_since(steady::time_point t0) { return std::chrono::duration<double, std::milli>(steady::now() - t0).count(); }

// `ba` as a before_accept (nothing when empty).
auto prepared(before_accept_fn ba) {
    return [ba = std::move(ba)](conn& c) {
        if (ba) ba(c);
    };
}

// Blocking calls, each on a thread of its own so that both sides run from one test.
struct blocking_driver {
    static constexpr char const* name = "blocking";
    std::optional<cm::listener<rx::rc>> listener;
    result accepted, connected;
    std::jthread server, client;

    std::uint16_t listen() {
        listener.emplace(test::device_address(0));
        return listener->port();
    }
    std::uint16_t listen_rejecting(std::vector<std::byte> data) {
        auto const port = listen();
        server = std::jthread{[this, data] {
            try {
                listener->get_request(30s).reject(data);
            } catch (...) {
                accepted.error = std::current_exception();
            }
            accepted.done = true;
        }};
        return port;
    }
    void accept_one(cm::connection_options opt, before_accept_fn ba) {
        if (server.joinable()) server.join();
        accepted.reset();
        server = std::jthread{[this, opt, ba] {
            try {
                accepted.c.emplace(listener->get_request(30s).accept<rx::rc, rx::busy_poll>(opt, {}, [&ba](conn& c) {
                    if (ba) ba(c);
                }));
            } catch (...) {
                accepted.error = std::current_exception();
            }
            accepted.done = true;
        }};
    }
    void connect(cm::address to, cm::connection_options opt) {
        if (client.joinable()) client.join();
        connected.reset();
        client = std::jthread{[this, to, opt] {
            try {
                connected.c.emplace(cm::connect<rx::rc, rx::busy_poll>(to, opt));
            } catch (...) {
                connected.error = std::current_exception();
            }
            connected.done = true;
        }};
    }
    // The connections' monitor threads see their events: this only waits, polling `done`.
    template <class Pred>
    bool progress_until(Pred done, std::chrono::milliseconds bound) {
        for (auto const end = steady::now() + bound; !done() && steady::now() < end;)
            std::this_thread::sleep_for(2ms);
        return done();
    }
};

// A user's loop: one cm::engine, the listener's requests to a callback, progress by wait().
struct engine_driver {
    static constexpr char const* name = "engine";
    cm::engine eng;
    std::function<void(cm::connect_request)> on_request;
    std::optional<cm::listener<rx::rc>> listener;
    result accepted, connected;

    std::uint16_t listen() {
        listener.emplace(eng, test::device_address(0), cm::listener_options{},
                         [this](cm::connect_request r) { on_request(std::move(r)); });
        return listener->port();
    }
    std::uint16_t listen_rejecting(std::vector<std::byte> data) {
        on_request = [this, data](cm::connect_request r) {
            r.reject(data);
            accepted.done = true;
        };
        return listen();
    }
    void accept_one(cm::connection_options opt, before_accept_fn ba) {
        accepted.reset();
        on_request = [this, opt, ba](cm::connect_request r) {
            cm::accept<rx::rc, rx::busy_poll>(eng, std::move(r), opt, {}, prepared(ba), accepted.handler());
        };
    }
    void connect(cm::address to, cm::connection_options opt) {
        connected.reset();
        cm::connect<rx::rc, rx::busy_poll>(eng, to, opt, {}, connected.handler());
    }
    template <class Pred>
    bool progress_until(Pred done, std::chrono::milliseconds bound) {
        for (auto const end = steady::now() + bound; !done() && steady::now() < end;)
            (void)eng.wait(10ms);
        return done();
    }
};

// Asio: an io::cm_engine driven by the io_context, async_connect and async_accept on it (a
// reject: a listener on its cm::engine, as cm_engine's docs allow).
struct asio_driver {
    static constexpr char const* name = "asio";
    ::asio::io_context io;
    rxa::cm_engine eng{io.get_executor()};
    std::optional<rxa::cm_acceptor<rx::rc>> acceptor;
    std::optional<cm::listener<rx::rc>> rejecting;
    result accepted, connected;

    std::uint16_t listen() {
        acceptor.emplace(eng, test::device_address(0));
        return acceptor->port();
    }
    std::uint16_t listen_rejecting(std::vector<std::byte> data) {
        rejecting.emplace(eng.engine(), test::device_address(0), cm::listener_options{},
                          [this, data](cm::connect_request r) {
                              r.reject(data);
                              accepted.done = true;
                          });
        eng.arm();
        return rejecting->port();
    }
    void accept_one(cm::connection_options opt, before_accept_fn ba) {
        accepted.reset();
        rxa::async_accept<rx::busy_poll>(*acceptor, opt, {}, prepared(ba), rxa::as_exception(accepted.handler()));
    }
    void connect(cm::address to, cm::connection_options opt) {
        connected.reset();
        rxa::async_connect<rx::rc, rx::busy_poll>(eng, to, opt, {}, rxa::as_exception(connected.handler()));
    }
    template <class Pred>
    bool progress_until(Pred done, std::chrono::milliseconds bound) {
        for (auto const end = steady::now() + bound; !done() && steady::now() < end;) {
            if (io.stopped()) io.restart();
            io.run_for(10ms);
        }
        return done();
    }
};

template <class Driver>
result& wait_for(Driver& d, result& r, std::chrono::milliseconds bound) {
    REQUIRE_MESSAGE(d.progress_until([&] { return r.done.load(); }, bound),
                    std::string{Driver::name} << ": no outcome within " << bound.count() << " ms");
    return r;
}

// The error `r` ended with, as `E` (fails the test when it is another, or none).
template <class E>
E error_of(result const& r) {
    REQUIRE(r.error);
    try {
        std::rethrow_exception(r.error);
    } catch (E const& e) {
        return e;
    } catch (std::exception const& e) {
        FAIL("another error: " << e.what());
    }
    throw std::logic_error("unreachable");
}

// A receive posted before the accept (a client may send at once), in memory kept here.
struct inbox {
    std::unique_ptr<test::buffer> buf;
    before_accept_fn prepare() {
        return [this](conn& c) {
            buf = std::make_unique<test::buffer>(c.pd(), 256);
            c.qp().post_recv(rx::recv{buf->span().first(128)}.id(1));
        };
    }
};

// Both sides connected through `d`, a receive posted on the server's QP before the accept.
template <class Driver>
std::pair<conn*, conn*> connect_pair(Driver& d, inbox& in, cm::connection_options const& opt = {}) {
    auto const port = d.listen();
    d.accept_one(opt, in.prepare());
    d.connect(test::device_address(port), opt);
    auto& s = wait_for(d, d.accepted, 30s);
    auto& c = wait_for(d, d.connected, 30s);
    if (s.error) std::rethrow_exception(s.error);
    if (c.error) std::rethrow_exception(c.error);
    REQUIRE(s.c);
    REQUIRE(c.c);
    return {&*s.c, &*c.c};
}

} // namespace drivers_test

using namespace drivers_test;

#define RDMACXX_DRIVERS blocking_driver, engine_driver, asio_driver

TEST_CASE_TEMPLATE("cm drivers: connect, accept, a verified SEND, and a disconnect from either side end the same "
                   "way through every driver",
                   D, RDMACXX_DRIVERS) {
    bool client_leaves = true;
    SUBCASE("the client disconnects") { client_leaves = true; }
    SUBCASE("the server disconnects") { client_leaves = false; }
    D d;
    inbox in;
    auto [server, client] = connect_pair(d, in);
    CHECK(server->state() == cm::connection_state::established);
    CHECK(client->state() == cm::connection_state::established);
    CHECK(server->cm_id().peer_address().port() == client->cm_id().local_address().port());

    test::buffer out(client->pd(), 128);
    test::fill_pattern(out.bytes_, 9);
    client->qp().post(rx::send{out.span().first(100)}.id(2));
    auto const sent = client->cq().wait_one(10s);
    REQUIRE(sent.has_value());
    CHECK(sent->ok());
    auto const got = server->cq().wait_one(10s);
    REQUIRE(got.has_value());
    REQUIRE(got->ok());
    CHECK(got->byte_len() == 100);
    CHECK(std::memcmp(in.buf->bytes_.data(), out.bytes_.data(), 100) == 0);

    conn& leaving = client_leaves ? *client : *server;
    conn& staying = client_leaves ? *server : *client;
    test::buffer posted(staying.pd(), 64);
    staying.qp().post_recv(rx::recv{posted.span()}.id(3));
    auto const t0 = steady::now();
    leaving.disconnect();
    CHECK(leaving.state() == cm::connection_state::disconnected);
    REQUIRE(d.progress_until([&] { return staying.state() != cm::connection_state::established; }, 10s));
    double const took = ms_since(t0);
    CHECK(staying.state() == cm::connection_state::disconnected);
    auto const flushed = staying.cq().wait_one(10s);
    REQUIRE(flushed.has_value());
    CHECK(flushed->status() == IBV_WC_WR_FLUSH_ERR);
    MESSAGE(std::string{D::name} << ": " << (client_leaves ? "client" : "server")
                                 << " disconnected; the other side saw it after " << took << " ms");
}

TEST_CASE_TEMPLATE("cm drivers: a reject with private data reaches the client as rejected_error with the bytes", D,
                   RDMACXX_DRIVERS) {
    D d;
    std::vector<std::byte> const why{std::byte{'f'}, std::byte{'u'}, std::byte{'l'}, std::byte{'l'}};
    auto const port = d.listen_rejecting(why);
    d.connect(test::device_address(port), {});
    auto const e = error_of<cm::rejected_error>(wait_for(d, d.connected, 30s));
    CHECK(e.by_consumer());
    REQUIRE(e.private_data().size() >= why.size());
    CHECK(std::equal(why.begin(), why.end(), e.private_data().begin()));
    CHECK(wait_for(d, d.accepted, 10s).done);
}

TEST_CASE_TEMPLATE("cm drivers: each step's deadline ends its step with timeout_error naming it, within its bound", D,
                   RDMACXX_DRIVERS) {
    D d;
    SUBCASE("an address on the subnet that nobody answers (rxe resolves it at once: the connect step ends it)") {
        cm::connection_options opt;
        opt.deadlines.resolve_address = 1000ms;
        opt.deadlines.connect = 1000ms;
        auto const t0 = steady::now();
        d.connect(cm::address::resolve("198.18.0.77", 7471), opt);
        auto const e = error_of<cm::timeout_error>(wait_for(d, d.connected, 20s));
        double const took = ms_since(t0);
        MESSAGE(std::string{D::name} << ": after " << took << " ms: " << std::string{e.what()});
        CHECK((e.step() == cm::step::resolve_address || e.step() == cm::step::connect));
        CHECK(took < 1000.0 + 1000.0 + 3000.0); // the step, the CM's own second of slack, TCG
    }
    SUBCASE("connect: a listener that never takes its requests") {
        cm::listener<rx::rc> mute{test::device_address(0)};
        cm::connection_options opt;
        opt.deadlines.connect = 1000ms;
        auto const t0 = steady::now();
        d.connect(test::device_address(mute.port()), opt);
        auto const e = error_of<cm::timeout_error>(wait_for(d, d.connected, 20s));
        double const took = ms_since(t0);
        MESSAGE(std::string{D::name} << ": after " << took << " ms: " << std::string{e.what()});
        CHECK(e.step() == cm::step::connect);
        CHECK(took < 1000.0 + 3000.0);
    }
    SUBCASE("accept: a client that never sends the RTU; the next client is served") {
        auto const port = d.listen();
        cm::connection_options opt;
        opt.deadlines.accept = 1000ms;
        d.accept_one(opt, {});
        cm::event_channel ch; // a hand-driven client: it connects naming a QPN and stops there
        cm::id silent{ch, cm::port_space::tcp};
        silent.resolve_address(test::device_address(port), 2000ms);
        REQUIRE(ch.get(5s)->type() == cm::event_type::addr_resolved);
        silent.resolve_route(2000ms);
        REQUIRE(ch.get(5s)->type() == cm::event_type::route_resolved);
        silent.connect({}, {}, 0x1234, false);
        auto const t0 = steady::now();
        auto const e = error_of<cm::timeout_error>(wait_for(d, d.accepted, 20s));
        double const took = ms_since(t0);
        MESSAGE(std::string{D::name} << ": after " << took << " ms: " << std::string{e.what()});
        CHECK(e.step() == cm::step::accept);
        CHECK(took < 1000.0 + 3000.0);
        inbox in;
        d.accept_one({}, in.prepare());
        d.connect(test::device_address(port), {});
        auto& s = wait_for(d, d.accepted, 30s);
        auto& c = wait_for(d, d.connected, 30s);
        CHECK_FALSE(s.error);
        CHECK_FALSE(c.error);
        REQUIRE(s.c);
        CHECK(s.c->state() == cm::connection_state::established);
    }
}

TEST_CASE_TEMPLATE("cm drivers: a peer killed with SIGKILL ends the connection on either side, its receives flushed, "
                   "within the bound",
                   D, RDMACXX_DRIVERS) {
    bool we_accept = true;
    SUBCASE("the client killed") { we_accept = true; }
    SUBCASE("the server killed") { we_accept = false; }
    D d;
    std::string const program = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "device_tests";
    REQUIRE(std::filesystem::exists(program));
    std::optional<test::child_process> peer;
    conn* ours = nullptr;
    inbox in;
    if (we_accept) {
        auto const port = d.listen();
        d.accept_one({}, in.prepare());
        peer.emplace("peer connect " + std::to_string(port), program);
        auto& s = wait_for(d, d.accepted, 30s);
        if (s.error) std::rethrow_exception(s.error);
        ours = &*s.c;
    } else {
        peer.emplace("peer accept", program);
        std::string const said = peer->line(30s);
        REQUIRE(said.rfind("port ", 0) == 0);
        d.connect(test::device_address(static_cast<std::uint16_t>(std::stoi(said.substr(5)))), {});
        auto& c = wait_for(d, d.connected, 30s);
        if (c.error) std::rethrow_exception(c.error);
        ours = &*c.c;
        in.buf = std::make_unique<test::buffer>(ours->pd(), 256);
        ours->qp().post_recv(rx::recv{in.buf->span().first(128)}.id(1));
    }
    REQUIRE(peer->line(30s) == "up");
    auto const killed = steady::now();
    peer->kill();
    constexpr auto bound = 20s; // the dead peer's kernel sends the DREQ at once; generous for TCG
    REQUIRE(d.progress_until([&] { return ours->state() != cm::connection_state::established; }, bound));
    double const seen = ms_since(killed);
    CHECK(ours->state() == cm::connection_state::disconnected);
    auto const flushed = ours->cq().wait_one(10s);
    REQUIRE(flushed.has_value());
    CHECK(flushed->wr_id() == 1);
    CHECK(flushed->status() == IBV_WC_WR_FLUSH_ERR);
    CHECK(peer->wait(10s).has_value());
    MESSAGE(std::string{D::name} << ": the " << (we_accept ? "client" : "server") << " killed; our side ended after "
                                 << seen << " ms (bound " << bound.count() << " s)");
}

// ---- churn: clients killed one after another, through each driver ----------------------------

namespace drivers_test {

// The echo of a churn server, whatever its driver: one PD, one busy-poll CQ and one SRQ of
// 64-byte slots for every connection; each message goes back from its slot to the QP it came
// from, and the slot's receive is posted again once that send completed (or was flushed).
// Connections whose peer went (state no longer established) are destroyed by `echo_and_reap`.
// The messages of connections not adopted yet wait under a lock (the blocking driver's
// `before_accept` runs on its accept thread); no QP is used before its accept returned.
class echo_core {
public:
    static constexpr std::uint32_t slots = 256;
    using connection = conn;

    std::atomic<std::size_t> accept_failures{0};
    std::size_t echoed = 0, ended = 0;

    [[nodiscard]] std::size_t open() const noexcept { return conns_.size(); }

    // What an accept's before_accept does (on the blocking driver's accept thread): the QPN
    // noted before the client may send; its messages wait until the connection is adopted.
    void note(connection& c) {
        std::lock_guard lock{mutex_};
        (void)pending_[c.qp().qp_num()];
    }
    // On the pump's thread: an accepted connection, owned from now on, the messages that waited
    // for it echoed; or the failure of a client killed mid-handshake, its waiting receives
    // posted again. No QP is used before its accept returned.
    void adopt(std::exception_ptr error, std::optional<connection> c, std::uint32_t qpn) {
        std::vector<std::pair<std::uint32_t, std::uint32_t>> waited;
        {
            std::lock_guard lock{mutex_};
            if (auto p = pending_.find(qpn); p != pending_.end()) {
                waited = std::move(p->second);
                pending_.erase(p);
            }
        }
        if (error) {
            ++accept_failures;
            for (auto [i, len] : waited)
                srq_->post_recv(rx::recv{slot(i)}.id(i));
            return;
        }
        auto& owned = conns_[qpn] = std::make_unique<connection>(std::move(*c));
        qps_[qpn] = &owned->qp();
        for (auto [i, len] : waited)
            echo(owned->qp(), i, len);
    }

    // Every completion of the CQ, then the connections that ended.
    void echo_and_reap() {
        std::array<rx::work_completion, 16> wcs;
        for (std::size_t n; (n = cq_->poll(std::span{wcs})) != 0;) {
            for (std::size_t k = 0; k < n; ++k) {
                auto const& wc = wcs[k];
                auto const i = static_cast<std::uint32_t>(wc.wr_id() % slots);
                if (wc.wr_id() >= slots || !wc.ok()) { // an echo sent or flushed, or a flushed receive
                    if (wc.wr_id() >= slots || wc.is_recv()) srq_->post_recv(rx::recv{slot(i)}.id(i));
                    continue;
                }
                if (auto it = qps_.find(wc.qp_num()); it != qps_.end()) {
                    echo(*it->second, i, wc.byte_len());
                    continue;
                }
                std::unique_lock lock{mutex_};
                if (auto p = pending_.find(wc.qp_num()); p != pending_.end()) { // not adopted yet
                    p->second.emplace_back(i, wc.byte_len());
                    continue;
                }
                lock.unlock();
                srq_->post_recv(rx::recv{slot(i)}.id(i)); // its connection is gone already
            }
        }
        for (auto it = conns_.begin(); it != conns_.end();) {
            if (it->second->state() == cm::connection_state::established) {
                ++it;
                continue;
            }
            qps_.erase(it->first);
            it = conns_.erase(it);
            ++ended;
        }
    }

protected:
    // The shared resources on `ctx` (the listener's device), the SRQ's receives posted.
    void init(rx::context& ctx) {
        pd_.emplace(ctx);
        cq_.emplace(ctx, 4096);
        srq_.emplace(*pd_, slots);
        memory_.resize(std::size_t{slots} * 64);
        mr_.emplace(pd_->register_memory(std::span{memory_}, rx::access::local_write));
        for (std::uint32_t i = 0; i < slots; ++i)
            srq_->post_recv(rx::recv{slot(i)}.id(i));
    }
    [[nodiscard]] cm::resources<rx::busy_poll> shared() {
        return {.pd = *pd_, .send_cq = *cq_, .recv_cq = *cq_, .srq = &*srq_};
    }
    // The connections go before the resources they borrow.
    void clear() { conns_.clear(); }

private:
    rx::local_span<std::byte> slot(std::uint32_t i) { return mr_->span().subspan(std::size_t{i} * 64, 64); }
    // The message in slot `i` (`len` bytes) sent back on `qp`.
    void echo(rx::queue_pair<rx::rc, rx::busy_poll>& qp, std::uint32_t i, std::uint32_t len) {
        qp.post(rx::send{slot(i).first(len)}.id(slots + i));
        ++echoed;
    }

    std::optional<rx::protection_domain> pd_;
    std::optional<rx::completion_queue<rx::busy_poll>> cq_;
    std::optional<rx::shared_receive_queue> srq_;
    std::vector<std::byte> memory_;
    std::optional<rx::memory_region> mr_;
    std::mutex mutex_;                                                                      // for pending_
    std::map<std::uint32_t, std::vector<std::pair<std::uint32_t, std::uint32_t>>> pending_; // QPN: (slot, bytes)
    std::map<std::uint32_t, connection::qp_type*> qps_;                                     // the pump's thread only
    std::map<std::uint32_t, std::unique_ptr<connection>> conns_;
};

// A user's loop: the engine's listener hands each request to cm::accept.
class engine_churn : public echo_core {
public:
    static constexpr char const* name = "engine";
    engine_churn()
        : listener_(engine_, test::device_address(0), {.backlog = 64}, [this](cm::connect_request r) {
              auto const qpn = std::make_shared<std::uint32_t>(0);
              cm::accept<rx::rc, rx::busy_poll>(
                  engine_, std::move(r), {}, cm::shared_qp<rx::rc>(shared()),
                  [this, qpn](connection& c) {
                      *qpn = c.qp().qp_num();
                      note(c);
                  },
                  [this, qpn](std::exception_ptr e, std::optional<connection> c) { adopt(e, std::move(c), *qpn); });
          }) {
        init(listener_.cm_id().context());
    }
    ~engine_churn() { clear(); }
    [[nodiscard]] std::uint16_t port() const noexcept { return listener_.port(); }
    void pump() {
        (void)engine_.process();
        echo_and_reap();
    }
    void check_idle() {
        CHECK(engine_.pending() == 0);
        CHECK(engine_.registered() == 1); // the listener alone
    }

private:
    cm::engine engine_;
    cm::listener<rx::rc> listener_;
};

// Asio: one async_accept always outstanding on a cm_acceptor; the reactor polled.
class asio_churn : public echo_core {
public:
    static constexpr char const* name = "asio";
    asio_churn() : acceptor_(eng_, test::device_address(0), {.backlog = 64}) {
        init(acceptor_.listener().cm_id().context());
        accept_next();
    }
    ~asio_churn() { clear(); }
    [[nodiscard]] std::uint16_t port() const noexcept { return acceptor_.port(); }
    void pump() {
        if (io_.stopped()) io_.restart();
        (void)io_.poll();
        echo_and_reap();
    }
    void check_idle() {
        CHECK(eng_.engine().pending() == 0);
        CHECK(eng_.engine().registered() == 1); // the listener alone
    }

private:
    void accept_next() {
        auto const qpn = std::make_shared<std::uint32_t>(0);
        rxa::async_accept<rx::busy_poll>(
            acceptor_, {}, cm::shared_qp<rx::rc>(shared()),
            [this, qpn](connection& c) {
                *qpn = c.qp().qp_num();
                note(c);
            },
            rxa::as_exception([this, qpn](std::exception_ptr e, std::optional<connection> c) {
                adopt(e, std::move(c), *qpn);
                accept_next();
            }));
    }

    ::asio::io_context io_;
    rxa::cm_engine eng_{io_.get_executor()};
    rxa::cm_acceptor<rx::rc> acceptor_;
};

// Blocking calls: one accept thread (get_request, accept); each connection watched by its own
// monitor thread, as blocking connections are; the connections handed to the pump's thread.
class blocking_churn : public echo_core {
public:
    static constexpr char const* name = "blocking";
    blocking_churn() : listener_(test::device_address(0), cm::listener_options{.backlog = 64}) {
        init(listener_.cm_id().context());
        accepter_ = std::jthread{[this](std::stop_token stop) {
            while (!stop.stop_requested()) {
                std::uint32_t qpn = 0;
                try {
                    auto req = listener_.get_request(200ms);
                    auto c = req.accept({}, cm::shared_qp<rx::rc>(shared()), [this, &qpn](connection& n) {
                        qpn = n.qp().qp_num();
                        note(n);
                    });
                    std::lock_guard lock{inbox_mutex_};
                    inbox_.emplace_back(qpn, std::move(c));
                } catch (cm::timeout_error const& e) {
                    if (e.step() != cm::step::other) {
                        std::lock_guard lock{inbox_mutex_};
                        failed_.push_back(qpn);
                    }
                } catch (std::exception const&) { // a client killed mid-handshake: its failure only
                    std::lock_guard lock{inbox_mutex_};
                    failed_.push_back(qpn);
                }
            }
        }};
    }
    ~blocking_churn() {
        accepter_ = {};
        clear();
    }
    [[nodiscard]] std::uint16_t port() const noexcept { return listener_.port(); }
    void pump() {
        {
            std::lock_guard lock{inbox_mutex_};
            for (auto& [qpn, c] : inbox_)
                adopt(nullptr, std::move(c), qpn);
            for (auto qpn : failed_)
                adopt(std::make_exception_ptr(std::runtime_error{"accept failed"}), std::nullopt, qpn);
            inbox_.clear();
            failed_.clear();
        }
        echo_and_reap();
    }
    void check_idle() {}

private:
    cm::listener<rx::rc> listener_;
    std::mutex inbox_mutex_;
    std::vector<std::pair<std::uint32_t, connection>> inbox_;
    std::vector<std::uint32_t> failed_;
    std::jthread accepter_;
};

} // namespace drivers_test

TEST_CASE_TEMPLATE("cm drivers: churn: 8 client processes, one killed with SIGKILL every 0.3-0.7 s for 30 cycles; "
                   "the survivors keep being served, and connections, QPs, threads and descriptors return to their "
                   "baseline, through every driver",
                   Server, engine_churn, asio_churn, blocking_churn) {
    // 8 clients and 30 cycles in tools/check; RDMACXX_CHURN="CLIENTS CYCLES" for a longer run.
    int clients = 8, cycles = 30;
    if (char const* size = std::getenv("RDMACXX_CHURN")) std::istringstream{size} >> clients >> cycles;
    std::string const program = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "device_tests";
    { Server warm_up; } // librdmacm opens (and keeps) its device files on first use
    std::size_t const threads0 = test::proc_entries("/proc/self/task");
    std::string const names0 = test::thread_names();
    std::size_t const fds0 = test::proc_entries("/proc/self/fd");
    std::size_t const rc_qps0 = test::rdma_qps_of_this_process("RC");
    std::optional<Server> srv{std::in_place};
    std::size_t const threads_serving = test::proc_entries("/proc/self/task"); // + the accept thread (blocking)
    std::vector<std::unique_ptr<test::child_process>> kids(static_cast<std::size_t>(clients));
    std::vector<int> progress(static_cast<std::size_t>(clients),
                              0); // "echoed" lines seen per slot, since its last spawn
    std::uint32_t next_id = 0;
    auto spawn = [&](int k) {
        kids[static_cast<std::size_t>(k)] = std::make_unique<test::child_process>(
            "churn " + test::device_ip() + " " + std::to_string(srv->port()) + " " + std::to_string(next_id++),
            program);
        progress[static_cast<std::size_t>(k)] = 0;
    };
    // Pumps the server for `d`, reading what the children say.
    auto run_for = [&](std::chrono::milliseconds d) {
        for (auto const end = steady::now() + d; steady::now() < end;) {
            srv->pump();
            for (int k = 0; k < clients; ++k)
                if (auto& kid = kids[static_cast<std::size_t>(k)])
                    for (std::string l = kid->line(0ms); !l.empty(); l = kid->line(0ms))
                        if (l.rfind("echoed", 0) == 0) ++progress[static_cast<std::size_t>(k)];
            std::this_thread::sleep_for(1ms);
        }
    };
    for (int k = 0; k < clients; ++k)
        spawn(k);
    std::mt19937 rng{12345};
    std::uniform_int_distribution<int> pause_ms{300, 700}, victim{0, clients - 1};
    auto const t0 = steady::now();
    for (int c = 0; c < cycles; ++c) {
        run_for(std::chrono::milliseconds{pause_ms(rng)});
        int const k = victim(rng);
        kids[static_cast<std::size_t>(k)].reset(); // SIGKILL and reaped
        spawn(k);
    }
    // Every client alive now is served: each says "echoed" again within 30 s.
    std::fill(progress.begin(), progress.end(), 0);
    for (auto const end = steady::now() + 30s;
         steady::now() < end && std::any_of(progress.begin(), progress.end(), [](int p) { return p == 0; });)
        run_for(100ms);
    for (int k = 0; k < clients; ++k)
        CHECK_MESSAGE(progress[static_cast<std::size_t>(k)] > 0, "client slot " << k << " was not served");
    MESSAGE(std::string{Server::name} << ": " << clients << " clients, " << cycles << " kill cycles in "
                                      << std::chrono::duration<double>(steady::now() - t0).count()
                                      << " s: " << srv->echoed << " messages echoed, " << srv->ended
                                      << " connections ended by their peer's death, " << srv->accept_failures.load()
                                      << " accepts failed (clients killed mid-handshake)");
    // All killed: the server notices every one (their kernels send the DREQ) and is back at its
    // baseline.
    auto const t1 = steady::now();
    for (auto& kid : kids)
        kid.reset(); // SIGKILL and reaped
    for (auto const end = steady::now() + 30s; srv->open() != 0 && steady::now() < end;)
        run_for(10ms);
    MESSAGE(std::string{Server::name} << ": the last " << clients << " deaths noticed in "
                                      << std::chrono::duration<double>(steady::now() - t1).count() << " s");
    CHECK(srv->open() == 0);
    run_for(200ms);
    srv->check_idle();
    CHECK(test::rdma_qps_of_this_process("RC") == rc_qps0);          // `rdma resource show qp`: none left
    CHECK(test::proc_entries("/proc/self/task") == threads_serving); // no connection's thread left
    srv.reset();
    CHECK_MESSAGE(test::proc_entries("/proc/self/task") == threads0,
                  "threads before: " << names0 << "; after: " << test::thread_names());
    CHECK(test::proc_entries("/proc/self/fd") == fds0);
}

TEST_CASE("cm: a QP source the handshake cannot use is refused with argument_error before anything is sent; the "
          "request can still be rejected") {
    using checked_conn = cm::connection<rx::rc, rx::busy_poll, rx::extended_post>;
    cm::listener<rx::rc> listener{test::device_address(0)};
    auto const to = test::device_address(listener.port());
    // extended_post QPs come from the user only: the CM makes legacy_post QPs.
    CHECK_THROWS_AS(((void)cm::connect<rx::rc, rx::busy_poll, rx::extended_post>(to)), rx::argument_error);
    cm::engine eng;
    bool called = false;
    CHECK_THROWS_AS((cm::connect<rx::rc, rx::busy_poll, rx::extended_post>(
                        eng, to, {}, {}, [&](std::exception_ptr, std::optional<checked_conn>) { called = true; })),
                    rx::argument_error);
    CHECK(eng.pending() == 0);
    // Shared resources and a QP of the user's at once.
    rx::protection_domain pd{listener.cm_id().context()};
    rx::completion_queue<rx::busy_poll> cq{listener.cm_id().context(), 16};
    rx::queue_pair<rx::rc, rx::busy_poll> qp{pd, cq, cq};
    cm::qp_source<rx::rc, rx::busy_poll> both = cm::user_qp(qp);
    both.shared.emplace(cm::resources<rx::busy_poll>{.pd = pd, .send_cq = cq, .recv_cq = cq});
    CHECK_THROWS_AS((void)cm::connect(to, {}, both), rx::argument_error);
    CHECK(qp.state() == IBV_QPS_RESET); // untouched
    // The passive side: refused before the id is the handshake's; the request rejects as usual.
    std::exception_ptr client_error;
    std::jthread client{[&] {
        try {
            (void)cm::connect<rx::rc, rx::busy_poll>(to);
        } catch (...) {
            client_error = std::current_exception();
        }
    }};
    auto req = listener.get_request(20s);
    CHECK_THROWS_AS(((void)req.accept<rx::rc, rx::busy_poll, rx::extended_post>()), rx::argument_error);
    std::vector<std::byte> const why{std::byte{7}};
    req.reject(why);
    CHECK_THROWS_AS(req.reject(why), rx::argument_error); // its id is gone now
    client.join();
    REQUIRE(client_error);
    try {
        std::rethrow_exception(client_error);
    } catch (cm::rejected_error const& e) {
        CHECK(e.by_consumer());
    }
    CHECK_FALSE(called);
}
