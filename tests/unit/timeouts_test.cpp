#include "rdmacxx/timeouts.hpp"

#include "rdmacxx/qp_settings.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

// The InfiniBand specification's RNR NAK timer table, in milliseconds, by code.
constexpr double ib_rnr_table_ms[32] = {
    655.36, 0.01, 0.02, 0.03, 0.04,  0.06,  0.08,  0.12,  0.16,  0.24,  0.32,  0.48,   0.64,   0.96,   1.28,   1.92,
    2.56,   3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};

static_assert(rx::ack_timeout{0ns}.code() == 1);
static_assert(rx::ack_timeout{67ms}.code() == 14);
static_assert(rx::rnr_timer{1280us}.code() == 14);
static_assert(rx::ack_timeout::infinite().code() == 0);

TEST_CASE("rnr_timer: every entry of the IB table, in both directions") {
    for (std::uint8_t code = 0; code < 32; ++code) {
        CAPTURE(static_cast<int>(code));
        auto const us = static_cast<std::int64_t>(ib_rnr_table_ms[code] * 1000.0 + 0.5);
        auto const t = rx::rnr_timer::from_code(code);
        CHECK(t.code() == code);
        CHECK(t.duration() == std::chrono::microseconds{us});
        // an exact table value maps to its own code
        CHECK(rx::rnr_timer{std::chrono::microseconds{us}}.code() == code);
        // as milliseconds in floating point too
        CHECK(rx::rnr_timer{std::chrono::duration<double, std::milli>{ib_rnr_table_ms[code]}}.code() == code);
    }
}

TEST_CASE("rnr_timer: a duration rounds up to the next table value, clamped at 655.36 ms") {
    CHECK(rx::rnr_timer{0us}.code() == 1); // zero: the shortest, 0.01 ms
    CHECK(rx::rnr_timer{1ns}.code() == 1);
    CHECK(rx::rnr_timer{10us}.code() == 1);
    CHECK(rx::rnr_timer{11us}.code() == 2); // 0.011 ms → 0.02 ms
    CHECK(rx::rnr_timer{41us}.code() == 5); // 0.041 ms → 0.06 ms
    CHECK(rx::rnr_timer{1ms}.code() == 14); // 1 ms → 1.28 ms
    CHECK(rx::rnr_timer{491520us}.code() == 31);
    CHECK(rx::rnr_timer{491521us}.code() == 0); // past 491.52 ms → 655.36 ms
    CHECK(rx::rnr_timer{655360us}.code() == 0);
    CHECK(rx::rnr_timer{1s}.code() == 0);                        // clamped to the longest
    CHECK(rx::rnr_timer{std::chrono::hours::max()}.code() == 0); // no overflow
    for (std::uint8_t code = 1; code < 31; ++code) {             // just past each value: the next code
        auto const us = rx::rnr_timer::from_code(code).duration() + 1us;
        CHECK(rx::rnr_timer{us}.code() == code + 1);
    }
}

TEST_CASE("rnr_timer: negative durations and codes over 31 are refused") {
    CHECK_THROWS_AS((void)rx::rnr_timer{-1us}, rx::argument_error);
    CHECK_THROWS_AS((void)rx::rnr_timer::from_code(32), rx::argument_error);
    CHECK_THROWS_WITH((void)rx::rnr_timer::from_code(200), doctest::Contains("RNR timer code 200"));
}

