#pragma once
/// @file
/// Internals of the bounded waits: deadlines from `std::chrono` durations, and waiting for a file
/// descriptor until a deadline.

#include "rdmacxx/detail/verbs.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <ctime>
#include <limits>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The steady-clock time `timeout` from now, rounded up to the clock's tick; a zero or negative
/// timeout is now, and one past the clock's range is the end of time (saturated, no overflow).
template <class Rep, class Period>
[[nodiscard]] std::chrono::steady_clock::time_point deadline_after(std::chrono::duration<Rep, Period> timeout) {
    using clock = std::chrono::steady_clock;
    auto const now = clock::now();
    if (timeout <= timeout.zero()) return now;
    auto const room = clock::time_point::max() - now;
    if (timeout >= std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(room))
        return clock::time_point::max();
    return now + std::chrono::ceil<clock::duration>(timeout);
}

/// `a + b`, or `milliseconds::max()` when that would overflow (a "forever" step plus slack
/// stays forever).
[[nodiscard]] constexpr std::chrono::milliseconds saturating_add(std::chrono::milliseconds a,
                                                                 std::chrono::milliseconds b) noexcept {
    using ms = std::chrono::milliseconds;
    if (b.count() > 0 && a > ms::max() - b) return ms::max();
    return a + b;
}

/// `timeout` in whole milliseconds as the `int` a C call takes, clamped to 0 … INT_MAX (about
/// 24.8 days): longer is as good as forever there, and never wraps negative.
[[nodiscard]] constexpr int clamp_ms(std::chrono::milliseconds timeout) noexcept {
    constexpr auto most = static_cast<std::chrono::milliseconds::rep>(std::numeric_limits<int>::max());
    return static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(timeout.count(), 0, most));
}

/// Polls between clock reads while a waiter spins: a poll of an idle CQ costs a few dozen
/// instructions, a read of the steady clock about as much again, so reading it once per poll
/// would double the cost of the spin; 32 polls take well under a microsecond on hardware.
inline constexpr unsigned spin_clock_every = 32;

/// Spins on `poll()` (returns how many completions it took) until it takes some or `now()`
/// reaches `until`: polls once, reads the clock, then reads it again after every
/// `spin_clock_every` polls. Returns what the successful poll returned, or 0 at the deadline.
/// An `until` already past costs one poll and one clock read.
template <class Poll, class Now, class TimePoint>
[[nodiscard]] std::size_t spin_until(Poll&& poll, Now&& now, TimePoint until) {
    for (unsigned round = 1;; round = spin_clock_every) {
        for (unsigned k = 0; k < round; ++k)
            if (std::size_t const n = poll(); n != 0) return n;
        if (!(now() < until)) return 0;
    }
}

/// Waits until `fd` is readable or `deadline` passes (time_point::max(): no bound): 1 when
/// readable, 0 when the deadline has passed, -1 with errno set when ppoll(2) fails (the caller
/// throws: this layer knows no error type). A signal (EINTR) restarts the wait with the time
/// left, so that 1 always means readable.
[[nodiscard]] inline int wait_readable(int fd, std::chrono::steady_clock::time_point deadline) noexcept {
    using namespace std::chrono;
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        timespec ts{};
        timespec const* bound = nullptr;
        if (deadline != steady_clock::time_point::max()) {
            auto const left = deadline - steady_clock::now();
            if (left > left.zero()) {
                auto const s = duration_cast<seconds>(left);
                ts.tv_sec = static_cast<std::time_t>(s.count());
                ts.tv_nsec = static_cast<long>(duration_cast<nanoseconds>(left - s).count());
            }
            bound = &ts;
        }
        int const rc = ::ppoll(&p, 1, bound, nullptr);
        if (rc > 0) return 1;
        if (rc == 0) return 0;
        if (errno != EINTR) [[unlikely]]
            return -1;
    }
}

} // namespace detail
} // namespace v0
} // namespace rdmacxx
