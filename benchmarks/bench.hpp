#pragma once
// The shared rig of the benchmark suite, and its two twins.
//
// Every benchmark is written once, as a template over a twin: `lib_twin` posts and polls
// through rdmacxx (typed work requests, completion_queue::poll/wait), `raw_twin` through plain
// libibverbs calls (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq,
// ibv_get_cq_event) on the very same QPs and CQs. The loop around them, the sizes, the signaling
// and the polling are therefore identical by construction; only the verbs calls differ.
//
// The rig: one device (RDMACXX_DEVICE, else the first), one PD, two RC QPs `a` and `b` connected
// to each other, each with its own send CQ and receive CQ and a 4 MiB registered buffer laid out
// as [0, 1 MiB) source, [1 MiB, 2 MiB) destination (receives and incoming writes land there),
// [2 MiB, 3 MiB) read destination. Each receive queue always holds `recv_depth` receives of the
// whole destination area: a benchmark that consumes receives posts the same number back.
//
// Names: GROUP/TWIN/…, e.g. lat/rdmacxx/send/busy/64; tools/bench selects one twin with
// --benchmark_filter='^[a-z]+/raw/'.

#include "rdmacxx/checked.hpp" // opt-in: not part of the umbrella header
#include "rdmacxx/rdmacxx.hpp"

#include <arpa/inet.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bench {

namespace rx = rdmacxx;
using clock_type = std::chrono::steady_clock;

inline constexpr std::size_t region_bytes = std::size_t{4} << 20;
inline constexpr std::size_t src_off = 0;
inline constexpr std::size_t dst_off = std::size_t{1} << 20;
inline constexpr std::size_t read_off = std::size_t{2} << 20;
inline constexpr std::size_t area_bytes = std::size_t{1} << 20; // largest message
inline constexpr std::uint32_t inline_max = 64;                 // max_inline_data asked for
inline constexpr std::uint32_t send_depth = 256;
inline constexpr std::uint32_t recv_depth = 256;
inline constexpr int cq_entries = 1024;

/// Which size lists to register: `reduced` (tools/bench) or `full`.
struct options {
    bool full = false;
    std::size_t reg_max = std::size_t{256} << 20; // largest registration tried
};
inline options& opts() {
    static options o;
    return o;
}

/// The device to benchmark: RDMACXX_DEVICE (set by tools/softroce), else the first one.
inline rx::context open_device() {
    rx::device_list const devices;
    if (devices.empty())
        throw std::runtime_error("no RDMA device (" + devices.describe() + "): run under tools/softroce");
    char const* const name = std::getenv("RDMACXX_DEVICE");
    return (name != nullptr && *name != '\0') ? devices.find(name).open() : devices[0].open();
}

/// One end of the loopback pair.
template <class Completion>
struct side {
    side(rx::context& ctx, rx::protection_domain& pd)
        : scq(ctx, cq_entries), rcq(ctx, cq_entries), mem(region_bytes),
          mr(pd.register_memory(std::span{mem}, rx::all_remote)),
          qp(pd, scq, rcq, {.max_send_wr = send_depth, .max_recv_wr = recv_depth, .max_inline_data = inline_max}) {}
    rx::completion_queue<Completion> scq, rcq;
    std::vector<std::byte> mem;
    // After the region: the QP goes first, so that a checked QP drains the receives it still
    // holds in the region before the region is deregistered.
    rx::memory_region mr;
    rx::queue_pair<rx::rc, Completion> qp;
    unsigned raw_unacked_s = 0, raw_unacked_r = 0; // CQ events the raw twin has not acked yet

    [[nodiscard]] std::byte volatile* at(std::size_t off) { return mem.data() + off; }
};

/// Two RC QPs on one device, connected to each other; created on first use, one per strategy.
template <class Completion>
struct rig {
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    side<Completion> a, b;

    static rig& get() {
        static rig r;
        return r;
    }

private:
    rig() : ctx(open_device()), port(ctx), pd(ctx), a(ctx, pd), b(ctx, pd) {
        rx::qp_settings o;
        o.remote_access = rx::all_remote;
        o.initiator_depth = 16;
        o.responder_resources = 16;
        a.qp.connect(port, b.qp.local_endpoint(port), o);
        b.qp.connect(port, a.qp.local_endpoint(port), o);
        for (side<Completion>* s : {&a, &b})
            for (std::uint32_t i = 0; i < recv_depth; ++i)
                s->qp.post_recv(rx::recv{s->mr.span().subspan(dst_off, area_bytes)}.id(i));
    }
};

