// asio_echo_server: an RDMA CM echo server and its clients as C++20 coroutines, all on one
// io_context and one thread (the Asio adapter, rdmacxx/asio.hpp).
//
// The server shares one PD, one registered buffer, one SRQ and one CQ on one completion channel
// between every connection (cm::resources). Every connection, the server's and the clients', is
// made on one CM engine (io::cm_engine) that the io_context drives: the CM handshakes and every
// disconnect are seen by the reactor, with no thread per connection (the program runs on one
// thread whatever -c is; it prints its thread count). An acceptor coroutine accepts the clients
// (async_accept on an io::cm_acceptor); echo coroutines each keep one receive of their own in
// the SRQ (async_recv) and send whatever lands in it back to the QP it came from (async_post).
// Every client is one coroutine: it connects (async_connect), sends -n messages, awaits each echo
// beside its send, checks it byte for byte, and disconnects (async_disconnect). One completion
// dispatcher per side routes the completions to the operations that posted them.
//
// Usage: asio_echo_server -b address [-p port] [-c clients] [-n messages] [-s size]
//   -b  the IP address of the RDMA device to listen on (and connect to)
//   -c  concurrent clients (16), -n  messages per client (100), -s  message bytes (64)
#include "rdmacxx/asio.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <getopt.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;
using ::asio::awaitable;
using ::asio::use_awaitable;
using connection = cm::connection<rx::rc, rx::event_driven>;

namespace {

constexpr std::uint32_t slots = 64; // the SRQ's receives: one per echo coroutine

struct settings {
    std::uint32_t clients = 16, messages = 100;
    std::size_t size = 64;
};

// A side's shared resources: PD, channel, CQ, (SRQ), memory, and the dispatcher over the channel.
struct side {
    side(rx::context& ctx, ::asio::io_context& io, std::size_t bytes, bool with_srq)
        : pd(ctx), channel(ctx), cq(ctx, 4096, channel),
          srq(with_srq ? std::make_unique<rx::shared_receive_queue>(pd, slots) : nullptr), memory(bytes),
          mr(pd.register_memory(std::span{memory}, rx::access::local_write)),
          d(io.get_executor(), channel, {.max_operations = 4096}) {
        d.add(cq);
    }
    [[nodiscard]] cm::resources<rx::event_driven> resources() {
        return {.pd = pd, .send_cq = cq, .recv_cq = cq, .srq = srq.get(), .channel = &channel};
    }
    rx::protection_domain pd;
    rx::completion_channel channel;
    rx::completion_queue<rx::event_driven> cq;
    std::unique_ptr<rx::shared_receive_queue> srq;
    std::vector<std::byte> memory;
    rx::memory_region mr;
    rxa::completion_dispatcher d;
};

void fill(std::span<std::byte> m, std::uint32_t client, std::uint32_t seq) {
    for (std::size_t i = 0; i < m.size(); ++i)
        m[i] = static_cast<std::byte>((i * 13 + std::size_t{client} * 7 + std::size_t{seq} * 3) & 0xff);
}

struct server_state {
    std::vector<std::unique_ptr<connection>> connections;
    // Noted before the accept is sent: a client may send before the server sees `established`.
    std::map<std::uint32_t, connection::qp_type*> by_qpn;
    std::uint64_t echoed = 0;
};

awaitable<void> acceptor(rxa::cm_acceptor<rx::rc>& listener, side& s, server_state& st, std::uint32_t clients) {
    for (std::uint32_t i = 0; i < clients; ++i) {
        auto c = co_await rxa::async_accept<rx::event_driven>(
            listener, s.resources(), {}, [&st](connection& n) { st.by_qpn[n.qp().qp_num()] = &n.qp(); }, use_awaitable);
        st.connections.push_back(std::make_unique<connection>(std::move(*c)));
    }
}

// One receive of its own in the SRQ; what lands there goes back to the QP it came from.
awaitable<void> echo(side& s, server_state& st, std::uint32_t k, std::size_t size) {
    auto const in = s.mr.span().subspan(2 * std::size_t{k} * size, size);
    auto const out = s.mr.span().subspan((2 * std::size_t{k} + 1) * size, size);
    for (;;) {
        rx::work_completion const wc = co_await rxa::async_recv(s.d, *s.srq, rx::recv{in}, use_awaitable);
        auto it = st.by_qpn.find(wc.qp_num());
        if (it == st.by_qpn.end()) continue;
        std::memcpy(out.data(), in.data(), wc.byte_len());
        try {
            (void)co_await rxa::async_post(s.d, *it->second, rx::send{out.first(wc.byte_len())}, use_awaitable);
            ++st.echoed;
        } catch (rx::wc_error const&) { // the client went away before its echo: flushed
        }
    }
}

awaitable<void> client(rxa::cm_engine& eng, cm::address const& to, side& s, std::uint32_t id, settings const& opt,
                       std::uint32_t& good, std::uint32_t& finished) {
    using namespace ::asio::experimental::awaitable_operators;
    auto const ex = co_await ::asio::this_coro::executor;
    auto c = co_await rxa::async_connect<rx::rc, rx::event_driven>(eng, to, s.resources(), {}, use_awaitable);
    auto const out = s.mr.span().subspan(2 * std::size_t{id} * opt.size, opt.size);
    auto const in = s.mr.span().subspan((2 * std::size_t{id} + 1) * opt.size, opt.size);
    for (std::uint32_t m = 0; m < opt.messages; ++m) {
        fill(std::span{s.memory}.subspan(2 * std::size_t{id} * opt.size, opt.size), id, m);
        // The receive for the echo is posted first, then the message: both awaited together.
        auto [echo_wc, send_wc] = co_await (rxa::async_recv(s.d, c->qp(), rx::recv{in}, use_awaitable) &&
                                            rxa::async_post(s.d, c->qp(), rx::send{out}, use_awaitable));
        if (echo_wc.byte_len() == opt.size && std::memcmp(in.data(), out.data(), opt.size) == 0) ++good;
        (void)send_wc;
    }
    co_await rxa::async_disconnect(ex, *c, 10s, use_awaitable);
    ++finished;
}

} // namespace

