// bench-asio — the Asio adapter (rdmacxx/asio.hpp) against the plain event-driven twin and the
// raw-verbs event-driven twin, in one process and one run. Built when Meson finds both Google
// Benchmark and standalone Asio; tools/bench runs it as its group "asio".
//
// Usage: bench-asio [Google Benchmark flags]
// Environment: RDMACXX_DEVICE (the device; default the first); RDMACXX_BENCH_ITERATIONS=N runs
// every benchmark for exactly N iterations, once (no calibration runs): tools/bench runs a row
// under `strace -c -f` with two such counts and divides the difference in system calls by the
// difference in iterations, which leaves the set-up out. In that mode the coroutine twin has no
// watchdog (its 1 s tick is a timer's system calls per second, not per operation: under strace,
// where a round trip takes tens of milliseconds, it added 0.2 system calls per round trip);
// tools/bench bounds the run with timeout(1) instead.
// Exit status: 0 when every benchmark ran; 1 when one failed (its row says why) or none ran.
//
// Names are asio/TWIN/ROW/8, TWIN one of
//   coawait  C++20 coroutines on rdmacxx::io: co_await async_post / async_recv on one
//            single-threaded io_context serving both ends, through one completion_dispatcher;
//   plain    rdmacxx queue_pair<rc, event_driven> and completion_queue::wait, no Asio;
//   raw      plain libibverbs: ibv_poll_cq, ibv_req_notify_cq, a blocking ibv_get_cq_event and
//            ibv_ack_cq_events in batches of 64;
// and ROW one of
//   send_rtt       round trip of an 8-byte SEND: a's ping lands in a receive of b, b sends a pong
//                  back into a receive of a. One iteration is one round trip, timed by hand
//                  (UseManualTime); p50_us, p99_us, p999_us are round-trip quantiles in µs;
//   write_imm_rtt  the same with 8-byte RDMA WRITEs with immediate (each consumes a receive);
//   send_rate_q64  8-byte SENDs from a to b, 64 in flight, each completion refilled at once, b's
//                  receives reposted as they complete; one iteration is 1024 messages, timed by
//                  the wall clock (UseRealTime); msgs is messages per second.
// Every row also reports allocs_per_op: heap allocations (this program counts global operator
// new) per operation over the timed loop, an operation being one posted request or receive
// (4 per round trip, 2 per message of the rate row); the raw twin also reports how often it
// slept in ibv_get_cq_event (events_per_iter, events_per_msg).
//
// Identical verbs work. Each twin of each row has its own loopback pair: two RC QPs connected to
// each other, whose send and receive queues all complete on ONE CQ with its own completion
// channel. Every send-queue request is signaled and inline (8 bytes: the coroutine's operation
// completes with its work completion, so the plain and raw twins signal every request too), and
// every completion is reaped. Per round trip each twin posts 2 requests and 2 receives and reaps
// 4 completions; each side keeps 2 receives posted (one per coroutine of that side). Per message
// of the rate row each twin posts 1 SEND and 1 receive and reaps 2 completions, with 64 SENDs in
// flight and 128 receives posted at b. Events are acknowledged in batches of 64 by all three.
// What differs is the strategy itself:
//   - coawait waits on the channel's descriptor in Asio's reactor (epoll) and reads its events
//     without blocking; each wake-up drains the CQ (poll 16 at a time until empty, arm, poll
//     again) and posts each completion to the handler of the coroutine that posted its request;
//     the plain and raw twins sleep in a blocking ibv_get_cq_event around poll, arm, poll, one
//     wait at a time (up to 16 completions per poll), in a single loop that tells completions
//     apart by wr_id;
//   - on rxe a request is carried out within the system call that posts it, so its completion
//     is mostly there already when the plain and raw loops poll before arming: they seldom
//     sleep (the raw twin's events_per_iter and events_per_msg say how often). The dispatcher
//     routes completions only when the channel reports them, so every batch costs it a wake-up
//     of the reactor (epoll_wait, the event's read, ibv_req_notify_cq, a read that finds no
//     more events, poll(2), Asio's epoll_ctl before it waits again);
//   - order: a coroutine reposts its receive after what it does with the message (a's pinger
//     after posting the next ping, b's ponger after its pong's completion); the plain and raw
//     loops repost a's receive right after the next ping and b's right after its pong.
// The coroutine pair of a row lives as long as the program (its coroutines park in their
// receives between runs); the rate row's stream keeps its 64 SENDs in flight between runs.
// Bounds: the coroutine twin fails a run after 10 s without a completion (a watchdog timer on its
// io_context); the plain and raw twins block in their waits as the main suite's do, bounded by
// the caller's timeout (tools/check runs this under `timeout 300`).