[[noreturn]] inline void fail_wc(int status, std::uint64_t wr_id) {
    throw std::runtime_error(std::string{"work completion failed: "} +
                             ::ibv_wc_status_str(static_cast<ibv_wc_status>(status)) + " (wr_id " +
                             std::to_string(wr_id) + ")");
}

// --- the rdmacxx twin ----------------------------------------------------------------------

/// Posts and polls through rdmacxx.
template <class Completion>
struct lib_twin {
    static constexpr char const* name = "rdmacxx";
    using strategy = Completion;
    using side_t = side<Completion>;

    /// A message from `from`'s local area to `to`'s remote area (or a local area alone).
    struct msg {
        rx::local_span<std::byte> local;
        rx::remote_span<std::byte> remote;
    };
    static msg make(side_t& from, std::size_t local_off, side_t& to, std::size_t remote_off, std::size_t n) {
        return {from.mr.span().subspan(local_off, n), to.mr.remote().subspan(remote_off, n)};
    }
    static msg make_recv(side_t& s) { return {s.mr.span().subspan(dst_off, area_bytes), {}}; }

    [[gnu::always_inline]] static void write(side_t& s, msg const& m, bool sig, bool inl, std::uint64_t id) {
        s.qp.post(rx::write{m.local, m.remote}.id(id).signaled(sig).inlined(inl));
    }
    [[gnu::always_inline]] static void write_imm(side_t& s, msg const& m, bool sig, bool inl, std::uint64_t id) {
        s.qp.post(rx::write_imm{m.local, m.remote, 7}.id(id).signaled(sig).inlined(inl));
    }
    [[gnu::always_inline]] static void send(side_t& s, msg const& m, bool sig, bool inl, std::uint64_t id) {
        s.qp.post(rx::send{m.local}.id(id).signaled(sig).inlined(inl));
    }
    [[gnu::always_inline]] static void read(side_t& s, msg const& m, std::uint64_t id) {
        s.qp.post(rx::read{m.local, m.remote}.id(id));
    }
    [[gnu::always_inline]] static void recv(side_t& s, msg const& m, std::uint64_t id) {
        s.qp.post_recv(rx::recv{m.local}.id(id));
    }

    /// A chain of `L` writes (Send = false) or sends (Send = true) of `m`, request j signaled when
    /// `(first + j + 1) % every == 0`; one doorbell. Up to 16 requests go through the variadic
    /// post(wr…); 64 through post(std::span), which chains 64 at a time.
    template <std::size_t L, bool Send>
    [[gnu::always_inline]] static void chain(side_t& s, msg const& m, std::uint64_t first, std::uint32_t every,
                                             bool inl) {
        auto one = [&](std::size_t j) {
            bool const sig = (first + j + 1) % every == 0;
            if constexpr (Send)
                return rx::send{m.local}.id(first + j).signaled(sig).inlined(inl);
            else
                return rx::write{m.local, m.remote}.id(first + j).signaled(sig).inlined(inl);
        };
        [&]<std::size_t... J>(std::index_sequence<J...>) {
            if constexpr (L <= 16) {
                s.qp.post(one(J)...);
            } else {
                using wr_t = decltype(one(0));
                std::array<wr_t, L> const wrs{one(J)...};
                s.qp.post(std::span<wr_t const>{wrs});
            }
        }
        (std::make_index_sequence<L>{});
    }

    /// Takes up to 16 completions from `s`'s send or receive CQ without blocking.
    [[gnu::always_inline]] static std::size_t poll(side_t& s, bool recv_cq) {
        auto const got = (recv_cq ? s.rcq : s.scq).template poll<16>();
        for (rx::work_completion const& wc : got)
            if (!wc.ok()) [[unlikely]]
                fail_wc(static_cast<int>(wc.status()), wc.wr_id());
        return got.size();
    }
    /// Blocks (spinning or sleeping, as the strategy says) for one completion.
    [[gnu::always_inline]] static void wait(side_t& s, bool recv_cq) {
        rx::work_completion const wc = (recv_cq ? s.rcq : s.scq).wait_one();
        if (!wc.ok()) [[unlikely]]
            fail_wc(static_cast<int>(wc.status()), wc.wr_id());
    }
    /// One empty poll of one completion.
    [[gnu::always_inline]] static bool poll_empty(side_t& s) { return s.scq.template poll<1>().empty(); }

