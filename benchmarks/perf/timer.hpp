#pragma once
// rdmacxx-perf's clock, perftest's: the CPU's time-stamp counter where there is one (x86),
// calibrated once against std::chrono::steady_clock; steady_clock elsewhere. Reading the TSC is
// one instruction; clock_gettime(2) is a system call wherever the kernel does not trust the TSC
// for its vDSO (a VM under emulation, for one), which costs microseconds per sample.

#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace perf {

/// A time stamp in ticks.
inline std::uint64_t ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

/// Ticks per microsecond, measured once (20 ms against steady_clock) on first use.
inline double ticks_per_us() {
    static double const rate = [] {
        auto const t0 = std::chrono::steady_clock::now();
        std::uint64_t const c0 = ticks();
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
        std::uint64_t const c1 = ticks();
        double const us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        return static_cast<double>(c1 - c0) / us;
    }();
    return rate;
}

/// Microseconds between two stamps.
inline double micros(std::uint64_t from, std::uint64_t to) { return static_cast<double>(to - from) / ticks_per_us(); }

} // namespace perf