#include "bench.hpp"

#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/operations.hpp"

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <system_error>
#include <type_traits>

// --- counting operator new (this program only) ---------------------------------------------

namespace {
std::atomic<std::uint64_t> allocations{0};

void* counted_alloc(std::size_t n, std::size_t align = 0) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (n == 0) n = 1;
    return align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                             : std::malloc(n);
}
std::uint64_t allocated() { return allocations.load(std::memory_order_relaxed); }
} // namespace

// The replaceable allocation functions. GCC cannot see that these deletes pair with the news
// above, both on malloc/free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
    if (void* p = counted_alloc(n)) return p;
    throw std::bad_alloc{};
}
void* operator new[](std::size_t n) {
    if (void* p = counted_alloc(n)) return p;
    throw std::bad_alloc{};
}
void* operator new(std::size_t n, std::align_val_t a) {
    if (void* p = counted_alloc(n, static_cast<std::size_t>(a))) return p;
    throw std::bad_alloc{};
}
void* operator new[](std::size_t n, std::align_val_t a) {
    if (void* p = counted_alloc(n, static_cast<std::size_t>(a))) return p;
    throw std::bad_alloc{};
}
void* operator new(std::size_t n, std::nothrow_t const&) noexcept { return counted_alloc(n); }
void* operator new[](std::size_t n, std::nothrow_t const&) noexcept { return counted_alloc(n); }
void* operator new(std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }

namespace bench {
namespace {

namespace rxa = rdmacxx::io;
using ::asio::awaitable;
using ::asio::use_awaitable;

constexpr std::size_t msg_bytes = 8;
constexpr std::size_t recv_bytes = 16;     // each receive's buffer
constexpr std::uint32_t pp_recvs = 2;      // receives each side keeps posted in the round trips
constexpr std::uint32_t rate_window = 64;  // SENDs in flight in the rate row
constexpr std::uint32_t rate_recvs = 128;  // receives b keeps posted in the rate row
constexpr std::uint64_t rate_count = 1024; // messages per iteration of the rate row
constexpr unsigned ack_every = 64;         // as completion_queue::ack_batch

// Offsets in a pair's region: each side's source, each side's WRITE target, the receive buffers.
constexpr std::size_t a_src = 0, b_src = 64, a_dst = 128, b_dst = 192;
constexpr std::size_t a_recv = 1024, b_recv = 2048;
constexpr std::size_t pair_bytes = b_recv + rate_recvs * recv_bytes;

// wr_ids of the plain and raw twins (the dispatcher chooses the coroutines' own).
constexpr std::uint64_t id_ping = 1, id_pong = 2, id_recv_a = 3, id_recv_b = 4;

enum class row { send_rtt, write_imm_rtt, send_rate };

bool any_failed = false; // a benchmark failed: main's exit status says so

/// Runs `body`; an exception becomes SkipWithError and a failed exit status.
template <class F>
void checked_run(benchmark::State& st, F&& body) {
    try {
        body();
    } catch (std::exception const& e) {
        any_failed = true;
        st.SkipWithError(e.what());
    }
}

/// One device, one PD for every pair.
struct device {
    device() : ctx(open_device()), port(ctx), pd(ctx) {}
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
};

/// A loopback pair: RC QPs `a` and `b` connected to each other, all four queues on one CQ,
/// whose events go to its own channel; one registered region.
struct loopback {
    explicit loopback(device& dev)
        : channel(dev.ctx), cq(dev.ctx, 1024, channel), mem(pair_bytes),
          mr(dev.pd.register_memory(std::span{mem}, rx::all_remote)), a(dev.pd, cq, cq, caps()),
          b(dev.pd, cq, cq, caps()) {
        rx::qp_settings o;
        o.remote_access = rx::all_remote;
        a.connect(dev.port, b.local_endpoint(dev.port), o);
        b.connect(dev.port, a.local_endpoint(dev.port), o);
    }
    static rx::qp_capabilities caps() {
        return {.max_send_wr = 128, .max_recv_wr = 256, .max_inline_data = inline_max};
    }
    rx::completion_channel channel;
    rx::completion_queue<rx::event_driven> cq;
    std::vector<std::byte> mem;
    rx::memory_region mr;
    rx::queue_pair<rx::rc, rx::event_driven> a, b;

