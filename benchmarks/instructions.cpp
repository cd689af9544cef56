// instructions — the instruction-count check: the posting and polling paths of rdmacxx against
// hand-written verbs doing the same work on the same real QP.
//
// For every work-request kind (send, send_imm, write, write_imm, read, compare_swap, fetch_add,
// recv), posted alone and in chains of 4 and 16, one twin posts N requests through rdmacxx and
// the other through plain ibv_post_send/ibv_post_recv with the ibv_send_wr a careful C
// programmer writes (designated initialisers, everything else zero). Then each twin polls N
// completions of that kind, one per call and up to 16 per call.
//
// Under `valgrind --tool=callgrind --collect-atstart=no` only the posting and polling loops are
// collected (CALLGRIND_TOGGLE_COLLECT around them); each section ends with
// CALLGRIND_DUMP_STATS_AT("what|kind|chain|twin|ops=N|empty=E"), so every section becomes its own
// dump whose total is the instructions of that section alone. Polling measures completions that
// are already in the CQ; a poll that came back empty anyway is counted (empty=E) so that
// tools/instruction-counts can subtract E empty polls, whose cost it takes from the "empty"
// sections. Without valgrind the program runs the same sequence as a functional check.
//
// The extended CQ (completion_queue_ex: ibv_start_poll, ibv_next_poll, ibv_end_poll) has its own
// sections, "poll_ex" and "empty_ex": a second QP posts writes, reads and receives whose
// completions go to an extended CQ, which one twin polls through rdmacxx and the other through
// the raw verbs, one per call and up to 16 per call.
//
// Usage: instructions [-n OPS]     (OPS rounded up to a multiple of 64; default 1024)
// Environment: RDMACXX_DEVICE (the device; default the first one).

#include "rdmacxx/rdmacxx.hpp"

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#endif
#include <valgrind/callgrind.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace rx = rdmacxx;

namespace {

constexpr std::size_t batch = 64; // requests per round: fits the queues, a multiple of 16

// The callgrind client requests, kept out of the measured functions' inline expansion.
[[gnu::noinline]] void collect_toggle() {
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#endif
    CALLGRIND_TOGGLE_COLLECT;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}
[[gnu::noinline]] void zero_stats() {
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#endif
    CALLGRIND_ZERO_STATS;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}
void dump_stats(std::string const& name) {
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#endif
    CALLGRIND_DUMP_STATS_AT(name.c_str());
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    std::printf("section %s\n", name.c_str());
}

[[noreturn]] void die(char const* what, int code) {
    std::fprintf(stderr, "instructions: %s failed (%d: %s)\n", what, code, std::strerror(code));
    std::exit(1);
}

enum class kind { send, send_imm, write, write_imm, read, compare_swap, fetch_add, recv };
constexpr std::array<std::pair<kind, char const*>, 8> kinds{{{kind::send, "send"},
                                                             {kind::send_imm, "send_imm"},
                                                             {kind::write, "write"},
                                                             {kind::write_imm, "write_imm"},
                                                             {kind::read, "read"},
                                                             {kind::compare_swap, "compare_swap"},
                                                             {kind::fetch_add, "fetch_add"},
                                                             {kind::recv, "recv"}}};

using qp_t = rx::queue_pair<rx::rc, rx::busy_poll>;

// What every request of a run points at. Both twins copy it into a local before their loop, as
// a careful programmer posting to the same buffers would: the compiler keeps it in registers.
struct targets {
    rx::local_span<std::byte> msg;         // 8 bytes
    rx::local_span<std::uint64_t> result;  // one atomic result
    rx::remote_span<std::byte> target;     // 8 bytes at the peer
    rx::remote_span<std::uint64_t> atomic; // one 8-byte word at the peer
};
using cq_t = rx::completion_queue<rx::busy_poll>;
using cqx_t = rx::completion_queue_ex<rx::busy_poll>;

struct rig {
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    cq_t cq_a, cq_b;
    cqx_t cq_x; // the extended CQ of ax
    qp_t a, b;
    qp_t ax, bx;                                      // ax's completions go to cq_x, bx's to cq_b
    std::vector<std::uint64_t> local_mem, remote_mem; // 8-byte aligned
    rx::memory_region local_mr, remote_mr;
    targets t;
    rx::local_span<std::byte> peer_buf; // b's receive buffer

