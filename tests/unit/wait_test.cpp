// Deadlines of the bounded waits: rounded up, saturated at the end of time, now for zero or less.
#include "rdmacxx/detail/wait.hpp"

#include <doctest/doctest.h>

#include <chrono>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

TEST_CASE("wait: deadlines round up, saturate instead of overflowing, and are now for zero or less") {
    using clock = std::chrono::steady_clock;
    auto const before = clock::now();
    auto const zero = rx::detail::deadline_after(0ms);
    auto const negative = rx::detail::deadline_after(-5s);
    auto const after = clock::now();
    CHECK(zero >= before);
    CHECK(zero <= after);
    CHECK(negative >= before);
    CHECK(negative <= after);
    CHECK(rx::detail::deadline_after(std::chrono::hours::max()) == clock::time_point::max());
    CHECK(rx::detail::deadline_after(std::chrono::nanoseconds::max()) == clock::time_point::max());
    CHECK(rx::detail::deadline_after(std::chrono::duration<double>(1e300)) == clock::time_point::max());
    auto const d = rx::detail::deadline_after(std::chrono::duration<double, std::micro>(0.5));
    CHECK(d > before); // half a microsecond rounds up to a whole tick, never down to now
    auto const s = rx::detail::deadline_after(10s);
    auto const later = clock::now();
    CHECK(s - before >= 10s);
    CHECK(s - later <= 10s);
}
