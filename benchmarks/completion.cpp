// Completion cost, rdmacxx against raw verbs: one poll of an empty CQ, and draining N
// completions that are already in the CQ (16 per poll call).
//
// Drain: each iteration first posts N signaled 8-byte writes (untimed, through rdmacxx for both
// twins), waits until the last one has landed and its completion has had time to arrive, then
// times only the polling (UseManualTime). `ns_per_wc` is the time per completion; `empty_polls`
// counts polls that still came back empty (they are in the time).
//
// The extended CQ ("cq/…/extended/…"): the same two rows for a completion_queue_ex polled in
// place (ibv_start_poll, ibv_next_poll, ibv_end_poll) against the raw twin doing the same verbs
// by hand on the same CQ; its QP writes into the same memory as the rows above.

#include "bench.hpp"

#include <cerrno>
#include <ctime>
#include <stdexcept>
#include <string>

namespace bench {
namespace {

template <template <class> class TwinT>
void empty_poll(benchmark::State& st) {
    using Twin = TwinT<rx::busy_poll>;
    auto& r = rig<rx::busy_poll>::get();
    guarded(st, [&] {
        for (auto _ : st)
            benchmark::DoNotOptimize(Twin::poll_empty(r.a));
    });
}

template <template <class> class TwinT>
void drain(benchmark::State& st) {
    using Twin = TwinT<rx::busy_poll>;
    auto& r = rig<rx::busy_poll>::get();
    guarded(st, [&] {
        auto const n = static_cast<std::size_t>(st.range(0));
        auto const src = r.a.mr.span().subspan(src_off, 8);
        auto const dst = r.b.mr.remote().subspan(dst_off, 8);
        std::byte volatile* const landed = r.b.at(dst_off + 7);
        unsigned tag = 0;
        double total = 0;
        std::size_t empty = 0;
        for (auto _ : st) {
            for (std::size_t i = 0; i + 1 < n; ++i)
                r.a.qp.post(rx::write{src, dst}.id(i));
            tag = tag % 255 + 1;
            r.a.mem[src_off + 7] = static_cast<std::byte>(tag);
            r.a.qp.post(rx::write{src, dst}.id(n));
            while (*landed != static_cast<std::byte>(tag)) {}
            timespec const pause{0, 200'000}; // 200 µs: the ACK and the completion follow the data
            nanosleep(&pause, nullptr);
            auto const t0 = clock_type::now();
            std::size_t left = n;
            while (left > 0) {
                std::size_t const got = Twin::poll(r.a, false);
                empty += got == 0 ? 1U : 0U;
                left -= got;
            }
            double const s = std::chrono::duration<double>(clock_type::now() - t0).count();
            total += s;
            st.SetIterationTime(s);
        }
        st.counters["ns_per_wc"] = total / static_cast<double>(st.iterations()) / static_cast<double>(n) * 1e9;
        st.counters["empty_polls"] = static_cast<double>(empty);
    });
}

[[noreturn]] void fail_verb(char const* verb, int rc) {
    throw std::runtime_error(std::string{verb} + " failed: " + std::to_string(rc));
}

// A QP whose completions go to an extended CQ, on the busy-poll rig's device and memory.
struct extended_rig {
    rig<rx::busy_poll>& base;
    rx::completion_queue_ex<rx::busy_poll> cq;
    rx::completion_queue<rx::busy_poll> peer_cq;
    rx::queue_pair<rx::rc, rx::busy_poll> qp, peer;
    bool batched; // the raw twin's own reading of the device (rdmacxx: cq.batches_polls())

    static extended_rig& get() {
        static extended_rig r;
        return r;
    }

private:
    extended_rig()
        : base(rig<rx::busy_poll>::get()), cq(base.ctx, cq_entries), peer_cq(base.ctx, cq_entries),
          qp(base.pd, cq, cq, {.max_send_wr = send_depth}), peer(base.pd, peer_cq, peer_cq),
          batched(raw_batches(base.ctx)) {
        rx::qp_settings o;
        o.remote_access = rx::all_remote;
        qp.connect(base.port, peer.local_endpoint(base.port), o);
        peer.connect(base.port, qp.local_endpoint(base.port), o);
    }
    // rxe (vendor ID 0xffffff) polls one completion per batch: rdma-core up to v54 overruns its
    // CQ when ibv_next_poll finds it empty.
    static bool raw_batches(rx::context& ctx) {
        ibv_device_attr attr{};
        if (int const rc = ::ibv_query_device(ctx.native_handle(), &attr); rc != 0) fail_verb("ibv_query_device", rc);
        return attr.vendor_id != 0xffffffU;
    }
};

struct extended_lib {
    static constexpr char const* name = "rdmacxx";
    [[gnu::always_inline]] static std::size_t poll(extended_rig& x) {
        return x.cq.poll<16>([](rx::extended_completion<rx::wc_fields<>> const& wc) {
            if (!wc.ok()) [[unlikely]]
                fail_wc(wc.status(), wc.wr_id());
        });
    }
    [[gnu::always_inline]] static bool poll_empty(extended_rig& x) {
        return x.cq.poll<1>([](rx::extended_completion<rx::wc_fields<>> const&) {}) == 0;
    }
};

struct extended_raw {
    static constexpr char const* name = "raw";
    [[gnu::always_inline]] static std::size_t poll(extended_rig& x) {
        ibv_cq_ex* const cq = x.cq.extended_handle();
        ibv_poll_cq_attr attr{};
        if (int const rc = ::ibv_start_poll(cq, &attr); rc != 0) {
            if (rc != ENOENT) [[unlikely]]
                fail_verb("ibv_start_poll", rc);
            return 0;
        }
        std::size_t got = 0;
        for (;;) {
            if (cq->status != IBV_WC_SUCCESS) [[unlikely]]
                fail_wc(cq->status, cq->wr_id);
            if (++got == 16) break;
            if (x.batched) {
                if (int const rc = ::ibv_next_poll(cq); rc != 0) {
                    if (rc != ENOENT) [[unlikely]]
                        fail_verb("ibv_next_poll", rc);
                    break;
                }
            } else {
                ::ibv_end_poll(cq);
                if (int const rc = ::ibv_start_poll(cq, &attr); rc != 0) {
                    if (rc != ENOENT) [[unlikely]]
                        fail_verb("ibv_start_poll", rc);
                    return got;
                }
            }
        }
        ::ibv_end_poll(cq);
        return got;
    }
    [[gnu::always_inline]] static bool poll_empty(extended_rig& x) {
        ibv_cq_ex* const cq = x.cq.extended_handle();
        ibv_poll_cq_attr attr{};
        int const rc = ::ibv_start_poll(cq, &attr);
        if (rc == 0) ::ibv_end_poll(cq);
        return rc == ENOENT;
    }
};

template <class Twin>
void extended_empty_poll(benchmark::State& st) {
    auto& x = extended_rig::get();
    guarded(st, [&] {
        for (auto _ : st)
            benchmark::DoNotOptimize(Twin::poll_empty(x));
    });
}

template <class Twin>
void extended_drain(benchmark::State& st) {
    auto& x = extended_rig::get();
    guarded(st, [&] {
        auto const n = static_cast<std::size_t>(st.range(0));
        auto const src = x.base.a.mr.span().subspan(src_off, 8);
        auto const dst = x.base.b.mr.remote().subspan(dst_off, 8);
        std::byte volatile* const landed = x.base.b.at(dst_off + 7);
        unsigned tag = 0;
        double total = 0;
        std::size_t empty = 0;
        for (auto _ : st) {
            for (std::size_t i = 0; i + 1 < n; ++i)
                x.qp.post(rx::write{src, dst}.id(i));
            tag = tag % 255 + 1;
            x.base.a.mem[src_off + 7] = static_cast<std::byte>(tag);
            x.qp.post(rx::write{src, dst}.id(n));
            while (*landed != static_cast<std::byte>(tag)) {}
            timespec const pause{0, 200'000}; // 200 µs: the ACK and the completion follow the data
            nanosleep(&pause, nullptr);
            auto const t0 = clock_type::now();
            std::size_t left = n;
            while (left > 0) {
                std::size_t const got = Twin::poll(x);
                empty += got == 0 ? 1U : 0U;
                left -= got;
            }
            double const s = std::chrono::duration<double>(clock_type::now() - t0).count();
            total += s;
            st.SetIterationTime(s);
        }
        st.counters["ns_per_wc"] = total / static_cast<double>(st.iterations()) / static_cast<double>(n) * 1e9;
        st.counters["empty_polls"] = static_cast<double>(empty);
    });
}

template <class Twin>
void add_extended_twin() {
    benchmark::RegisterBenchmark(name_of({"cq", Twin::name, "extended", "empty"}).c_str(), extended_empty_poll<Twin>)
        ->Unit(benchmark::kNanosecond);
    for (std::int64_t n : {1, 16, 64})
        benchmark::RegisterBenchmark(name_of({"cq", Twin::name, "extended", "drain", std::to_string(n)}).c_str(),
                                     extended_drain<Twin>)
            ->Arg(n)
            ->Iterations(opts().full ? 1000 : 200)
            ->UseManualTime()
            ->Unit(benchmark::kNanosecond);
}

template <template <class> class TwinT>
void add_twin() {
    char const* const twin = TwinT<rx::busy_poll>::name;
    benchmark::RegisterBenchmark(name_of({"cq", twin, "empty"}).c_str(), empty_poll<TwinT>)
        ->Unit(benchmark::kNanosecond);
    for (std::int64_t n : {1, 16, 64})
        benchmark::RegisterBenchmark(name_of({"cq", twin, "drain", std::to_string(n)}).c_str(), drain<TwinT>)
            ->Arg(n)
            ->Iterations(opts().full ? 1000 : 200)
            ->UseManualTime()
            ->Unit(benchmark::kNanosecond);
}

} // namespace

void register_completion() {
    add_twin<lib_twin>();
    add_twin<raw_twin>();
    add_extended_twin<extended_lib>();
    add_extended_twin<extended_raw>();
}

} // namespace bench