    static rx::context open() {
        rx::device_list const devices;
        if (devices.empty()) {
            std::fprintf(stderr, "instructions: no RDMA device (%s); run under tools/softroce\n",
                         devices.describe().c_str());
            std::exit(1);
        }
        char const* const name = std::getenv("RDMACXX_DEVICE");
        return (name != nullptr && *name != '\0') ? devices.find(name).open() : devices[0].open();
    }
    static rx::qp_settings options() {
        rx::qp_settings o;
        o.remote_access = rx::all_remote;
        o.initiator_depth = 16;
        o.responder_resources = 16;
        return o;
    }

    rig()
        : ctx(open()), port(ctx), pd(ctx), cq_a(ctx, 512), cq_b(ctx, 512), cq_x(ctx, 512),
          a(pd, cq_a, cq_a, {.max_send_wr = 2 * batch, .max_recv_wr = 2 * batch}),
          b(pd, cq_b, cq_b, {.max_send_wr = 2 * batch, .max_recv_wr = 2 * batch}),
          ax(pd, cq_x, cq_x, {.max_send_wr = 2 * batch, .max_recv_wr = 2 * batch}),
          bx(pd, cq_b, cq_b, {.max_send_wr = 2 * batch, .max_recv_wr = 2 * batch}), local_mem(512), remote_mem(512),
          local_mr(pd.register_memory(std::span{local_mem}, rx::all_remote)),
          remote_mr(pd.register_memory(std::span{remote_mem}, rx::all_remote)),
          t{local_mr.span().first(8), local_mr.span<std::uint64_t>(8, 1), remote_mr.remote().first(8),
            remote_mr.remote<std::uint64_t>().subspan(8, 1)},
          peer_buf(remote_mr.span().subspan(1024, 64)) {
        a.connect(port, b.local_endpoint(port), options());
        b.connect(port, a.local_endpoint(port), options());
        ax.connect(port, bx.local_endpoint(port), options());
        bx.connect(port, ax.local_endpoint(port), options());
    }