    [[nodiscard]] rx::local_span<std::byte> local(std::size_t off, std::size_t n) { return mr.span().subspan(off, n); }
    [[nodiscard]] rx::remote_span<std::byte> remote(std::size_t off) { return mr.remote().subspan(off, msg_bytes); }
};

/// Round-trip samples of one run and their quantiles as counters.
struct samples {
    std::vector<double> v;
    samples() { v.reserve(std::size_t{1} << 16); }
    void add(double s) {
        if (v.size() < v.capacity()) v.push_back(s);
    }
    void report(benchmark::State& st) {
        std::sort(v.begin(), v.end());
        st.counters["p50_us"] = quantile(v, 0.5) * 1e6;
        st.counters["p99_us"] = quantile(v, 0.99) * 1e6;
        st.counters["p999_us"] = quantile(v, 0.999) * 1e6;
        st.counters["bytes"] = static_cast<double>(msg_bytes);
    }
};

void report_allocations(benchmark::State& st, std::uint64_t allocs, double ops) {
    st.counters["allocs_per_op"] = ops > 0 ? static_cast<double>(allocs) / ops : 0.0;
}

// --- coawait: coroutines on rdmacxx::io ---------------------------------------------------

/// A pair served by a completion_dispatcher on its own single-threaded io_context, and the
/// coroutines of one row, which live as long as it does. `io.run()` drives them until a
/// coroutine stops it; a watchdog fails the run after 10 s without progress.
struct coawait_base {
    explicit coawait_base(device& dev, std::uint32_t ops)
        : p(dev), d(io.get_executor(), p.channel, {.max_operations = ops}), watchdog(io) {
        d.add(p.cq);
        if (!counting()) tick(); // see the top: counting system calls, tools/bench bounds the run
    }
    coawait_base(coawait_base const&) = delete;
    coawait_base& operator=(coawait_base const&) = delete;
    ~coawait_base() { watchdog.cancel(); }

    ::asio::io_context io{1}; // first: destroyed last, after the handlers it still holds
    loopback p;
    rxa::completion_dispatcher d; // after the pair: destroyed before its channel and CQ
    ::asio::steady_timer watchdog;
    std::uint64_t progress = 0;
    std::uint64_t seen = 0;
    unsigned idle_ticks = 0;
    std::exception_ptr failure;

