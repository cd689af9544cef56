// asio_echo_server: an RDMA CM echo server and its clients as C++20 coroutines, all on one
// io_context and one thread (the Asio adapter, rdmacxx/asio.hpp).
//
// The server shares one PD, one registered buffer, one SRQ and one CQ on one completion channel
// between every connection (cm::resources). Every connection, the server's and the clients', is
// made on the io_context's CM engine (io::cm_engine_for), which the io_context drives: the CM handshakes and every
// disconnect are seen by the reactor, with no thread per connection (the program runs on one
// thread whatever -c is; it prints its thread count). An acceptor coroutine accepts the clients
// (async_accept on an io::cm_acceptor); echo coroutines each keep one receive of their own in
// the SRQ (async_recv) and send whatever lands in it back to the QP it came from (async_post).
// Every client is one coroutine: it connects (async_connect), sends -n messages, awaits each echo
// beside its send, checks it byte for byte, and disconnects (disconnect(): on the engine it does
// not wait; the engine sees the CM's answer). Each side's CQ is an I/O object (io::completion_queue)
// whose dispatcher routes the completions to the operations that posted them; the connections are
// I/O objects on it (io::connection, async_post and async_recv as members).
//
// Usage: asio_echo_server -b address [-p port] [-c clients] [-n messages] [-s size]
//        asio_echo_server -m server -b address -p port -w clients [-n messages] [-s size] [-t seconds]
//        asio_echo_server -m client -b server-address -p port -c clients [-i first-id] [-n messages] [-s size]
//   -b  the IP address of the RDMA device to listen on (and connect to)
//   -c  concurrent clients (16), -n  messages per client (100), -s  message bytes (64)
//   -m server: the server alone on one thread, as cm_shared_server's (the same output): until -w
//      clients (from client processes on other nodes) have connected and had every message
//      echoed ("ready: …"), then until every one has gone (each noticed by the engine; its QP
//      gone with its connection, which tells the dispatcher); SIGUSR1 marks when they were
//      killed, SIGUSR2 (or 60 s) ends it once they have gone. At most -t seconds (600).
//   -m client: -c coroutine clients (ids from -i) that connect, check -n echoes each, print
//      "clients done", and hold their connections until killed (or 600 s).
//   -a  ACK timeout in ms of every QP (default 67 ms, which with 6 retries gives up on a silent
//      peer after about 470 ms): tools/nodes-wire gives 1,000 connections on emulated nodes of
//      a loaded host more.
#include "rdmacxx/asio.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include "server_modes.hpp"

#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;
using ::asio::awaitable;
using ::asio::use_awaitable;
using connection = cm::connection<rx::rc, rx::event_driven>; // as the CM hands it over
using io_connection = rxa::connection<rx::rc>;               // as an I/O object on a side's CQ