    /// Registers `n` bytes at `p`, then deregisters them; returns the seconds each took.
    static std::pair<double, double> register_memory(rx::protection_domain& pd, std::byte* p, std::size_t n) {
        auto const t0 = clock_type::now();
        std::optional<rx::memory_region> mr{pd.register_memory(
            std::span{p, n}, rx::access::local_write | rx::access::remote_write | rx::access::remote_read)};
        auto const t1 = clock_type::now();
        benchmark::DoNotOptimize(mr->lkey());
        auto const t2 = clock_type::now();
        mr.reset();
        return {std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(clock_type::now() - t2).count()};
    }
};

/// The rdmacxx twin with in-flight tracking (`checked<Completion>`): what tracking costs.
template <class Completion>
struct checked_twin : lib_twin<rx::checked<Completion>> {
    static constexpr char const* name = "rdmacxx-checked";
};

// --- the raw-verbs twin ----------------------------------------------------------------------

/// Posts and polls with plain libibverbs calls, as a careful C programmer would.
template <class Completion>
struct raw_twin {
    static constexpr char const* name = "raw";
    using strategy = Completion;
    using side_t = side<Completion>;

    struct msg {
        std::uint64_t addr;
        std::uint32_t length;
        std::uint32_t lkey;
        std::uint64_t remote_addr;
        std::uint32_t rkey;
    };
    static msg make(side_t& from, std::size_t local_off, side_t& to, std::size_t remote_off, std::size_t n) {
        return {reinterpret_cast<std::uintptr_t>(from.mem.data() + local_off), static_cast<std::uint32_t>(n),
                from.mr.lkey(), reinterpret_cast<std::uintptr_t>(to.mem.data() + remote_off), to.mr.rkey()};
    }
    static msg make_recv(side_t& s) {
        return {reinterpret_cast<std::uintptr_t>(s.mem.data() + dst_off), static_cast<std::uint32_t>(area_bytes),
                s.mr.lkey(), 0, 0};
    }

    [[noreturn]] static void fail(char const* verb, int rc) {
        throw std::runtime_error(std::string{verb} + " failed: " + std::to_string(rc));
    }