    // Takes `n` successful completions from `cq` (not measured).
    static void drain(cq_t& cq, std::size_t n) {
        std::array<rx::work_completion, 16> wc;
        while (n > 0) {
            std::size_t const got = cq.poll(std::span{wc}.first(std::min<std::size_t>(16, n)));
            for (std::size_t i = 0; i < got; ++i)
                if (!wc[i].ok()) {
                    std::fprintf(stderr, "instructions: completion failed: %s (wr_id %llu)\n",
                                 ::ibv_wc_status_str(wc[i].status()), static_cast<unsigned long long>(wc[i].wr_id()));
                    std::exit(1);
                }
            n -= got;
        }
    }
    // Receives for `n` incoming messages at b (not measured).
    void peer_receives(std::size_t n) {
        for (std::size_t i = 0; i < n; ++i)
            b.post_recv(rx::recv{peer_buf}.id(i));
    }
    // b sends `n` messages to a, consuming a's receives (not measured).
    void peer_sends(std::size_t n) {
        for (std::size_t i = 0; i < n; ++i)
            b.post(rx::send{peer_buf.first(8)}.id(i));
        drain(cq_b, n);
    }
    // What a batch of `k` needs at the peer before it is posted, and what completes it after.
    void before(kind k) {
        if (k == kind::send || k == kind::send_imm || k == kind::write_imm) peer_receives(batch);
    }
    void after(kind k) {
        if (k == kind::recv) peer_sends(batch);
        if (k == kind::send || k == kind::send_imm || k == kind::write_imm) drain(cq_b, batch);
    }
    // A batch of `k` (write, read or recv) whose completions land in the extended CQ (not measured).
    void load_extended(kind k) {
        targets const r = t;
        for (std::size_t i = 0; i < batch; ++i) {
            if (k == kind::write)
                ax.post(rx::write{r.msg, r.target}.id(i));
            else if (k == kind::read)
                ax.post(rx::read{r.msg, r.target}.id(i));
            else
                ax.post_recv(rx::recv{r.msg}.id(i));
        }
        if (k == kind::recv) {
            for (std::size_t i = 0; i < batch; ++i)
                bx.post(rx::send{peer_buf.first(8)}.id(i));
            drain(cq_b, batch);
        }
    }
};

// --- the rdmacxx twin ----------------------------------------------------------------------

template <kind K>
[[gnu::always_inline]] inline auto typed(targets const& r, std::uint64_t id) {
    if constexpr (K == kind::send)
        return rx::send{r.msg}.id(id);
    else if constexpr (K == kind::send_imm)
        return rx::send_imm{r.msg, 7}.id(id);
    else if constexpr (K == kind::write)
        return rx::write{r.msg, r.target}.id(id);
    else if constexpr (K == kind::write_imm)
        return rx::write_imm{r.msg, r.target, 7}.id(id);
    else if constexpr (K == kind::read)
        return rx::read{r.msg, r.target}.id(id);
    else if constexpr (K == kind::compare_swap)
        return rx::compare_swap{r.result, r.atomic, 0, 0}.id(id);
    else if constexpr (K == kind::fetch_add)
        return rx::fetch_add{r.result, r.atomic, 1}.id(id);
    else
        return rx::recv{r.msg}.id(id);
}

template <kind K, std::size_t L>
[[gnu::noinline]] void post_rdmacxx(rig& r) {
    targets const t = r.t;
    for (std::size_t i = 0; i < batch; i += L) {
        // The lambda only spells out the L requests a user would write in one post(…) call: inlined
        // always, or GCC -O3 keeps it as a function of its own (the raw twin has no such call).
        [&]<std::size_t... J>(std::index_sequence<J...>) __attribute__((always_inline)) {
            if constexpr (K == kind::recv)
                r.a.post_recv(typed<K>(t, i + J)...);
            else
                r.a.post(typed<K>(t, i + J)...);
        }
        (std::make_index_sequence<L>{});
    }
}

template <std::size_t W>
[[gnu::noinline]] std::size_t poll_rdmacxx(cq_t& cq, std::size_t n) {
    std::size_t empty = 0;
    while (n > 0) {
        auto const polled = cq.poll<W>();
        for (rx::work_completion const& wc : polled)
            if (!wc.ok()) [[unlikely]]
                die("a completion", static_cast<int>(wc.status()));
        empty += polled.empty() ? 1U : 0U;
        n -= polled.size();
    }
    return empty;
}

template <std::size_t W>
[[gnu::noinline]] std::size_t poll_extended_rdmacxx(cqx_t& cq, std::size_t n) {
    std::size_t empty = 0;
    auto const poller = cq.poller(); // the handle in a register, as the raw twin's
    while (n > 0) {
        std::size_t const got = poller.poll<W>([](cqx_t::completion const& wc) {
            if (!wc.ok()) [[unlikely]]
                die("a completion", static_cast<int>(wc.status()));
        });
        empty += got == 0 ? 1U : 0U;
        n -= got;
    }
    return empty;
}

// --- the raw twin ------------------------------------------------------------------------

template <kind K>
[[gnu::always_inline]] inline void raw_wr(targets const& r, std::uint64_t id, ibv_sge& sge, ibv_send_wr& wr,
                                          ibv_send_wr* next) {
    bool const atomic = K == kind::compare_swap || K == kind::fetch_add;
    auto const* local = atomic ? static_cast<void const*>(r.result.data()) : static_cast<void const*>(r.msg.data());
    sge.addr = reinterpret_cast<std::uintptr_t>(local);
    sge.length = 8;
    sge.lkey = r.msg.lkey();
    wr = ibv_send_wr{}; // as C's memset(&wr, 0, sizeof wr)
    wr.wr_id = id;
    wr.next = next;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    if constexpr (K == kind::send) {
        wr.opcode = IBV_WR_SEND;
    } else if constexpr (K == kind::send_imm) {
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(7);
    } else if constexpr (K == kind::write || K == kind::write_imm || K == kind::read) {
        wr.opcode = K == kind::write  ? IBV_WR_RDMA_WRITE
                    : K == kind::read ? IBV_WR_RDMA_READ
                                      : IBV_WR_RDMA_WRITE_WITH_IMM;
        if constexpr (K == kind::write_imm) wr.imm_data = htonl(7);
        wr.wr.rdma.remote_addr = r.target.address();
        wr.wr.rdma.rkey = r.target.rkey();
    } else {
        wr.opcode = K == kind::compare_swap ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.remote_addr = r.atomic.address();
        wr.wr.atomic.rkey = r.atomic.rkey();
        wr.wr.atomic.compare_add = K == kind::compare_swap ? 0 : 1;
        wr.wr.atomic.swap = 0;
    }
}

template <kind K, std::size_t L>
[[gnu::noinline]] void post_raw(rig& r) {
    ibv_qp* const qp = r.a.native_handle();
    targets const t = r.t;
    for (std::size_t i = 0; i < batch; i += L) {
        if constexpr (K == kind::recv) {
            ibv_sge sge[L];
            ibv_recv_wr wr[L];
            for (std::size_t j = 0; j < L; ++j) {
                sge[j].addr = reinterpret_cast<std::uintptr_t>(t.msg.data());
                sge[j].length = 8;
                sge[j].lkey = t.msg.lkey();
                wr[j].wr_id = i + j;
                wr[j].next = j + 1 < L ? &wr[j + 1] : nullptr;
                wr[j].sg_list = &sge[j];
                wr[j].num_sge = 1;
            }
            ibv_recv_wr* bad = nullptr;
            if (int rc = ::ibv_post_recv(qp, wr, &bad); rc != 0) [[unlikely]]
                die("ibv_post_recv", rc);
        } else {
            ibv_sge sge[L];
            ibv_send_wr wr[L];
            for (std::size_t j = 0; j < L; ++j)
                raw_wr<K>(t, i + j, sge[j], wr[j], j + 1 < L ? &wr[j + 1] : nullptr);
            ibv_send_wr* bad = nullptr;
            if (int rc = ::ibv_post_send(qp, wr, &bad); rc != 0) [[unlikely]]
                die("ibv_post_send", rc);
        }
    }
}

template <std::size_t W>
[[gnu::noinline]] std::size_t poll_raw(ibv_cq* cq, std::size_t n) {
    std::size_t empty = 0;
    while (n > 0) {
        ibv_wc wc[W];
        int const got = ::ibv_poll_cq(cq, static_cast<int>(W), wc);
        if (got < 0) [[unlikely]]
            die("ibv_poll_cq", -got);
        for (int i = 0; i < got; ++i)
            if (wc[i].status != IBV_WC_SUCCESS) [[unlikely]]
                die("a completion", static_cast<int>(wc[i].status));
        empty += got == 0 ? 1U : 0U;
        n -= static_cast<std::size_t>(got);
    }
    return empty;
}

// The extended CQ as a careful C programmer polls it: one batch per call, ibv_next_poll for each
// further completion, ibv_end_poll after; on rxe (`batched` false: rdma-core up to v54 overruns
// its CQ when ibv_next_poll finds it empty) each completion in a batch of its own.
template <std::size_t W>
[[gnu::noinline]] std::size_t poll_extended_raw(ibv_cq_ex* cq, bool batched, std::size_t n) {
    std::size_t empty = 0;
    while (n > 0) {
        std::size_t got = 0; // counted as poll_raw counts ibv_poll_cq's return
        ibv_poll_cq_attr attr{};
        if (int const rc = ::ibv_start_poll(cq, &attr); rc != 0) {
            if (rc != ENOENT) [[unlikely]]
                die("ibv_start_poll", rc);
        } else {
            for (;;) {
                if (cq->status != IBV_WC_SUCCESS) [[unlikely]]
                    die("a completion", static_cast<int>(cq->status));
                ++got;
                if (got == W) break;
                if (batched) {
                    if (int const next = ::ibv_next_poll(cq); next != 0) {
                        if (next != ENOENT) [[unlikely]]
                            die("ibv_next_poll", next);
                        break;
                    }
                } else {
                    ::ibv_end_poll(cq);
                    if (int const next = ::ibv_start_poll(cq, &attr); next != 0) {
                        if (next != ENOENT) [[unlikely]]
                            die("ibv_start_poll", next);
                        goto taken;
                    }
                }
            }
            ::ibv_end_poll(cq);
        }
    taken:
        empty += got == 0 ? 1U : 0U;
        n -= got;
    }
    return empty;
}

// --- the sections ------------------------------------------------------------------------

void settle() {
    timespec const t{0, 5'000'000}; // 5 ms: the device finishes a batch well within it
    nanosleep(&t, nullptr);
}

std::string label(char const* what, char const* k, std::size_t chain, char const* twin, std::size_t ops,
                  std::size_t empty) {
    return std::string{what} + "|" + k + "|" + std::to_string(chain) + "|" + twin + "|ops=" + std::to_string(ops) +
           "|empty=" + std::to_string(empty);
}

template <kind K, std::size_t L, bool Raw>
void post_section(rig& r, char const* name, std::size_t rounds) {
    zero_stats();
    for (std::size_t round = 0; round < rounds; ++round) {
        r.before(K);
        collect_toggle();
        if constexpr (Raw)
            post_raw<K, L>(r);
        else
            post_rdmacxx<K, L>(r);
        collect_toggle();
        r.after(K);
        rig::drain(r.cq_a, batch);
    }
    dump_stats(label("post", name, L, Raw ? "raw" : "rdmacxx", rounds * batch, 0));
}

template <kind K, std::size_t W, bool Raw>
void poll_section(rig& r, char const* name, std::size_t rounds) {
    std::size_t empty = 0;
    zero_stats();
    for (std::size_t round = 0; round < rounds; ++round) {
        r.before(K);
        post_rdmacxx<K, 16>(r);
        r.after(K);
        settle();
        collect_toggle();
        if constexpr (Raw)
            empty += poll_raw<W>(r.cq_a.native_handle(), batch);
        else
            empty += poll_rdmacxx<W>(r.cq_a, batch);
        collect_toggle();
    }
    dump_stats(label("poll", name, W, Raw ? "raw" : "rdmacxx", rounds * batch, empty));
}

template <std::size_t W, bool Raw>
void empty_section(rig& r, std::size_t calls) {
    std::size_t empty = 0;
    zero_stats();
    for (std::size_t i = 0; i < calls; ++i) {
        collect_toggle();
        if constexpr (Raw) {
            ibv_wc wc[W];
            empty += ::ibv_poll_cq(r.cq_a.native_handle(), static_cast<int>(W), wc) == 0 ? 1U : 0U;
        } else {
            empty += r.cq_a.poll<W>().empty() ? 1U : 0U;
        }
        collect_toggle();
    }
    if (empty != calls) {
        std::fprintf(stderr, "instructions: an idle CQ returned a completion\n");
        std::exit(1);
    }
    dump_stats(label("empty", "-", W, Raw ? "raw" : "rdmacxx", calls, calls));
}

template <kind K, std::size_t W, bool Raw>
void poll_extended_section(rig& r, char const* name, std::size_t rounds, bool batched) {
    std::size_t empty = 0;
    zero_stats();
    for (std::size_t round = 0; round < rounds; ++round) {
        r.load_extended(K);
        settle();
        collect_toggle();
        if constexpr (Raw)
            empty += poll_extended_raw<W>(r.cq_x.extended_handle(), batched, batch);
        else
            empty += poll_extended_rdmacxx<W>(r.cq_x, batch);
        collect_toggle();
    }
    dump_stats(label("poll_ex", name, W, Raw ? "raw" : "rdmacxx", rounds * batch, empty));
}

template <std::size_t W, bool Raw>
void empty_extended_section(rig& r, std::size_t calls) {
    std::size_t empty = 0;
    ibv_cq_ex* const cq = r.cq_x.extended_handle();
    auto const poller = r.cq_x.poller(); // as in poll_extended_rdmacxx
    zero_stats();
    for (std::size_t i = 0; i < calls; ++i) {
        collect_toggle();
        if constexpr (Raw) {
            ibv_poll_cq_attr attr{};
            if (int const rc = ::ibv_start_poll(cq, &attr); rc == 0)
                ::ibv_end_poll(cq);
            else
                empty += rc == ENOENT ? 1U : 0U;
        } else {
            empty += poller.poll<W>([](cqx_t::completion const&) {}) == 0 ? 1U : 0U;
        }
        collect_toggle();
    }
    if (empty != calls) {
        std::fprintf(stderr, "instructions: an idle extended CQ returned a completion\n");
        std::exit(1);
    }
    dump_stats(label("empty_ex", "-", W, Raw ? "raw" : "rdmacxx", calls, calls));
}

template <kind K>
void run_extended(rig& r, char const* name, std::size_t rounds, bool batched) {
    poll_extended_section<K, 1, false>(r, name, rounds, batched);
    poll_extended_section<K, 1, true>(r, name, rounds, batched);
    poll_extended_section<K, 16, false>(r, name, rounds, batched);
    poll_extended_section<K, 16, true>(r, name, rounds, batched);
}

template <kind K>
void run_kind(rig& r, char const* name, std::size_t rounds) {
    // Twins alternate, so whatever drifts in the provider's state hits both alike.
    post_section<K, 1, false>(r, name, rounds);
    post_section<K, 1, true>(r, name, rounds);
    post_section<K, 4, false>(r, name, rounds);
    post_section<K, 4, true>(r, name, rounds);
    post_section<K, 16, false>(r, name, rounds);
    post_section<K, 16, true>(r, name, rounds);
    poll_section<K, 1, false>(r, name, rounds);
    poll_section<K, 1, true>(r, name, rounds);
    poll_section<K, 16, false>(r, name, rounds);
    poll_section<K, 16, true>(r, name, rounds);
}

} // namespace

