// asio_read_client: RDMA READs kept in flight by coroutines, each READ bounded by a timer
// (`co_await (read || timer)`), every byte checked (the Asio adapter, rdmacxx/asio.hpp).
//
// A server coroutine (in this process, on the same io_context) registers a region of -S bytes
// filled with a pattern and accepts one connection, sending the region's remote_span in the
// accept's private data. The client connects, decodes it, and reads the region in chunks of -s
// bytes, -r times over, with -q reader coroutines, each one READ in flight at a time into its own
// slot of a local buffer: `co_await (async_post(read) || timer)` with a bound of -T ms.
//
// A READ that outlives its bound is cancelled. The dispatcher's default cancellation moves the QP
// to ERR and runs the READ's handler only once its flushed completion has been reaped, so when
// the `||` returns the slot is the reader's again: no late READ response can land in it. The
// other readers' READs complete flushed; once every reader has returned, nothing is posted and
// the buffer, region and connection may go in any order. The same holds for any other error
// (a failed READ, a refused post).
// -E n gives the READ of chunk n (first round) a wrong rkey: a remote access error, exit 1.
// -K n moves the server's QP to ERR before the READ of chunk n (a dead peer: the READ is never
//      answered): a READ from it on must time out after -T ms and every READ must be reaped;
//      then the program exits 0 ("timed out as asked"), and 1 if anything else happened.
//
// Usage: asio_read_client -b address [-p port] [-S region-bytes] [-s chunk-bytes] [-q depth] [-r rounds]
//                         [-T bound-ms] [-E chunk] [-K chunk]
#include "rdmacxx/asio.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
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
using connection = cm::connection<rx::rc, rx::event_driven>;

namespace {

struct settings {
    std::size_t region = 1 << 20, chunk = 4096;
    std::uint32_t depth = 8, rounds = 2;
    std::chrono::milliseconds bound{5000};   // -T: each READ's bound
    std::size_t bad_chunk = ~std::size_t{0}; // -E: this chunk's READ uses a wrong rkey
    std::size_t kill_at = ~std::size_t{0};   // -K: the server's QP goes to ERR before this chunk's READ
};

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 131 + i / 4096) & 0xff); }

struct result {
    std::uint64_t reads = 0, bad_chunks = 0, flushed = 0;
    std::size_t timed_out_chunk = ~std::size_t{0};
    double timed_out_after_ms = 0;
    bool done = false;
};

// Accepts one client on the region's PD and hands it the region's remote_span.
awaitable<void> server(rxa::cm_acceptor<rx::rc>& acceptor, cm::resources<rx::event_driven> shared,
                       rx::memory_region& mr, std::optional<connection>& kept) {
    auto const remote = mr.remote();
    cm::connection_options opt;
    opt.settings.remote_access = rx::access::remote_read; // the client READs the region
    auto const blob = cm::to_private_data<cm::private_data_message::accept, rx::rc>(remote);
    opt.private_data.assign(blob.begin(), blob.end());
    auto c =
        co_await rxa::async_accept<rx::event_driven>(acceptor, opt, cm::shared_qp<rx::rc>(shared), {}, use_awaitable);
    kept.emplace(std::move(*c));
}

// What the readers share.
struct reading {
    rxa::connection<rx::rc>& c; // the connection as an I/O object: its operations are members
    rx::remote_span<std::byte> region;
    std::vector<std::byte>& local;
    rx::memory_region& mr;
    settings const& opt;
    result& r;
    std::function<void()> kill; // -K: the server's QP to ERR
    std::size_t chunks = 0, next = 0;
    std::exception_ptr failed;
    std::uint32_t running = 0;
    ::asio::steady_timer& wake; // the client waits on it for the readers
};