    /// Runs the io_context until a coroutine stops it; rethrows what a coroutine threw.
    void drive() {
        if (failure) std::rethrow_exception(failure);
        idle_ticks = 0;
        io.restart();
        io.run();
        if (failure) std::rethrow_exception(failure);
    }
    /// The completion handler of a co_spawn'ed coroutine: what it threw stops the run.
    auto on_exit() {
        return [this](std::exception_ptr e) {
            failure = e ? e : std::make_exception_ptr(std::runtime_error("a benchmark coroutine returned"));
            io.stop();
        };
    }

private:
    static bool counting() {
        char const* n = std::getenv("RDMACXX_BENCH_ITERATIONS");
        return n != nullptr && *n != '\0';
    }
    void tick() {
        watchdog.expires_after(std::chrono::seconds{1});
        watchdog.async_wait([this](std::error_code ec) {
            if (ec) return;
            if (progress != seen) {
                seen = progress;
                idle_ticks = 0;
            } else if (++idle_ticks == 10 && !failure) {
                failure = std::make_exception_ptr(std::runtime_error("asio: no completion for 10 s"));
                io.stop();
            }
            tick();
        });
    }
};

/// The round trips: on each side two coroutines, each looping on one receive. a's pingers take
/// a pong, end the round trip and post the next ping; b's pongers take a ping and post a pong.
/// The ping and pong alternate between the two coroutines of each side (an RC receive queue is
/// first in, first out), so a receive is always posted before its message can come.
struct coawait_rtt : coawait_base {
    explicit coawait_rtt(device& dev) : coawait_base(dev, 64) {
        for (std::uint32_t k = 0; k < pp_recvs; ++k) {
            ::asio::co_spawn(io, ponger(k), on_exit());
            ::asio::co_spawn(io, pinger(k), on_exit());
        }
        drive(); // until all four wait in their receives
    }

    row kind = row::send_rtt;
    benchmark::State* st = nullptr;
    samples* out = nullptr;
    bool running = false;
    unsigned parked = 0; // coroutines waiting in their receive
    clock_type::time_point t0;

    void run(benchmark::State& state, row r, samples& s) {
        if (failure) std::rethrow_exception(failure);
        kind = r;
        st = &state;
        out = &s;
        if (!state.KeepRunning()) return;
        std::uint64_t const a0 = allocated();
        running = true;
        t0 = clock_type::now();
        // The first ping of the run (the coroutines post the others).
        auto const check = [this](std::error_code ec, rx::work_completion const&) {
            if (ec && !failure) failure = std::make_exception_ptr(std::system_error(ec, "the first ping"));
        };
        if (kind == row::send_rtt)
            rxa::async_post(d, p.a, rx::send{p.local(a_src, msg_bytes)}.inlined(), check);
        else
            rxa::async_post(d, p.a, rx::write_imm{p.local(a_src, msg_bytes), p.remote(b_dst), 7}.inlined(), check);
        drive();
        report_allocations(state, allocated() - a0, 4.0 * static_cast<double>(state.iterations()));
        st = nullptr;
    }

private:
    // Before a coroutine waits in its receive: the run is over when all four do.
    void park() {
        if (++parked == 2 * pp_recvs && !running) io.stop();
    }

    awaitable<void> pinger(std::uint32_t k) {
        auto const buf = p.local(a_recv + k * recv_bytes, recv_bytes);
        for (;;) {
            park();
            (void)co_await rxa::async_recv(d, p.a, rx::recv{buf}, use_awaitable);
            --parked;
            ++progress;
            auto const t1 = clock_type::now();
            double const s = std::chrono::duration<double>(t1 - t0).count();
            st->SetIterationTime(s);
            out->add(s);
            if (!st->KeepRunning()) {
                running = false;
                continue;
            }
            t0 = clock_type::now();
            if (kind == row::send_rtt)
                (void)co_await rxa::async_post(d, p.a, rx::send{p.local(a_src, msg_bytes)}.inlined(), use_awaitable);
            else
                (void)co_await rxa::async_post(
                    d, p.a, rx::write_imm{p.local(a_src, msg_bytes), p.remote(b_dst), 7}.inlined(), use_awaitable);
        }
    }

    awaitable<void> ponger(std::uint32_t k) {
        auto const buf = p.local(b_recv + k * recv_bytes, recv_bytes);
        for (;;) {
            park();
            (void)co_await rxa::async_recv(d, p.b, rx::recv{buf}, use_awaitable);
            --parked;
            if (kind == row::send_rtt)
                (void)co_await rxa::async_post(d, p.b, rx::send{p.local(b_src, msg_bytes)}.inlined(), use_awaitable);
            else
                (void)co_await rxa::async_post(
                    d, p.b, rx::write_imm{p.local(b_src, msg_bytes), p.remote(a_dst), 7}.inlined(), use_awaitable);
        }
    }
};

/// The rate row: 128 coroutines each looping on a receive of b, 64 each looping on a SEND of a.
/// The stream never stops; a run lets it go for its iterations' messages.
struct coawait_rate : coawait_base {
    explicit coawait_rate(device& dev) : coawait_base(dev, rate_window + rate_recvs + 16) {
        for (std::uint32_t k = 0; k < rate_recvs; ++k) // first: the receives go before the first SEND
            ::asio::co_spawn(io, receiver(k), on_exit());
        for (std::uint32_t k = 0; k < rate_window; ++k)
            ::asio::co_spawn(io, sender(), on_exit());
    }