int main(int argc, char** argv) try {
    std::size_t ops = 1024;
    for (int i = 1; i < argc; ++i) {
        std::string const arg = argv[i];
        if (arg == "-n" && i + 1 < argc)
            ops = std::strtoul(argv[++i], nullptr, 10);
        else {
            std::fprintf(stderr, "usage: instructions [-n OPS]\n");
            return 2;
        }
    }
    std::size_t const rounds = (ops + batch - 1) / batch;
    rig r;
    std::printf("device %s, %zu operations per section, batches of %zu, valgrind %s\n",
                std::string{r.ctx.name()}.c_str(), rounds * batch, batch, RUNNING_ON_VALGRIND ? "yes" : "no");
    empty_section<1, false>(r, 256);
    empty_section<1, true>(r, 256);
    empty_section<16, false>(r, 256);
    empty_section<16, true>(r, 256);
    for (auto const& [k, name] : kinds) {
        switch (k) {
        case kind::send:
            run_kind<kind::send>(r, name, rounds);
            break;
        case kind::send_imm:
            run_kind<kind::send_imm>(r, name, rounds);
            break;
        case kind::write:
            run_kind<kind::write>(r, name, rounds);
            break;
        case kind::write_imm:
            run_kind<kind::write_imm>(r, name, rounds);
            break;
        case kind::read:
            run_kind<kind::read>(r, name, rounds);
            break;
        case kind::compare_swap:
            run_kind<kind::compare_swap>(r, name, rounds);
            break;
        case kind::fetch_add:
            run_kind<kind::fetch_add>(r, name, rounds);
            break;
        case kind::recv:
            run_kind<kind::recv>(r, name, rounds);
            break;
        }
    }
    // The extended CQ. The raw twin decides once, as rdmacxx does, whether the device is rxe.
    ibv_device_attr attr{};
    if (int const rc = ::ibv_query_device(r.ctx.native_handle(), &attr); rc != 0) die("ibv_query_device", rc);
    bool const batched = attr.vendor_id != 0xffffffU;
    if (batched != r.cq_x.batches_polls()) {
        std::fprintf(stderr, "instructions: the twins disagree on batching the extended CQ's polls\n");
        return 1;
    }
    empty_extended_section<1, false>(r, 256);
    empty_extended_section<1, true>(r, 256);
    empty_extended_section<16, false>(r, 256);
    empty_extended_section<16, true>(r, 256);
    run_extended<kind::write>(r, "write", rounds, batched);
    run_extended<kind::read>(r, "read", rounds, batched);
    run_extended<kind::recv>(r, "recv", rounds, batched);
    std::printf("done\n");
    return 0;
} catch (std::exception const& e) {
    std::fprintf(stderr, "instructions: %s\n", e.what());
    return 1;
}
