// Registration cost, rdmacxx's register_memory against ibv_reg_mr: 4 KiB up to 256 MiB (or
// --reg_max). Each iteration registers an already-touched buffer (timed, UseManualTime) and
// deregisters it (untimed; its time is the `dereg_us` counter).

#include "bench.hpp"

#include <memory>
#include <new>
#include <string>

namespace bench {
namespace {

// One buffer for all sizes, allocated and touched on first use.
std::byte* buffer(std::size_t n) {
    static std::unique_ptr<std::byte[]> mem;
    static std::size_t have = 0;
    if (have < n) {
        mem.reset();
        mem.reset(new std::byte[n]);
        for (std::size_t i = 0; i < n; i += 4096)
            mem[i] = std::byte{1};
        have = n;
    }
    return mem.get();
}

template <template <class> class TwinT>
void registration(benchmark::State& st) {
    using Twin = TwinT<rx::busy_poll>;
    auto& r = rig<rx::busy_poll>::get();
    guarded(st, [&] {
        auto const n = static_cast<std::size_t>(st.range(0));
        std::byte* const p = buffer(opts().reg_max);
        double dereg = 0;
        for (auto _ : st) {
            auto const [reg_s, dereg_s] = Twin::register_memory(r.pd, p, n);
            st.SetIterationTime(reg_s);
            dereg += dereg_s;
        }
        st.counters["dereg_us"] = dereg / static_cast<double>(st.iterations()) * 1e6;
        st.counters["bytes"] = static_cast<double>(n);
    });
}

template <template <class> class TwinT>
void add_twin() {
    std::vector<std::int64_t> sizes;
    std::int64_t const step = opts().full ? 4 : 16;
    for (std::int64_t n = 4096; static_cast<std::size_t>(n) <= opts().reg_max; n *= step)
        sizes.push_back(n);
    if (sizes.empty() || static_cast<std::size_t>(sizes.back()) != opts().reg_max)
        sizes.push_back(static_cast<std::int64_t>(opts().reg_max));
    for (std::int64_t n : sizes)
        benchmark::RegisterBenchmark(name_of({"reg", TwinT<rx::busy_poll>::name, std::to_string(n)}).c_str(),
                                     registration<TwinT>)
            ->Arg(n)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
}

} // namespace

void register_registration() {
    add_twin<lib_twin>();
    add_twin<raw_twin>();
}

} // namespace bench