// One reader: READs the next chunk into slot `s`, bounded by opt.bound, until every chunk of
// every round is read or something failed.
awaitable<void> reader(reading& k, std::uint32_t s) {
    using namespace ::asio::experimental::awaitable_operators;
    using ::asio::experimental::as_tuple;
    ::asio::steady_timer timer{co_await ::asio::this_coro::executor};
    std::size_t const size = k.opt.chunk;
    auto const slot = k.mr.span().subspan(s * size, size);
    try {
        while (!k.failed && k.next < k.chunks * k.opt.rounds) {
            std::size_t const n = k.next++;
            std::size_t const chunk = n % k.chunks;
            if (n == k.opt.kill_at) k.kill();
            auto source = k.region.subspan(chunk * size, size);
            if (n == k.opt.bad_chunk)
                source = rx::remote_span<std::byte>{source.address(), source.size(), source.rkey() ^ 0x5a5a00U};
            timer.expires_after(k.opt.bound);
            auto const t0 = std::chrono::steady_clock::now();
            // The READ completes with (error_code, work_completion) as a tuple: `||` waits for one
            // operation to succeed, so a READ that failed with an exception would be reported only
            // when the timer ran out.
            auto const got = co_await (k.c.async_post(rx::read{slot, source}, as_tuple(use_awaitable)) ||
                                       timer.async_wait(use_awaitable));
            if (got.index() == 1) {
                // The READ was cancelled and its flushed completion reaped: the slot is ours again.
                if (!k.failed) {
                    k.r.timed_out_chunk = n;
                    k.r.timed_out_after_ms =
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                    k.failed = std::make_exception_ptr(std::runtime_error("the READ of chunk " + std::to_string(n) +
                                                                          " timed out after " +
                                                                          std::to_string(k.opt.bound.count()) + " ms"));
                }
                break;
            }
            if (auto const& [ec, wc] = std::get<0>(got); ec) {
                if (wc.status() == IBV_WC_WR_FLUSH_ERR) ++k.r.flushed; // another reader's failure ended the QP
                if (!k.failed)
                    k.failed =
                        std::make_exception_ptr(std::system_error(ec, "RDMA READ of chunk " + std::to_string(n)));
                break;
            }
            for (std::size_t i = 0; i < size; ++i)
                if (k.local[s * size + i] != pattern(chunk * size + i)) {
                    ++k.r.bad_chunks;
                    break;
                }
            ++k.r.reads;
        }
    } catch (...) { // a refused post, an allocation failure
        if (!k.failed) k.failed = std::current_exception();
    }
    if (--k.running == 0) k.wake.cancel();
}

awaitable<void> client(cm::address const& to, settings const& opt, result& r, std::function<void()> kill) {
    auto const ex = co_await ::asio::this_coro::executor;
    // A self-contained connection (its own PD, CQ and channel) on the context's CM engine, then
    // held as an I/O object: its CQ is routed by its channel's dispatcher in this context
    // (cancel_mode::qp_to_error, the default), with nothing to add or forget.
    auto made = co_await rxa::async_connect<rx::rc, rx::event_driven>(
        rxa::cm_engine_for(ex), to, {.caps = {.max_send_wr = opt.depth, .max_recv_wr = 1}}, {}, use_awaitable);
    auto const region = cm::from_private_data<rx::remote_span<std::byte>>(made->peer_private_data());
    if (region.size() < opt.region) throw std::runtime_error("the server's region is smaller than -S");
    std::vector<std::byte> local(std::size_t{opt.depth} * opt.chunk); // outlives the connection
    rxa::connection<rx::rc> c{ex, std::move(*made)};
    // Registered through the connection, which deregisters it after its QP, before its PD.
    rx::memory_region& mr = c->register_memory(std::span{local}, rx::access::local_write);
    ::asio::steady_timer wake{ex, std::chrono::steady_clock::time_point::max()};
    reading k{c, region, local, mr, opt, r, std::move(kill), opt.region / opt.chunk, 0, {}, opt.depth, wake};
    for (std::uint32_t s = 0; s < opt.depth; ++s)
        ::asio::co_spawn(ex, reader(k, s), ::asio::detached);
    // Every reader returns within its READ's bound (a cancelled READ's flush is reaped at once).
    while (k.running != 0) {
        std::error_code ignored;
        co_await wake.async_wait(::asio::redirect_error(use_awaitable, ignored));
    }
    if (k.failed) {
        // Every reader has returned, so no READ is posted: disconnecting cannot race a late write.
        std::fprintf(stderr,
                     "asio_read_client: stopped after an error; every READ reaped (%zu in the dispatcher, %llu "
                     "flushed)\n",
                     c.dispatcher().in_flight(), static_cast<unsigned long long>(r.flushed));
        try {
            c->disconnect();
        } catch (std::exception const&) { // the error to report is the first one
        }
        if (c.dispatcher().in_flight() != 0) std::abort(); // never free memory a posted READ still names
        if (opt.kill_at != ~std::size_t{0} && r.timed_out_chunk >= opt.kill_at &&
            r.timed_out_chunk != ~std::size_t{0}) {
            r.done = true; // -K: what was asked for
            co_return;
        }
        std::rethrow_exception(k.failed);
    }
    c->disconnect();
    r.done = true;
}

} // namespace