    std::uint64_t completed = 0, received = 0, target = 0;

    void run(benchmark::State& st) {
        std::uint64_t const c0 = completed, a0 = allocated();
        for (auto _ : st) {
            target = completed + rate_count;
            drive();
        }
        std::uint64_t const allocs = allocated() - a0; // before the counters' map allocates
        auto const msgs = static_cast<double>(completed - c0);
        st.counters["msgs"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
        report_allocations(st, allocs, 2.0 * msgs);
    }

private:
    awaitable<void> sender() {
        auto const src = p.local(a_src, msg_bytes);
        for (;;) {
            (void)co_await rxa::async_post(d, p.a, rx::send{src}.inlined(), use_awaitable);
            ++progress;
            if (++completed == target) io.stop();
        }
    }
    awaitable<void> receiver(std::uint32_t k) {
        auto const buf = p.local(b_recv + k * recv_bytes, recv_bytes);
        for (;;) {
            (void)co_await rxa::async_recv(d, p.b, rx::recv{buf}, use_awaitable);
            ++received;
        }
    }
};

// --- plain and raw: one event-driven loop, the same work -------------------------------------

/// What the plain twin does with the verbs: rdmacxx calls.
struct plain_ops {
    static void post(loopback& p, bool at_a, row r) {
        auto& qp = at_a ? p.a : p.b;
        auto const src = p.local(at_a ? a_src : b_src, msg_bytes);
        std::uint64_t const id = at_a ? id_ping : id_pong;
        if (r == row::write_imm_rtt)
            qp.post(rx::write_imm{src, p.remote(at_a ? b_dst : a_dst), 7}.id(id).inlined());
        else
            qp.post(rx::send{src}.id(id).inlined());
    }
    static void recv(loopback& p, bool at_a, std::size_t k) {
        (at_a ? p.a : p.b)
            .post_recv(rx::recv{p.local((at_a ? a_recv : b_recv) + k * recv_bytes, recv_bytes)}.id(at_a ? id_recv_a
                                                                                                        : id_recv_b));
    }
    struct waiter {
        std::array<rx::work_completion, 16> wc;
        /// Blocks for completions (poll, arm, poll, sleep on the channel); calls f(wr_id) on each.
        template <class F>
        void operator()(loopback& p, F&& f) {
            std::size_t const n = p.cq.wait(std::span{wc});
            for (std::size_t i = 0; i < n; ++i) {
                if (!wc[i].ok()) [[unlikely]]
                    fail_wc(static_cast<int>(wc[i].status()), wc[i].wr_id());
                f(wc[i].wr_id());
            }
        }
        void settle(loopback&) {}
        static constexpr bool counts_events = false;
        std::uint64_t events = 0;
    };
};

/// What the raw twin does with the verbs: libibverbs calls, as a careful C programmer writes them.
struct raw_ops {
    [[noreturn]] static void fail(char const* verb, int rc) {
        throw std::runtime_error(std::string{verb} + " failed: " + std::to_string(rc));
    }
    static void post(loopback& p, bool at_a, row r) {
        ibv_sge sge;
        sge.addr = reinterpret_cast<std::uintptr_t>(p.mem.data() + (at_a ? a_src : b_src));
        sge.length = static_cast<std::uint32_t>(msg_bytes);
        sge.lkey = p.mr.lkey();
        ibv_send_wr wr{};
        wr.wr_id = at_a ? id_ping : id_pong;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = unsigned{IBV_SEND_SIGNALED} | unsigned{IBV_SEND_INLINE};
        if (r == row::write_imm_rtt) {
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(7);
            wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(p.mem.data() + (at_a ? b_dst : a_dst));
            wr.wr.rdma.rkey = p.mr.rkey();
        } else {
            wr.opcode = IBV_WR_SEND;
        }
        ibv_send_wr* bad = nullptr;
        if (int rc = ::ibv_post_send((at_a ? p.a : p.b).native_handle(), &wr, &bad); rc != 0) [[unlikely]]
            fail("ibv_post_send", rc);
    }
    static void recv(loopback& p, bool at_a, std::size_t k) {
        ibv_sge sge;
        sge.addr = reinterpret_cast<std::uintptr_t>(p.mem.data() + (at_a ? a_recv : b_recv) + k * recv_bytes);
        sge.length = static_cast<std::uint32_t>(recv_bytes);
        sge.lkey = p.mr.lkey();
        ibv_recv_wr wr;
        wr.wr_id = at_a ? id_recv_a : id_recv_b;
        wr.next = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (int rc = ::ibv_post_recv((at_a ? p.a : p.b).native_handle(), &wr, &bad); rc != 0) [[unlikely]]
            fail("ibv_post_recv", rc);
    }
    struct waiter {
        std::array<ibv_wc, 16> wc;
        unsigned unacked = 0;
        std::uint64_t events = 0; // CQ events taken: how often the loop slept
        template <class F>
        void operator()(loopback& p, F&& f) {
            ibv_cq* const cq = p.cq.native_handle();
            int n = 0;
            for (;;) {
                n = ::ibv_poll_cq(cq, 16, wc.data());
                if (n != 0) break;
                if (int rc = ::ibv_req_notify_cq(cq, 0); rc != 0) [[unlikely]]
                    fail("ibv_req_notify_cq", rc);
                n = ::ibv_poll_cq(cq, 16, wc.data());
                if (n != 0) break;
                ibv_cq* ev_cq = nullptr;
                void* ev_ctx = nullptr;
                if (::ibv_get_cq_event(cq->channel, &ev_cq, &ev_ctx) != 0) [[unlikely]]
                    fail("ibv_get_cq_event", errno);
                ++events;
                if (++unacked == ack_every) {
                    ::ibv_ack_cq_events(ev_cq, unacked);
                    unacked = 0;
                }
            }
            if (n < 0) [[unlikely]]
                fail("ibv_poll_cq", n);
            for (int i = 0; i < n; ++i) {
                auto const& w = wc[static_cast<std::size_t>(i)];
                if (w.status != IBV_WC_SUCCESS) [[unlikely]]
                    fail_wc(static_cast<int>(w.status), w.wr_id);
                f(w.wr_id);
            }
        }
        static constexpr bool counts_events = true;
        /// Acknowledges the events not acknowledged yet (before the CQ goes).
        void settle(loopback& p) {
            if (unacked != 0) ::ibv_ack_cq_events(p.cq.native_handle(), unacked);
            unacked = 0;
        }
    };
};

/// The round trips in one loop: ping, (a's receive back), wait for b's receive, pong, b's
/// receive back, wait for a's receive. SEND completions are reaped by whichever wait meets them.
template <class Ops>
struct loop_rtt {
    explicit loop_rtt(device& dev) : p(dev) {
        for (std::uint32_t k = 0; k < pp_recvs; ++k) {
            Ops::recv(p, true, k);
            Ops::recv(p, false, k);
        }
    }
    ~loop_rtt() { wait.settle(p); }
    loop_rtt(loop_rtt const&) = delete;
    loop_rtt& operator=(loop_rtt const&) = delete;

