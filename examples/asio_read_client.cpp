// asio_read_client: a coroutine that keeps several RDMA READs in flight and checks every byte
// (the Asio adapter, rdmacxx/asio.hpp).
//
// A server coroutine (in this process, on the same io_context) registers a region of -S bytes
// filled with a pattern and accepts one connection, sending the region's remote_span in the
// accept's private data. The client coroutine connects, decodes it, and reads the region in
// chunks of -s bytes with -q READs in flight at a time (async_post of rx::read, each completing
// with its callback, which wakes the coroutine); every chunk is compared with the pattern.
//
// On an error (a failed READ, a refused post) it stops posting, disconnects (the QP goes to ERR,
// which flushes every READ still posted) and waits, bounded, until the dispatcher has reaped
// every outstanding READ: the buffers and the QP go only when no posted request names them.
// -E n makes the READ of chunk n use a wrong rkey, to show that path (exit status 1).
//
// Usage: asio_read_client -b address [-p port] [-S region-bytes] [-s chunk-bytes] [-q depth] [-r rounds] [-E chunk]
#include "rdmacxx/asio.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include <asio/co_spawn.hpp>
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
    std::size_t bad_chunk = ~std::size_t{0}; // -E: this chunk's READ uses a wrong rkey
};

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 131 + i / 4096) & 0xff); }

struct result {
    std::uint64_t reads = 0, bad_chunks = 0, peak = 0;
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

awaitable<void> client(rxa::cm_engine& eng, cm::address const& to, settings const& opt, result& r) {
    auto const ex = co_await ::asio::this_coro::executor;
    auto c = co_await rxa::async_connect<rx::rc, rx::event_driven>(
        eng, to, {.caps = {.max_send_wr = opt.depth, .max_recv_wr = 1}}, {}, use_awaitable);
    auto const region = cm::from_private_data<rx::remote_span<std::byte>>(c->peer_private_data());
    if (region.size() < opt.region) throw std::runtime_error("the server's region is smaller than -S");
    rxa::completion_dispatcher d{ex, *c->cq_channel()};
    d.add(c->cq());
    std::vector<std::byte> local(std::size_t{opt.depth} * opt.chunk);
    auto mr = c->pd().register_memory(std::span{local}, rx::access::local_write);
    std::vector<std::size_t> slot_chunk(opt.depth);
    std::vector<std::uint32_t> free_slots;
    for (std::uint32_t s = 0; s < opt.depth; ++s)
        free_slots.push_back(s);

    std::size_t const chunks = opt.region / opt.chunk;
    ::asio::steady_timer wake{ex, std::chrono::steady_clock::time_point::max()};
    std::exception_ptr failed;
    std::size_t outstanding = 0; // READs posted whose callback has not run yet
    try {
        for (std::uint32_t round = 0; round < opt.rounds; ++round) {
            std::size_t next = 0, done = 0;
            while (done < chunks) {
                // Keep `depth` READs in flight: each completes into its callback, which wakes us.
                while (next < chunks && !free_slots.empty()) {
                    std::uint32_t const s = free_slots.back();
                    free_slots.pop_back();
                    slot_chunk[s] = next;
                    auto source = region.subspan(next * opt.chunk, opt.chunk);
                    if (next == opt.bad_chunk && round == 0)
                        source = rx::remote_span<std::byte>{source.address(), source.size(), source.rkey() ^ 0x5a5a00U};
                    rxa::async_post(d, c->qp(), rx::read{mr.span().subspan(s * opt.chunk, opt.chunk), source},
                                    [&, s](std::error_code ec, rx::work_completion const&) {
                                        --outstanding;
                                        ++done;
                                        free_slots.push_back(s);
                                        wake.cancel_one();
                                        if (ec) {
                                            if (!failed)
                                                failed = std::make_exception_ptr(std::system_error(ec, "RDMA READ"));
                                            return;
                                        }
                                        std::size_t const base = slot_chunk[s] * opt.chunk;
                                        for (std::size_t i = 0; i < opt.chunk; ++i)
                                            if (local[s * opt.chunk + i] != pattern(base + i)) {
                                                ++r.bad_chunks;
                                                break;
                                            }
                                        ++r.reads;
                                    });
                    ++outstanding;
                    ++next;
                    r.peak = std::max<std::uint64_t>(r.peak, d.in_flight());
                }
                std::error_code ignored;
                co_await wake.async_wait(::asio::redirect_error(use_awaitable, ignored));
                if (failed) break;
            }
            if (failed) break;
        }
    } catch (...) { // e.g. an allocation failure starting a READ
        failed = std::current_exception();
    }
    if (failed) {
        // READs may still be posted, over `local` and `mr`: disconnect (the QP goes to ERR and
        // flushes them), then wait until every one's callback has run (the dispatcher reaped its
        // completion), before any of them is destroyed. The wait is bounded.
        try {
            c->disconnect();              // on the engine: the DREQ sent and the QP in ERR, without waiting
        } catch (std::exception const&) { // the error to report is the first one
        }
        auto const deadline = std::chrono::steady_clock::now() + 10s;
        while (outstanding != 0 && std::chrono::steady_clock::now() < deadline) {
            wake.expires_at(deadline);
            std::error_code ignored;
            co_await wake.async_wait(::asio::redirect_error(use_awaitable, ignored));
        }
        if (outstanding != 0) { // never free memory a posted READ still names
            std::fprintf(stderr, "asio_read_client: %zu READs still in flight 10 s after the disconnect\n",
                         outstanding);
            std::abort();
        }
        std::fprintf(stderr,
                     "asio_read_client: stopped after an error; every outstanding READ reaped (%zu in "
                     "the dispatcher)\n",
                     d.in_flight());
        std::rethrow_exception(failed);
    }
    c->disconnect();
    r.done = true;
}

} // namespace

