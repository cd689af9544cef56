// Completion cost, rdmacxx against raw verbs: one poll of an empty CQ, and draining N
// completions that are already in the CQ (16 per poll call).
//
// Drain: each iteration first posts N signaled 8-byte writes (untimed, through rdmacxx for both
// twins), waits until the last one has landed and its completion has had time to arrive, then
// times only the polling (UseManualTime). `ns_per_wc` is the time per completion; `empty_polls`
// counts polls that still came back empty (they are in the time).

#include "bench.hpp"

#include <ctime>
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
}

} // namespace bench