    loopback p;
    typename Ops::waiter wait;
    std::uint32_t sends = 0; // SEND-queue completions not reaped yet
    std::size_t ka = 0, kb = 0;

    // Waits until the receive `id` completes, reaping the SEND completions that come before.
    void until(std::uint64_t id) {
        bool got = false;
        while (!got)
            wait(p, [&](std::uint64_t wr_id) {
                if (wr_id == id)
                    got = true;
                else if (wr_id == id_ping || wr_id == id_pong)
                    --sends;
                else
                    throw std::runtime_error("a receive completed out of turn (wr_id " + std::to_string(wr_id) + ")");
            });
    }

    void run(benchmark::State& st, row r, samples& s) {
        std::uint64_t const a0 = allocated(), e0 = wait.events;
        bool repost_a = false;
        for (auto _ : st) {
            auto const t0 = clock_type::now();
            Ops::post(p, true, r);
            ++sends;
            if (repost_a) Ops::recv(p, true, ka++ % pp_recvs);
            until(id_recv_b);
            Ops::post(p, false, r);
            ++sends;
            Ops::recv(p, false, kb++ % pp_recvs);
            until(id_recv_a);
            repost_a = true;
            double const t = std::chrono::duration<double>(clock_type::now() - t0).count();
            st.SetIterationTime(t);
            s.add(t);
        }
        report_allocations(st, allocated() - a0, 4.0 * static_cast<double>(st.iterations()));
        if constexpr (Ops::waiter::counts_events)
            st.counters["events_per_iter"] =
                static_cast<double>(wait.events - e0) / static_cast<double>(std::max<std::int64_t>(st.iterations(), 1));
        // Untimed: leave the pair as it was (2 receives on each side, every completion reaped).
        if (repost_a) Ops::recv(p, true, ka++ % pp_recvs);
        while (sends != 0)
            wait(p, [&](std::uint64_t wr_id) {
                if (wr_id != id_ping && wr_id != id_pong)
                    throw std::runtime_error("a receive completed after the last round trip");
                --sends;
            });
        wait.settle(p);
    }
};

/// The rate row in one loop: wait for completions; each SEND's is refilled with a SEND, each
/// receive's with a receive. The stream keeps its 64 SENDs in flight between runs.
template <class Ops>
struct loop_rate {
    explicit loop_rate(device& dev) : p(dev) {
        for (std::uint32_t k = 0; k < rate_recvs; ++k)
            Ops::recv(p, false, k);
        for (std::uint32_t k = 0; k < rate_window; ++k)
            Ops::post(p, true, row::send_rate);
    }
    ~loop_rate() { wait.settle(p); }
    loop_rate(loop_rate const&) = delete;
    loop_rate& operator=(loop_rate const&) = delete;