int main(int argc, char** argv) try {
    std::string bind;
    std::uint16_t port = 0;
    settings opt;
    for (int c; (c = ::getopt(argc, argv, "b:p:c:n:s:")) != -1;) {
        switch (c) {
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
            std::cerr << "usage: asio_echo_server -b address [-p port] [-c clients] [-n messages] [-s size]\n";
            return 2;
        }
    }
    if (bind.empty()) {
        std::cerr << "asio_echo_server: -b address (the RDMA device's IP address) is required\n";
        return 2;
    }
    if (opt.clients == 0 || opt.clients > 1000 || opt.messages == 0 || opt.size == 0 || opt.size > 4096)
        throw rx::argument_error("-c is 1 … 1000, -n positive, -s 1 … 4096");

    ::asio::io_context io{1};
    rxa::cm_engine eng{io.get_executor()};
    rxa::cm_acceptor<rx::rc> listener{eng, cm::address::resolve(bind, port), {.backlog = 64}};
    auto const to = cm::address::resolve(bind, listener.port());
    rx::context& ctx = listener.listener().cm_id().context();
    side server{ctx, io, 2 * std::size_t{slots} * opt.size, true};
    side clients{ctx, io, 2 * std::size_t{opt.clients} * opt.size, false};
    server_state st;
    std::exception_ptr failure;
    auto keep = [&](std::exception_ptr const& e) {
        if (e && !failure) failure = e;
    };

    auto const t0 = std::chrono::steady_clock::now();
    ::asio::co_spawn(io, acceptor(listener, server, st, opt.clients), keep);
    for (std::uint32_t k = 0; k < slots; ++k)
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
