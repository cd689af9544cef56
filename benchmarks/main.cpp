// bench — the Google Benchmark suite: every benchmark in two twins, rdmacxx and raw verbs.
//
// Usage: bench [--sizes=reduced|full] [--reg_max=BYTES] [Google Benchmark flags]
//   --sizes    size lists: reduced (default; what tools/bench runs) or full
//   --reg_max  largest registration tried (default 268435456, 256 MiB)
// Environment: RDMACXX_DEVICE (the device; default the first), RDMACXX_BENCH_SIZES (as --sizes).
// Names are GROUP/TWIN/…; --benchmark_filter='^[a-z]+/raw/' runs the raw twins only.

#include "bench.hpp"

#include <cstdio>
#include <cstring>
#include <string_view>

int main(int argc, char** argv) {
    auto& o = bench::opts();
    if (char const* e = std::getenv("RDMACXX_BENCH_SIZES"); e != nullptr) o.full = std::string_view{e} == "full";
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (arg.starts_with("--sizes=")) {
            o.full = arg.substr(8) == "full";
        } else if (arg.starts_with("--reg_max=")) {
            o.reg_max = std::strtoull(argv[i] + 10, nullptr, 10);
            if (o.reg_max < 4096) o.reg_max = 4096;
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    bench::register_latency();
    bench::register_bandwidth();
    bench::register_rate();
    bench::register_completion();
    bench::register_registration();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
