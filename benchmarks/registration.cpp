// Registration cost, rdmacxx's register_memory against ibv_reg_mr: 4 KiB up to --reg_max (default
// 256 MiB) on three kinds of pages:
//   4k       anonymous memory with transparent huge pages refused (MADV_NOHUGEPAGE): 4 KiB pages
//   thp      anonymous memory, 2 MiB-aligned, MADV_HUGEPAGE: transparent huge pages where the
//            kernel gives them (the `huge_fraction` counter says how much of the buffer it did)
//   hugetlb  MAP_HUGETLB: huge pages from the reserved pool (vm.nr_hugepages); when the pool is
//            too small the benchmark reports an error that says so
// Each iteration registers an already-touched buffer (timed, UseManualTime) and deregisters it
// (untimed; its time is the `dereg_us` counter). Names: reg/TWIN/PAGES/BYTES. Run one kind of
// page per process (--benchmark_filter='^reg/[^/]+/thp/'): each kind holds a buffer of reg_max.

#include "bench.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace bench {
namespace {

constexpr std::size_t huge = std::size_t{2} << 20;
enum class pages { small, thp, hugetlb };
constexpr char const* page_names[] = {"4k", "thp", "hugetlb"};

// The kB of AnonHugePages the process holds (/proc/self/smaps_rollup); 0 when unknown.
std::size_t anon_huge_kib() {
    std::ifstream f("/proc/self/smaps_rollup");
    std::string key;
    std::size_t kib = 0;
    while (f >> key)
        if (key == "AnonHugePages:" && (f >> kib)) return kib;
    return 0;
}

// One buffer per kind of page, of `n` bytes, mapped and touched on first use; the buffers of the
// other kinds are unmapped first. Empty with `why` set when the kind is not available.
struct mapping {
    std::byte* base = nullptr;
    std::size_t length = 0;
    std::byte* data = nullptr;
    double huge_fraction = 0;
    std::string why;
};
mapping& buffer(pages kind, std::size_t n) {
    static mapping maps[3];
    static std::size_t have[3] = {};
    auto const k = static_cast<std::size_t>(kind);
    if (have[k] >= n && (maps[k].data != nullptr || !maps[k].why.empty())) return maps[k];
    for (mapping& m : maps) {
        if (m.base != nullptr) ::munmap(m.base, m.length);
        m = {};
    }
    std::fill(std::begin(have), std::end(have), 0);
    mapping& m = maps[k];
    std::size_t const rounded = (n + huge - 1) / huge * huge;
    m.length = kind == pages::thp ? rounded + huge : rounded;
    int const flags = MAP_PRIVATE | MAP_ANONYMOUS | (kind == pages::hugetlb ? MAP_HUGETLB : 0);
    void* p = ::mmap(nullptr, m.length, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        m.why = std::string{"mmap of "} + std::to_string(m.length >> 20) + " MiB with " + page_names[k] +
                " pages failed: " + std::strerror(errno) +
                (kind == pages::hugetlb ? " (MAP_HUGETLB not available: too few huge pages reserved, vm.nr_hugepages)"
                                        : "");
        m.length = 0;
        have[k] = n;
        return m;
    }
    m.base = static_cast<std::byte*>(p);
    m.data = m.base;
    if (kind == pages::thp) {
        auto const addr = reinterpret_cast<std::uintptr_t>(m.base);
        m.data = m.base + ((huge - addr % huge) % huge);
        if (::madvise(m.data, rounded, MADV_HUGEPAGE) != 0)
            m.why = std::string{"madvise(MADV_HUGEPAGE) failed: "} + std::strerror(errno) +
                    " (transparent huge pages not available)";
    } else if (kind == pages::small) {
        (void)::madvise(m.base, m.length, MADV_NOHUGEPAGE);
    }
    std::size_t const before = anon_huge_kib();
    for (std::size_t i = 0; i < rounded; i += 4096)
        m.data[i] = std::byte{1};
    if (kind == pages::thp)
        m.huge_fraction = static_cast<double>((anon_huge_kib() - before) * 1024) / static_cast<double>(rounded);
    else if (kind == pages::hugetlb)
        m.huge_fraction = 1;
    have[k] = n;
    return m;
}

template <template <class> class TwinT>
void registration(benchmark::State& st) {
    using Twin = TwinT<rx::busy_poll>;
    auto& r = rig<rx::busy_poll>::get();
    auto const kind = static_cast<pages>(st.range(1));
    guarded(st, [&] {
        auto const n = static_cast<std::size_t>(st.range(0));
        mapping& m = buffer(kind, opts().reg_max);
        if (m.data == nullptr || !m.why.empty()) {
            st.SkipWithError(m.why.c_str());
            return;
        }
        double dereg = 0;
        for (auto _ : st) {
            auto const [reg_s, dereg_s] = Twin::register_memory(r.pd, m.data, n);
            st.SetIterationTime(reg_s);
            dereg += dereg_s;
        }
        st.counters["dereg_us"] = dereg / static_cast<double>(st.iterations()) * 1e6;
        st.counters["bytes"] = static_cast<double>(n);
        st.counters["huge_fraction"] = m.huge_fraction;
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
    for (pages kind : {pages::small, pages::thp, pages::hugetlb})
        for (std::int64_t n : sizes)
            benchmark::RegisterBenchmark(name_of({"reg", TwinT<rx::busy_poll>::name,
                                                  page_names[static_cast<std::size_t>(kind)], std::to_string(n)})
                                             .c_str(),
                                         registration<TwinT>)
                ->Args({n, static_cast<std::int64_t>(kind)})
                ->UseManualTime()
                ->Unit(benchmark::kMicrosecond);
}

} // namespace

void register_registration() {
    add_twin<lib_twin>();
    add_twin<raw_twin>();
}

} // namespace bench