TEST_CASE("ack_timeout: 4.096 µs × 2^n, every code exact and rounded up") {
    for (std::uint8_t n = 1; n <= 31; ++n) {
        CAPTURE(static_cast<int>(n));
        auto const exact = std::chrono::nanoseconds{std::int64_t{4096} << n};
        auto const t = rx::ack_timeout::from_code(n);
        CHECK(t.code() == n);
        CHECK_FALSE(t.is_infinite());
        CHECK(t.duration() == exact);
        CHECK(rx::ack_timeout{exact}.code() == n);                       // exact: itself
        if (n < 31) CHECK(rx::ack_timeout{exact + 1ns}.code() == n + 1); // just past: the next
        if (n > 1) CHECK(rx::ack_timeout{exact - 1ns}.code() == n);      // just under: itself
    }
    CHECK(rx::ack_timeout{0s}.code() == 1); // zero is the shortest finite timeout, never infinite
    CHECK(rx::ack_timeout{1ns}.code() == 1);
    CHECK(rx::ack_timeout{8192ns}.code() == 1);
    CHECK(rx::ack_timeout{8193ns}.code() == 2);
    CHECK(rx::ack_timeout{1s}.code() == 18); // 4.096 µs × 2^18 = 1.07 s
    CHECK(rx::ack_timeout{2s}.code() == 19);
    CHECK(rx::ack_timeout{std::chrono::duration<double>{0.5}}.code() == 17);
}

TEST_CASE("ack_timeout: clamped to 31; infinite only when asked; bad input refused") {
    CHECK(rx::ack_timeout{std::chrono::hours{3}}.code() == 31);
    CHECK(rx::ack_timeout{std::chrono::hours::max()}.code() == 31);
    CHECK(rx::ack_timeout{std::chrono::nanoseconds::max()}.code() == 31);
    auto const inf = rx::ack_timeout::infinite();
    CHECK(inf.is_infinite());
    CHECK(inf.code() == 0);
    CHECK(inf.duration() == std::chrono::nanoseconds::max());
    CHECK(rx::ack_timeout::from_code(0) == inf);
    CHECK_THROWS_AS((void)rx::ack_timeout{-1ms}, rx::argument_error);
    CHECK_THROWS_AS((void)rx::ack_timeout::from_code(32), rx::argument_error);
}

TEST_CASE("qp_settings: production defaults, in time units") {
    rx::qp_settings const o;
    CHECK(o.remote_access == rx::access::none); // granted only as asked
    CHECK(o.local_ack_timeout.code() == 14);    // 67.1 ms
    CHECK(o.retry_count == 6);                  // finite on every provider: rxe retries 7 for ever
    CHECK(o.retry_count == rx::default_retry_count);
    CHECK(o.local_ack_timeout == rx::default_ack_timeout);
    CHECK(rx::dead_peer_bound(o.local_ack_timeout, o.retry_count) == 7 * rx::ack_timeout::unit * (1 << 14)); // 470 ms
    CHECK(rx::dead_peer_bound(rx::ack_timeout::infinite(), 3) == std::chrono::nanoseconds::max());
    CHECK(o.rnr_retry_count == 6); // finite
    CHECK(o.rnr_retry_count != rx::rnr_retry_infinite);
    CHECK(o.min_rnr_timer.code() != 0); // not the 655 ms back-off
    CHECK(o.min_rnr_timer.duration() == 1280us);
    CHECK_FALSE(o.initiator_depth.has_value()); // the device's limits
    CHECK_FALSE(o.responder_resources.has_value());
    // The path's fields: the path's own (verbs: the port's MTU, P_Key index 0, SL 0, hop limit
    // 64, traffic class 0, no flow label; CM: its route's).
    CHECK_FALSE(o.path_mtu.has_value());
    CHECK_FALSE(o.pkey_index.has_value());
    CHECK_FALSE(o.service_level.has_value());
    CHECK_FALSE(o.hop_limit.has_value());
    CHECK_FALSE(o.traffic_class.has_value());
    CHECK_FALSE(o.flow_label.has_value());
    CHECK(o.qkey == rx::default_qkey);
    CHECK(rx::default_qkey == 0x01234567U); // the CM's RDMA_UDP_QKEY
    rx::qp_settings set;
    set.local_ack_timeout = 100ms;
    set.min_rnr_timer = 5ms;
    CHECK(set.local_ack_timeout.code() == 15); // 134 ms
    CHECK(set.min_rnr_timer.code() == 18);     // 5.12 ms
}
