// Bandwidth, rdmacxx against raw verbs: streams of RDMA writes and of sends, 2 B to 1 MiB.
//
// One iteration is a stream of `count` messages (8 MiB worth, at least 16 and at most 1024) with
// at most 64 in flight and every 16th signaled — perftest's `-t 64 -Q 16 -n count` — timed from
// the first post to the last completion, as perftest does. SetBytesProcessed gives bytes/s; the
// `msgs` counter is the message rate.

#include "bench.hpp"

#include <string>

namespace bench {
namespace {

constexpr std::uint32_t bw_window = 64;
constexpr std::uint32_t bw_every = 16;

/// Messages per iteration for `n`-byte messages: 8 MiB worth, between 16 and 1024.
constexpr std::uint64_t bw_count(std::size_t n) {
    return std::clamp<std::uint64_t>((std::uint64_t{8} << 20) / n, 16, 1024);
}

template <template <class> class TwinT, bool Send>
void bandwidth(benchmark::State& st) {
    using Twin = TwinT<rx::busy_poll>;
    auto& r = rig<rx::busy_poll>::get();
    guarded(st, [&] {
        auto const n = static_cast<std::size_t>(st.range(0));
        std::uint64_t const count = bw_count(n);
        auto const m = Twin::make(r.a, src_off, r.b, dst_off, n);
        auto const rb = Twin::make_recv(r.b);
        for (auto _ : st)
            stream<Twin, 1, Send>(r.a, r.b, m, rb, count,
                                  std::min<std::uint32_t>(bw_window, static_cast<std::uint32_t>(count)), bw_every,
                                  false);
        auto const msgs = static_cast<double>(st.iterations()) * static_cast<double>(count);
        st.SetBytesProcessed(static_cast<std::int64_t>(msgs * static_cast<double>(n)));
        st.counters["msgs"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
        st.counters["per_iter"] = static_cast<double>(count);
    });
}

template <template <class> class TwinT>
void add_twin() {
    std::vector<std::int64_t> sizes;
    if (opts().full)
        for (std::int64_t n = 2; n <= (1 << 20); n *= 4)
            sizes.push_back(n);
    else
        sizes = {2, 64, 4096, 65536};
    if (sizes.empty() || sizes.back() != (1 << 20)) sizes.push_back(1 << 20);
    for (bool const send : {false, true})
        for (std::int64_t n : sizes) {
            std::string const name =
                name_of({"bw", TwinT<rx::busy_poll>::name, send ? "send" : "write", std::to_string(n)});
            benchmark::RegisterBenchmark(name.c_str(), send ? bandwidth<TwinT, true> : bandwidth<TwinT, false>)
                ->Arg(n)
                ->Unit(benchmark::kMillisecond);
        }
}

} // namespace

void register_bandwidth() {
    add_twin<lib_twin>();
    add_twin<raw_twin>();
}

} // namespace bench