    [[gnu::always_inline]] static void post_one(side_t& s, msg const& m, ibv_wr_opcode op, unsigned flags,
                                                std::uint64_t id) {
        ibv_sge sge;
        sge.addr = m.addr;
        sge.length = m.length;
        sge.lkey = m.lkey;
        ibv_send_wr wr{};
        wr.wr_id = id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = op;
        wr.send_flags = flags;
        if (op == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(7);
        if (op != IBV_WR_SEND) {
            wr.wr.rdma.remote_addr = m.remote_addr;
            wr.wr.rdma.rkey = m.rkey;
        }
        ibv_send_wr* bad = nullptr;
        if (int rc = ::ibv_post_send(s.qp.native_handle(), &wr, &bad); rc != 0) [[unlikely]]
            fail("ibv_post_send", rc);
    }
    static unsigned flags(bool sig, bool inl) {
        return (sig ? unsigned{IBV_SEND_SIGNALED} : 0U) | (inl ? unsigned{IBV_SEND_INLINE} : 0U);
    }

    [[gnu::always_inline]] static void write(side_t& s, msg const& m, bool sig, bool inl, std::uint64_t id) {
        post_one(s, m, IBV_WR_RDMA_WRITE, flags(sig, inl), id);
    }
    [[gnu::always_inline]] static void write_imm(side_t& s, msg const& m, bool sig, bool inl, std::uint64_t id) {
        post_one(s, m, IBV_WR_RDMA_WRITE_WITH_IMM, flags(sig, inl), id);
    }
    [[gnu::always_inline]] static void send(side_t& s, msg const& m, bool sig, bool inl, std::uint64_t id) {
        post_one(s, m, IBV_WR_SEND, flags(sig, inl), id);
    }
    [[gnu::always_inline]] static void read(side_t& s, msg const& m, std::uint64_t id) {
        post_one(s, m, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, id);
    }
    [[gnu::always_inline]] static void recv(side_t& s, msg const& m, std::uint64_t id) {
        ibv_sge sge;
        sge.addr = m.addr;
        sge.length = m.length;
        sge.lkey = m.lkey;
        ibv_recv_wr wr;
        wr.wr_id = id;
        wr.next = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (int rc = ::ibv_post_recv(s.qp.native_handle(), &wr, &bad); rc != 0) [[unlikely]]
            fail("ibv_post_recv", rc);
    }

    template <std::size_t L, bool Send>
    [[gnu::always_inline]] static void chain(side_t& s, msg const& m, std::uint64_t first, std::uint32_t every,
                                             bool inl) {
        ibv_sge sge[L];
        ibv_send_wr wr[L];
        for (std::size_t j = 0; j < L; ++j) {
            sge[j].addr = m.addr;
            sge[j].length = m.length;
            sge[j].lkey = m.lkey;
            wr[j] = ibv_send_wr{};
            wr[j].wr_id = first + j;
            wr[j].next = j + 1 < L ? &wr[j + 1] : nullptr;
            wr[j].sg_list = &sge[j];
            wr[j].num_sge = 1;
            wr[j].send_flags = flags((first + j + 1) % every == 0, inl);
            if constexpr (Send) {
                wr[j].opcode = IBV_WR_SEND;
            } else {
                wr[j].opcode = IBV_WR_RDMA_WRITE;
                wr[j].wr.rdma.remote_addr = m.remote_addr;
                wr[j].wr.rdma.rkey = m.rkey;
            }
        }
        ibv_send_wr* bad = nullptr;
        if (int rc = ::ibv_post_send(s.qp.native_handle(), wr, &bad); rc != 0) [[unlikely]]
            fail("ibv_post_send", rc);
    }

    [[gnu::always_inline]] static std::size_t poll(side_t& s, bool recv_cq) {
        ibv_wc wc[16];
        int const n = ::ibv_poll_cq((recv_cq ? s.rcq : s.scq).native_handle(), 16, wc);
        if (n < 0) [[unlikely]]
            fail("ibv_poll_cq", n);
        for (int i = 0; i < n; ++i)
            if (wc[i].status != IBV_WC_SUCCESS) [[unlikely]]
                fail_wc(static_cast<int>(wc[i].status), wc[i].wr_id);
        return static_cast<std::size_t>(n);
    }
    [[gnu::always_inline]] static void wait(side_t& s, bool recv_cq) {
        ibv_cq* const cq = (recv_cq ? s.rcq : s.scq).native_handle();
        ibv_wc wc;
        for (;;) {
            int n = ::ibv_poll_cq(cq, 1, &wc);
            if constexpr (Completion::uses_channel) {
                if (n == 0) {
                    if (int rc = ::ibv_req_notify_cq(cq, 0); rc != 0) [[unlikely]]
                        fail("ibv_req_notify_cq", rc);
                    n = ::ibv_poll_cq(cq, 1, &wc);
                    if (n == 0) {
                        ibv_cq* ev_cq = nullptr;
                        void* ev_ctx = nullptr;
                        if (::ibv_get_cq_event(cq->channel, &ev_cq, &ev_ctx) != 0) [[unlikely]]
                            fail("ibv_get_cq_event", errno);
                        unsigned& unacked = recv_cq ? s.raw_unacked_r : s.raw_unacked_s;
                        if (++unacked == 64) { // as rdmacxx: acknowledge in batches
                            ::ibv_ack_cq_events(ev_cq, unacked);
                            unacked = 0;
                        }
                        continue;
                    }
                }
            }
            if (n < 0) [[unlikely]]
                fail("ibv_poll_cq", n);
            if (n == 1) {
                if (wc.status != IBV_WC_SUCCESS) [[unlikely]]
                    fail_wc(static_cast<int>(wc.status), wc.wr_id);
                return;
            }
        }
    }
    [[gnu::always_inline]] static bool poll_empty(side_t& s) {
        ibv_wc wc;
        return ::ibv_poll_cq(s.scq.native_handle(), 1, &wc) == 0;
    }

    static std::pair<double, double> register_memory(rx::protection_domain& pd, std::byte* p, std::size_t n) {
        auto const t0 = clock_type::now();
        ibv_mr* mr = (::ibv_reg_mr)(pd.native_handle(), p, n,
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
        auto const t1 = clock_type::now();
        if (mr == nullptr) fail("ibv_reg_mr", errno);
        benchmark::DoNotOptimize(mr->lkey);
        auto const t2 = clock_type::now();
        if (int rc = ::ibv_dereg_mr(mr); rc != 0) fail("ibv_dereg_mr", rc);
        return {std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(clock_type::now() - t2).count()};
    }
};

/// Acknowledges the CQ events the raw twin collected (before the next twin runs or the CQs go).
template <class Completion>
void settle_raw_events(rig<Completion>& r) {
    if constexpr (Completion::uses_channel) {
        for (auto* s : {&r.a, &r.b}) {
            if (s->raw_unacked_s != 0) ::ibv_ack_cq_events(s->scq.native_handle(), s->raw_unacked_s);
            if (s->raw_unacked_r != 0) ::ibv_ack_cq_events(s->rcq.native_handle(), s->raw_unacked_r);
            s->raw_unacked_s = s->raw_unacked_r = 0;
        }
    }
}

/// Signals every `every`-th request of a stream and counts the signaled ones not yet reaped.
struct signaler {
    std::uint32_t every;
    std::uint32_t count = 0;
    std::uint32_t pending = 0;
    bool next() noexcept {
        bool const sig = ++count % every == 0;
        pending += sig ? 1U : 0U;
        return sig;
    }
};

/// Takes every completion waiting on `s`'s receive CQ and posts as many receives back; returns
/// how many.
template <class Twin>
std::size_t replenish(typename Twin::side_t& s, typename Twin::msg const& recv_area) {
    std::size_t total = 0;
    for (std::size_t got = Twin::poll(s, true); got != 0; got = Twin::poll(s, true)) {
        for (std::size_t i = 0; i < got; ++i)
            Twin::recv(s, recv_area, i);
        total += got;
    }
    return total;
}

/// A stream of `count` writes (Send = false) or sends (Send = true) of `m` from `from` to `to`,
/// posted in chains of `L`, request i signaled when (i + 1) % every == 0, at most `window`
/// requests in flight; returns when every request has completed (and, for sends, every receive
/// has been reposted). `count` is a multiple of `every` and of `L`.
template <class Twin, std::size_t L, bool Send>
void stream(typename Twin::side_t& from, typename Twin::side_t& to, typename Twin::msg const& m,
            typename Twin::msg const& recv_area, std::uint64_t count, std::uint32_t window, std::uint32_t every,
            bool inl) {
    std::uint64_t posted = 0;
    std::uint64_t outstanding = 0;
    std::uint64_t received = 0;
    while (posted < count) {
        while (outstanding + L > window) {
            outstanding -= Twin::poll(from, false) * every;
            if constexpr (Send) received += replenish<Twin>(to, recv_area);
        }
        Twin::template chain<L, Send>(from, m, posted, every, inl);
        posted += L;
        outstanding += L;
    }
    while (outstanding > 0) {
        outstanding -= Twin::poll(from, false) * every;
        if constexpr (Send) received += replenish<Twin>(to, recv_area);
    }
    if constexpr (Send)
        while (received < count)
            received += replenish<Twin>(to, recv_area);
}

/// The benchmark name made of `parts` joined by '/' (built by appending: GCC 12's -Wrestrict
/// misfires on chains of std::string operator+ at -O3).
inline std::string name_of(std::initializer_list<std::string_view> parts) {
    std::string s;
    for (std::string_view p : parts) {
        if (!s.empty()) s += '/';
        s.append(p);
    }
    return s;
}

/// Runs `body` and turns an exception into SkipWithError.
template <class F>
void guarded(benchmark::State& st, F&& body) {
    try {
        body();
    } catch (std::exception const& e) {
        st.SkipWithError(e.what());
    }
}

/// The p-th quantile (0..1) of sorted `v`.
inline double quantile(std::vector<double> const& v, double p) {
    if (v.empty()) return 0;
    auto const i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

// Registration of each group, called by main after the options are read.
void register_latency();
void register_bandwidth();
void register_rate();
void register_completion();
void register_registration();

} // namespace bench
