// Deadlines of the bounded waits: rounded up, saturated at the end of time, now for zero or less.
#include "rdmacxx/detail/wait.hpp"

#include "rdmacxx/cq.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <limits>
#include <type_traits>

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

TEST_CASE("wait: a step's limit plus slack saturates, and a C call's int milliseconds are clamped, never wrapped") {
    using ms = std::chrono::milliseconds;
    CHECK(rx::detail::saturating_add(1000ms, 1000ms) == 2000ms);
    CHECK(rx::detail::saturating_add(ms::max(), 1000ms) == ms::max());
    CHECK(rx::detail::saturating_add(ms::max() - 500ms, 1000ms) == ms::max());
    CHECK(rx::detail::saturating_add(ms::max() - 1000ms, 1000ms) == ms::max());
    CHECK(rx::detail::clamp_ms(1500ms) == 1500);
    CHECK(rx::detail::clamp_ms(-3ms) == 0);
    auto const days26 = std::chrono::duration_cast<ms>(std::chrono::hours{24 * 26}); // over 2^31 ms
    CHECK(days26.count() > std::numeric_limits<int>::max());
    CHECK(rx::detail::clamp_ms(days26) == std::numeric_limits<int>::max()); // not negative
    CHECK(rx::detail::clamp_ms(ms::max()) == std::numeric_limits<int>::max());
}

TEST_CASE("a spinning waiter reads the clock once per spin_clock_every polls, not once per poll") {
    constexpr unsigned every = rx::detail::spin_clock_every;
    static_assert(every > 1);
    std::size_t polls = 0, reads = 0;
    // Completions appear at the 1000th poll; the deadline is far.
    std::size_t const got = rx::detail::spin_until([&] { return ++polls == 1000 ? std::size_t{3} : std::size_t{0}; },
                                                   [&] { return ++reads; }, std::size_t{1'000'000});
    CHECK(got == 3);
    CHECK(polls == 1000);
    CHECK(reads == 1 + (1000 - 2) / every); // after poll 1, then after every `every` polls
    // A deadline: the clock reads 1, 2, 3…, so it passes at the 5th read.
    polls = reads = 0;
    CHECK(rx::detail::spin_until([&] { return ++polls, std::size_t{0}; }, [&] { return ++reads; }, std::size_t{5}) ==
          0);
    CHECK(reads == 5);
    CHECK(polls == 1 + 4 * every);
    // A deadline already past: one poll, one read.
    polls = reads = 0;
    CHECK(rx::detail::spin_until([&] { return ++polls, std::size_t{0}; }, [&] { return ++reads; }, std::size_t{0}) ==
          0);
    CHECK(polls == 1);
    CHECK(reads == 1);
}

// work_completion arrays cost nothing before ibv_poll_cq(3) fills them, as ibv_wc arrays in C.
static_assert(std::is_trivially_default_constructible_v<rx::work_completion>);