namespace {

struct settings {
    std::uint32_t clients = 16, messages = 100;
    std::size_t size = 64;
    cm::connection_options connection{}; // every connection's, the server's and the clients'
};

// A side's shared resources: PD, CQ (an I/O object: its channel's dispatcher, in the
// io_context's service, routes it from the start), an SRQ of `receives` on it, memory.
struct side {
    side(rx::context& ctx, ::asio::io_context& io, std::size_t bytes, std::uint32_t receives)
        : pd(ctx), cq(io.get_executor(), ctx, 4096, {.max_operations = 4096}),
          srq(receives != 0 ? std::make_unique<rxa::shared_receive_queue<>>(pd, cq, receives) : nullptr), memory(bytes),
          mr(pd.register_memory(std::span{memory}, rx::access::local_write)) {}
    [[nodiscard]] cm::resources<rx::event_driven> resources() { return srq ? srq->resources(pd) : cq.resources(pd); }
    rx::protection_domain pd;
    rxa::completion_queue<> cq;
    std::unique_ptr<rxa::shared_receive_queue<>> srq;
    std::vector<std::byte> memory;
    rx::memory_region mr;
};

void fill(std::span<std::byte> m, std::uint32_t client, std::uint32_t seq) {
    for (std::size_t i = 0; i < m.size(); ++i)
        m[i] = static_cast<std::byte>((i * 13 + std::size_t{client} * 7 + std::size_t{seq} * 3) & 0xff);
}

struct server_state {
    std::map<std::uint32_t, std::unique_ptr<io_connection>> connections; // by QPN
    // Noted before the accept is sent: a client may send before the server sees `established`.
    std::map<std::uint32_t, connection::qp_type*> by_qpn;
    std::uint64_t echoed = 0;
    std::uint32_t accepted = 0;
    std::chrono::steady_clock::time_point first_established{}, last_established{};
};

// Accepts `clients` clients. A client that goes (left or died) is noticed by the engine: its
// connection is destroyed, and its QP's pending operations complete with operation_aborted once
// the QP is gone (the QP tells the dispatcher).
awaitable<void> acceptor(rxa::cm_acceptor<rx::rc>& listener, side& s, server_state& st, std::uint32_t clients,
                         cm::connection_options const& connection_options) {
    while (st.accepted < clients) {
        std::optional<connection> c;
        try {
            c = co_await rxa::async_accept<rx::event_driven>(
                listener, connection_options, cm::shared_qp<rx::rc>(s.resources()),
                [&st](connection& n) { st.by_qpn[n.qp().qp_num()] = &n.qp(); }, use_awaitable);
        } catch (rx::error const& e) { // that client's failure only (it left, was refused, timed out)
            std::fprintf(stderr, "asio_echo_server: an accept failed: %s\n", e.what());
            continue;
        }
        std::uint32_t const qpn = c->qp().qp_num();
        auto& owned = st.connections[qpn] = std::make_unique<io_connection>(s.cq, std::move(*c));
        (*owned)->on_end([&st, qpn](cm::connection_state) {
            st.by_qpn.erase(qpn);
            st.connections.erase(qpn);
        });
        auto const now = std::chrono::steady_clock::now();
        if (st.accepted++ == 0) st.first_established = now;
        st.last_established = now;
    }
}

// One receive of its own in the SRQ; what lands there goes back to the QP it came from.
awaitable<void> echo(side& s, server_state& st, std::uint32_t k, std::size_t size) {
    auto const in = s.mr.span().subspan(2 * std::size_t{k} * size, size);
    auto const out = s.mr.span().subspan((2 * std::size_t{k} + 1) * size, size);
    for (;;) {
        rx::work_completion const wc = co_await s.srq->async_recv(rx::recv{in}, use_awaitable);
        auto it = st.by_qpn.find(wc.qp_num());
        if (it == st.by_qpn.end()) continue;
        std::memcpy(out.data(), in.data(), wc.byte_len());
        try {
            (void)co_await rxa::async_post(s.cq.dispatcher(), *it->second, rx::send{out.first(wc.byte_len())},
                                           use_awaitable);
            ++st.echoed;
        } catch (std::system_error const&) { // the client went away before its echo: flushed, or forgotten
        }
    }
}

// One client: connects, sends opt.messages messages and checks each echo; then disconnects, or,
// with `held`, hands its connection over to it (kept open until the program ends).
// (`connected`: a connection made already, as -m client's clients are, one after another.)
awaitable<void> client(rxa::cm_engine& eng, cm::address const& to, side& s, std::uint32_t id, settings const& opt,
                       std::uint32_t& good, std::uint32_t& finished,
                       std::vector<std::unique_ptr<io_connection>>* held = nullptr,
                       std::optional<connection> connected = std::nullopt) {
    using namespace ::asio::experimental::awaitable_operators;
    std::optional<connection> made = std::move(connected);
    if (!made)
        made = co_await rxa::async_connect<rx::rc, rx::event_driven>(
            eng, to, opt.connection, rx::cm::shared_qp<rx::rc>(s.resources()), use_awaitable);
    io_connection c{s.cq, std::move(*made)}; // its operations are members
    std::size_t const at = 2 * std::size_t{held != nullptr ? id % opt.clients : id} * opt.size; // its slots
    auto const out = s.mr.span().subspan(at, opt.size);
    auto const in = s.mr.span().subspan(at + opt.size, opt.size);
    for (std::uint32_t m = 0; m < opt.messages; ++m) {
        fill(std::span{s.memory}.subspan(at, opt.size), id, m);
        // The receive for the echo is posted first, then the message: both awaited together.
        auto [echo_wc, send_wc] =
            co_await (c.async_recv(rx::recv{in}, use_awaitable) && c.async_post(rx::send{out}, use_awaitable));
        if (echo_wc.byte_len() == opt.size && std::memcmp(in.data(), out.data(), opt.size) == 0) ++good;
        (void)send_wc;
    }
    if (held != nullptr)
        held->push_back(std::make_unique<io_connection>(std::move(c)));
    else
        c->disconnect(); // on the engine: the DREQ sent and the QP in ERR, without waiting
    ++finished;
}

std::chrono::steady_clock::time_point now() { return std::chrono::steady_clock::now(); }

// -m server: the server alone, for `expected` clients (see the usage).
int serve(cm::address const& where, std::uint32_t expected, settings const& opt, std::chrono::seconds limit) {
    namespace ps = server_modes;
    ::asio::io_context io{1};
    rxa::cm_acceptor<rx::rc> listener{io.get_executor(), where, {.backlog = 1024}}; // on the context's CM engine
    std::uint32_t const receives = std::max<std::uint32_t>(64, expected);           // one echo coroutine each
    side server{listener.listener().cm_id().context(), io, 2 * std::size_t{receives} * opt.size, receives};
    server_state st;
    std::exception_ptr failure;
    auto keep = [&](std::exception_ptr const& e) {
        if (e && !failure) failure = e;
    };
    ::asio::co_spawn(io, acceptor(listener, server, st, expected, opt.connection), keep);
    for (std::uint32_t k = 0; k < receives; ++k)
        ::asio::co_spawn(io, echo(server, st, k, opt.size), keep);
    std::chrono::steady_clock::time_point killed_at{};
    bool leave = false;
    ::asio::signal_set signals{io, SIGUSR1, SIGUSR2};
    std::function<void(std::error_code, int)> on_signal = [&](std::error_code ec, int sig) {
        if (ec) return;
        if (sig == SIGUSR1) killed_at = now();
        if (sig == SIGUSR2) leave = true;
        signals.async_wait(on_signal);
    };
    signals.async_wait(on_signal);
    io.run_for(10ms); // the acceptor listens
    std::size_t const threads0 = ps::threads(), fds0 = ps::descriptors();
    long const rss0 = ps::rss_kib();
    std::printf("listening on %s: %zu thread(s), %zu descriptors, RSS %ld KiB\n", where.to_string().c_str(), threads0,
                fds0, rss0);
    std::fflush(stdout);
    auto const deadline = now() + limit;
    std::size_t threads_max = threads0, fds_max = fds0;
    auto run_until = [&](auto&& done) {
        while (!done() && !failure && now() < deadline) {
            io.run_one_for(20ms);
            threads_max = std::max(threads_max, ps::threads());
            fds_max = std::max(fds_max, ps::descriptors());
        }
        if (failure) std::rethrow_exception(failure);
    };
    std::uint64_t const want = std::uint64_t{expected} * opt.messages;
    run_until([&] { return st.accepted >= expected && st.echoed >= want; });
    if (st.echoed < want) {
        std::fprintf(stderr, "asio_echo_server: %u of %u clients connected, %llu of %llu messages echoed in %lld s\n",
                     st.accepted, expected, static_cast<unsigned long long>(st.echoed),
                     static_cast<unsigned long long>(want), static_cast<long long>(limit.count()));
        return 1;
    }
    double const connect_s = std::chrono::duration<double>(st.last_established - st.first_established).count();
    long const rss1 = ps::rss_kib();
    std::printf("ready: %zu connections open, %llu messages echoed; %u connections in %.3f s (%.0f per second); RSS "
                "%ld KiB (%.1f KiB per connection above the listening server), %zu bytes registered in all; %zu "
                "thread(s), %zu descriptors\n",
                st.connections.size(), static_cast<unsigned long long>(st.echoed), st.accepted, connect_s,
                st.accepted / connect_s, rss1, static_cast<double>(rss1 - rss0) / st.accepted, server.memory.size(),
                ps::threads(), ps::descriptors());
    std::fflush(stdout);
    run_until([&] { return st.connections.empty(); });
    if (!st.connections.empty()) {
        std::fprintf(stderr, "asio_echo_server: %zu connections still open\n", st.connections.size());
        return 1;
    }
    double const notice_s = killed_at == std::chrono::steady_clock::time_point{}
                                ? -1
                                : std::chrono::duration<double>(now() - killed_at).count();
    std::printf("gone: all %u clients noticed %.3f s after SIGUSR1; %zu thread(s), %zu descriptors (%zu and %zu at "
                "most), RSS %ld KiB\n",
                st.accepted, notice_s, ps::threads(), ps::descriptors(), threads_max, fds_max, ps::rss_kib());
    std::fflush(stdout);
    auto const until = now() + 60s;
    run_until([&] { return leave || now() > until; });
    bool const constant = threads_max == threads0 && ps::descriptors() == fds0;
    if (!constant) std::fprintf(stderr, "asio_echo_server: threads or descriptors not constant\n");
    return constant ? 0 : 1;
}

// -m client: opt.clients coroutine clients with ids from `first`, on the device of `local` (its
// shared resources made on librdmacm's context of that device, which an id bound there names);
// then holds their connections until killed (or 600 s).
int clients_only(cm::address const& local, cm::address const& to, std::uint32_t first, settings const& opt) {
    ::asio::io_context io{1};
    rxa::cm_engine& eng = rxa::cm_engine_for(io.get_executor()); // the context's CM engine
    cm::event_channel channel;
    cm::id bound{channel, cm::port_space::tcp};
    bound.bind(local);
    side s{bound.context(), io, 2 * std::size_t{opt.clients} * opt.size, 0};
    std::exception_ptr failure;
    auto keep = [&](std::exception_ptr const& e) {
        if (e && !failure) failure = e;
    };
    std::uint32_t good = 0, finished = 0;
    std::vector<std::unique_ptr<io_connection>> held;
    // One connect after another (a server on a loaded emulated node handed 100 handshakes at once
    // let some run past their step deadline); each client then exchanges on its own coroutine.
    auto connect_all = [&]() -> awaitable<void> {
        for (std::uint32_t i = 0; i < opt.clients; ++i) {
            auto c = co_await rxa::async_connect<rx::rc, rx::event_driven>(
                eng, to, opt.connection, rx::cm::shared_qp<rx::rc>(s.resources()), use_awaitable);
            ::asio::co_spawn(io, client(eng, to, s, first + i, opt, good, finished, &held, std::move(c)), keep);
        }
    };
    ::asio::co_spawn(io, connect_all(), keep);
    auto const deadline = now() + 300s;
    while (finished < opt.clients && !failure && now() < deadline)
        io.run_one_for(1s);
    if (failure) std::rethrow_exception(failure);
    if (finished < opt.clients || good != opt.clients * opt.messages) {
        std::fprintf(stderr, "asio_echo_server: %u of %u clients finished, %u of %u echoes verified\n", finished,
                     opt.clients, good, opt.clients * opt.messages);
        return 1;
    }
    std::printf("clients done: %u clients from id %u, %u messages each, every answer verified\n", opt.clients, first,
                opt.messages);
    std::fflush(stdout);
    io.run_for(600s); // killed before
    return 0;
}

} // namespace