int main(int argc, char** argv) try {
    std::string bind;
    std::uint16_t port = 0;
    settings opt;
    for (int c; (c = ::getopt(argc, argv, "b:p:S:s:q:r:E:")) != -1;) {
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
        case 'E':
            opt.bad_chunk = std::stoul(optarg);
            break;
        default:
            std::cerr << "usage: asio_read_client -b address [-p port] [-S region-bytes] [-s chunk-bytes] [-q depth] "
                         "[-r rounds] [-E chunk]\n";
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
    rxa::cm_engine eng{io.get_executor()}; // both sides' CM events, read by the reactor
    rxa::cm_acceptor<rx::rc> acceptor{eng, cm::address::resolve(bind, port)};
    cm::listener<rx::rc>& listener = acceptor.listener();
    auto const to = cm::address::resolve(bind, listener.port());
    // The server's PD, CQ and channel: the region's rkey is valid on QPs of this PD only.
    rx::protection_domain pd{listener.cm_id().context()};
    rx::completion_channel channel{listener.cm_id().context()};
    rx::completion_queue<rx::event_driven> cq{listener.cm_id().context(), 16, channel};
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
    ::asio::co_spawn(io, server(acceptor, {.pd = pd, .send_cq = cq, .recv_cq = cq, .channel = &channel}, mr, accepted),
                     keep);
    ::asio::co_spawn(io, client(eng, to, opt, r), keep);
    auto const deadline = std::chrono::steady_clock::now() + 120s;
    while (!r.done && !failure && std::chrono::steady_clock::now() < deadline)
        io.run_one_for(1s);
    if (failure) std::rethrow_exception(failure);
    if (!r.done) throw std::runtime_error("the reads did not finish within 120 s");
    double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("asio_read_client: %llu RDMA READs of %zu bytes, up to %llu in flight, %llu chunks wrong; %.3f s\n",
                static_cast<unsigned long long>(r.reads), opt.chunk, static_cast<unsigned long long>(r.peak),
                static_cast<unsigned long long>(r.bad_chunks), s);
    return r.bad_chunks == 0 && r.reads == std::uint64_t{opt.rounds} * (opt.region / opt.chunk) ? 0 : 1;
} catch (rx::error const& e) {
    e.dump_detailed(std::cerr, "E:", 2);
    return 1;
} catch (std::exception const& e) {
    std::cerr << "asio_read_client: " << e.what() << '\n';
    return 1;
}