int main(int argc, char** argv) try {
    std::string bind;
    std::uint16_t port = 0;
    settings opt;
    for (int c; (c = ::getopt(argc, argv, "b:p:S:s:q:r:T:E:K:")) != -1;) {
        switch (c) {
        case 'b':
            bind = optarg;
            break;
        case 'p':
            port = static_cast<std::uint16_t>(std::stoul(optarg));
            break;
        case 'S':
            opt.region = std::stoul(optarg);
            break;
        case 's':
            opt.chunk = std::stoul(optarg);
            break;
        case 'q':
            opt.depth = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 'r':
            opt.rounds = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 'T':
            opt.bound = std::chrono::milliseconds{std::stoul(optarg)};
            break;
        case 'E':
            opt.bad_chunk = std::stoul(optarg);
            break;
        case 'K':
            opt.kill_at = std::stoul(optarg);
            break;
        default:
            std::cerr << "usage: asio_read_client -b address [-p port] [-S region-bytes] [-s chunk-bytes] [-q depth] "
                         "[-r rounds] [-T bound-ms] [-E chunk] [-K chunk]\n";
            return 2;
        }
    }
    if (bind.empty()) {
        std::cerr << "asio_read_client: -b address (the RDMA device's IP address) is required\n";
        return 2;
    }
    if (opt.chunk == 0 || opt.region < opt.chunk || opt.depth == 0 || opt.depth > 128)
        throw rx::argument_error("-s must be positive and at most -S; -q is 1 … 128");

    ::asio::io_context io{1};
    // Both sides' CM events on the context's CM engine (cm_engine_for), read by the reactor.
    rxa::cm_acceptor<rx::rc> acceptor{io.get_executor(), cm::address::resolve(bind, port)};
    cm::listener<rx::rc>& listener = acceptor.listener();
    auto const to = cm::address::resolve(bind, listener.port());
    // The server's PD and CQ (on a channel of its own): the region's rkey is valid on QPs of
    // this PD only.
    rx::protection_domain pd{listener.cm_id().context()};
    rxa::completion_queue<> cq{io.get_executor(), listener.cm_id().context(), 16};
    std::vector<std::byte> region(opt.region);
    for (std::size_t i = 0; i < region.size(); ++i)
        region[i] = pattern(i);
    auto mr = pd.register_memory(std::span{region}, rx::access::local_write | rx::access::remote_read);
    std::optional<connection> accepted;
    result r;
    std::exception_ptr failure;
    auto keep = [&](std::exception_ptr const& e) {
        if (e && !failure) failure = e;
    };
    auto const t0 = std::chrono::steady_clock::now();
    ::asio::co_spawn(io, server(acceptor, cq.resources(pd), mr, accepted), keep);
    auto kill = [&] { // -K: the server dies (its QP in ERR answers nothing)
        if (accepted) accepted->qp().to_error();
    };
    ::asio::co_spawn(io, client(to, opt, r, kill), keep);
    auto const deadline = std::chrono::steady_clock::now() + 120s;
    while (!r.done && !failure && std::chrono::steady_clock::now() < deadline)
        io.run_one_for(1s);
    if (failure) std::rethrow_exception(failure);
    if (!r.done) throw std::runtime_error("the reads did not finish within 120 s");
    double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opt.kill_at != ~std::size_t{0}) {
        std::printf("asio_read_client: timed out as asked: the READ of chunk %zu (the server's QP in ERR) timed out "
                    "after %.1f ms (bound %lld ms); %llu READs before it, %llu chunks wrong, %llu flushed, every READ "
                    "reaped; %.3f s\n",
                    r.timed_out_chunk, r.timed_out_after_ms, static_cast<long long>(opt.bound.count()),
                    static_cast<unsigned long long>(r.reads), static_cast<unsigned long long>(r.bad_chunks),
                    static_cast<unsigned long long>(r.flushed), s);
        return r.bad_chunks == 0 ? 0 : 1;
    }
    std::printf("asio_read_client: %llu RDMA READs of %zu bytes, %u in flight (each bounded by %lld ms), %llu chunks "
                "wrong; %.3f s\n",
                static_cast<unsigned long long>(r.reads), opt.chunk, opt.depth,
                static_cast<long long>(opt.bound.count()), static_cast<unsigned long long>(r.bad_chunks), s);
    return r.bad_chunks == 0 && r.reads == std::uint64_t{opt.rounds} * (opt.region / opt.chunk) ? 0 : 1;
} catch (rx::error const& e) {
    e.dump_detailed(std::cerr, "E:", 2);
    return 1;
} catch (std::exception const& e) {
    std::cerr << "asio_read_client: " << e.what() << '\n';
    return 1;
}