    loopback p;
    typename Ops::waiter wait;
    std::uint64_t completed = 0;
    std::size_t kb = 0;

    void run(benchmark::State& st) {
        std::uint64_t const c0 = completed, a0 = allocated(), e0 = wait.events;
        for (auto _ : st) {
            std::uint64_t const target = completed + rate_count;
            while (completed < target)
                wait(p, [&](std::uint64_t wr_id) {
                    if (wr_id == id_ping) {
                        ++completed;
                        Ops::post(p, true, row::send_rate);
                    } else {
                        Ops::recv(p, false, kb++ % rate_recvs);
                    }
                });
        }
        std::uint64_t const allocs = allocated() - a0; // before the counters' map allocates
        auto const msgs = static_cast<double>(completed - c0);
        st.counters["msgs"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
        report_allocations(st, allocs, 2.0 * msgs);
        if constexpr (Ops::waiter::counts_events)
            st.counters["events_per_msg"] = msgs > 0 ? static_cast<double>(wait.events - e0) / msgs : 0.0;
        wait.settle(p);
    }
};

// --- the rigs: created on first use, destroyed by main in order ------------------------------

struct rigs {
    std::optional<device> dev; // first: destroyed last
    std::optional<loop_rtt<plain_ops>> plain_rtt;
    std::optional<loop_rtt<raw_ops>> raw_rtt;
    std::optional<loop_rate<plain_ops>> plain_rate;
    std::optional<loop_rate<raw_ops>> raw_rate;
    std::optional<coawait_rtt> co_rtt;
    std::optional<coawait_rate> co_rate;