int main(int argc, char** argv) try {
    std::string bind;
    std::uint16_t port = 0;
    settings opt;
    std::string local;
    server_modes::options modes;
    for (int c; (c = ::getopt(argc, argv, (std::string{"b:p:c:n:s:l:"} + server_modes::letters).c_str())) != -1;) {
        if (server_modes::take(c, optarg, modes)) continue;
        switch (c) {
        case 'l':
            local = optarg;
            break;
        case 'b':
            bind = optarg;
            break;
        case 'p':
            port = static_cast<std::uint16_t>(std::stoul(optarg));
            break;
        case 'c':
            opt.clients = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 'n':
            opt.messages = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 's':
            opt.size = std::stoul(optarg);
            break;
        default:
            std::cerr << "usage: asio_echo_server -b address [-p port] [-c clients] [-n messages] [-s size]\n"
                         "       asio_echo_server -m server -b address -p port -w clients [-n messages] [-s size] "
                         "[-t s]\n"
                         "       asio_echo_server -m client -b address -p port -l local-address -c clients "
                         "[-i first] [-n messages] [-s size]\n";
            return 2;
        }
    }
    if (bind.empty()) {
        std::cerr << "asio_echo_server: -b address (the RDMA device's IP address) is required\n";
        return 2;
    }
    if (opt.clients == 0 || opt.clients > 1000 || opt.messages == 0 || opt.size == 0 || opt.size > 4096 ||
        modes.expected > 4000)
        throw rx::argument_error("-c is 1 … 1000, -w at most 4000, -n positive, -s 1 … 4096");
    if (modes.ack_timeout.count() > 0) opt.connection.settings.local_ack_timeout = modes.ack_timeout;
    if (modes.mode == "server") {
        if (modes.expected == 0 || port == 0) throw rx::argument_error("-m server needs -p port and -w clients");
        return serve(cm::address::resolve(bind, port), modes.expected, opt, modes.limit);
    }
    if (modes.mode == "client") {
        if (local.empty() || port == 0) throw rx::argument_error("-m client needs -p port and -l local-address");
        return clients_only(cm::address::resolve(local, 0), cm::address::resolve(bind, port), modes.first_id, opt);
    }
    if (!modes.mode.empty()) throw rx::argument_error("-m is server or client");

    ::asio::io_context io{1};
    rxa::cm_engine& eng = rxa::cm_engine_for(io.get_executor()); // the context's CM engine
    rxa::cm_acceptor<rx::rc> listener{eng, cm::address::resolve(bind, port), {.backlog = 64}};
    auto const to = cm::address::resolve(bind, listener.port());
    rx::context& ctx = listener.listener().cm_id().context();
    constexpr std::uint32_t receives = 64; // the SRQ's receives: one per echo coroutine
    side server{ctx, io, 2 * std::size_t{receives} * opt.size, receives};
    side clients{ctx, io, 2 * std::size_t{opt.clients} * opt.size, 0};
    server_state st;
    std::exception_ptr failure;
    auto keep = [&](std::exception_ptr const& e) {
        if (e && !failure) failure = e;
    };

    auto const t0 = std::chrono::steady_clock::now();
    ::asio::co_spawn(io, acceptor(listener, server, st, opt.clients, opt.connection), keep);
    for (std::uint32_t k = 0; k < receives; ++k)
        ::asio::co_spawn(io, echo(server, st, k, opt.size), keep);
    std::uint32_t good = 0, finished = 0;
    for (std::uint32_t i = 0; i < opt.clients; ++i)
        ::asio::co_spawn(io, client(eng, to, clients, i, opt, good, finished), keep);
    // One thread, one io_context, until every client has finished (bounded).
    auto const deadline = std::chrono::steady_clock::now() + 120s;
    while (finished < opt.clients && !failure && std::chrono::steady_clock::now() < deadline)
        io.run_one_for(1s);
    if (failure) std::rethrow_exception(failure);
    if (finished < opt.clients) throw std::runtime_error("the clients did not finish within 120 s");
    double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    unsigned long long const total = std::uint64_t{opt.clients} * opt.messages;
    auto const threads =
        std::distance(std::filesystem::directory_iterator{"/proc/self/task"}, std::filesystem::directory_iterator{});
    std::printf("asio_echo_server: %u coroutine clients on one io_context; %llu echoes, %u verified of %llu; "
                "one PD, MR, SRQ and CQ on the server; %.3f s; %ld thread(s)\n",
                opt.clients, static_cast<unsigned long long>(st.echoed), good, total, s, static_cast<long>(threads));
    io.stop();
    return good == total ? 0 : 1;
} catch (rx::error const& e) {
    e.dump_detailed(std::cerr, "E:", 2);
    return 1;
} catch (std::exception const& e) {
    std::cerr << "asio_echo_server: " << e.what() << '\n';
    return 1;
}