    template <class T>
    T& get(std::optional<T>& slot) {
        if (!dev) dev.emplace();
        if (!slot) slot.emplace(*dev);
        return *slot;
    }
};
rigs& the_rigs() {
    static rigs r;
    return r;
}

template <class Ops>
std::optional<loop_rtt<Ops>>& rtt_slot() {
    if constexpr (std::is_same_v<Ops, plain_ops>)
        return the_rigs().plain_rtt;
    else
        return the_rigs().raw_rtt;
}
template <class Ops>
std::optional<loop_rate<Ops>>& rate_slot() {
    if constexpr (std::is_same_v<Ops, plain_ops>)
        return the_rigs().plain_rate;
    else
        return the_rigs().raw_rate;
}

template <row R>
void rtt_coawait(benchmark::State& st) {
    checked_run(st, [&] {
        samples s;
        the_rigs().get(the_rigs().co_rtt).run(st, R, s);
        s.report(st);
    });
}
template <class Ops, row R>
void rtt_loop(benchmark::State& st) {
    checked_run(st, [&] {
        samples s;
        the_rigs().get(rtt_slot<Ops>()).run(st, R, s);
        s.report(st);
    });
}
void rate_coawait(benchmark::State& st) {
    checked_run(st, [&] { the_rigs().get(the_rigs().co_rate).run(st); });
    st.counters["in_flight"] = rate_window;
}
template <class Ops>
void rate_loop(benchmark::State& st) {
    checked_run(st, [&] { the_rigs().get(rate_slot<Ops>()).run(st); });
    st.counters["in_flight"] = rate_window;
}

/// `b` with exactly RDMACXX_BENCH_ITERATIONS iterations when that is set (see the top).
benchmark::internal::Benchmark* fixed(benchmark::internal::Benchmark* b) {
    if (char const* n = std::getenv("RDMACXX_BENCH_ITERATIONS"); n != nullptr && *n != '\0')
        b->Iterations(static_cast<benchmark::IterationCount>(std::strtoll(n, nullptr, 10)));
    return b;
}
void add_rtt(char const* twin, char const* r, void (*fn)(benchmark::State&)) {
    std::string const name = name_of({"asio", twin, r, std::to_string(msg_bytes)});
    fixed(benchmark::RegisterBenchmark(name.c_str(), fn)->UseManualTime()->Unit(benchmark::kMicrosecond));
}
void add_rate(char const* twin, void (*fn)(benchmark::State&)) {
    std::string const name = name_of({"asio", twin, "send_rate_q64", std::to_string(msg_bytes)});
    fixed(benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond));
}

void register_asio() {
    add_rtt("coawait", "send_rtt", rtt_coawait<row::send_rtt>);
    add_rtt("plain", "send_rtt", rtt_loop<plain_ops, row::send_rtt>);
    add_rtt("raw", "send_rtt", rtt_loop<raw_ops, row::send_rtt>);
    add_rtt("coawait", "write_imm_rtt", rtt_coawait<row::write_imm_rtt>);
    add_rtt("plain", "write_imm_rtt", rtt_loop<plain_ops, row::write_imm_rtt>);
    add_rtt("raw", "write_imm_rtt", rtt_loop<raw_ops, row::write_imm_rtt>);
    add_rate("coawait", rate_coawait);
    add_rate("plain", rate_loop<plain_ops>);
    add_rate("raw", rate_loop<raw_ops>);
}

} // namespace
} // namespace bench

int main(int argc, char** argv) {
    bench::register_asio();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    std::size_t const ran = benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    int status = 0;
    try {
        // The coroutine pairs first (their handlers go before their io_context), the device last.
        auto& r = bench::the_rigs();
        r.co_rate.reset();
        r.co_rtt.reset();
        r.raw_rate.reset();
        r.plain_rate.reset();
        r.raw_rtt.reset();
        r.plain_rtt.reset();
        r.dev.reset();
    } catch (std::exception const& e) {
        std::fprintf(stderr, "bench-asio: tearing down: %s\n", e.what());
        status = 1;
    }
    if (ran == 0) std::fprintf(stderr, "bench-asio: no benchmark ran (--benchmark_filter?)\n");
    return ran == 0 || bench::any_failed ? 1 : status;
}
