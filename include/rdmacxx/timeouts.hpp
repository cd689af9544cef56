#pragma once
/// @file
/// RC transport timers in time units, not codes: `ack_timeout` (4.096 µs × 2ⁿ) and `rnr_timer`
/// (the 32-entry table of the InfiniBand specification), each made from a `std::chrono`
/// duration with its rounding stated, and the retry limits that go with them.

#include "rdmacxx/detail/quirks.hpp"
#include "rdmacxx/error.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace rdmacxx {
inline namespace v0 {

/// `qp_settings::rnr_retry_count` value meaning "retry RNR NAKs forever" (the IB encoding of 7): a sender whose
/// peer never posts a receive then never completes. Any of 0 … 6 is a finite count.
inline constexpr std::uint8_t rnr_retry_infinite = 7;

/// The largest transport retry count (`retry_count`): 3 bits. The InfiniBand specification
/// makes 7 a finite count of seven retransmissions, but Soft-RoCE (rxe) never decrements a
/// counter of 7 (its completer skips the decrement at 7), so there a sender whose peer died
/// silently retransmits for ever: use at most 6 where a dead peer must be detected
/// (`detail::quirks::rxe_endless_retry_count`, docs/devices.md).
inline constexpr std::uint8_t max_retry_count = 7;

/// The default transport retry count of every path (`qp_settings::retry_count`): 6, the
/// largest count that is finite on every provider (not 7, which rxe retries for ever).
inline constexpr std::uint8_t default_retry_count = detail::quirks::largest_finite_retry_count; // 6

/// The local ACK timeout of an RC QP, which governs this QP as a **sender**: how long it waits
/// for an ACK (or NAK) of a request before it retransmits, `retry_count` times, and then
/// completes the request with IBV_WC_RETRY_EXC_ERR. The IB encoding is a 5-bit code n: the
/// timeout is 4.096 µs × 2ⁿ for n = 1 … 31 (8.192 µs … about 2.44 hours); n = 0 means infinite
/// (never retransmit, wait forever) and is chosen only through `ack_timeout::infinite()`.
///
/// Made from a duration, it rounds **up**: the smallest n ≥ 1 whose 4.096 µs × 2ⁿ is at least
/// the request, clamped to 31 for anything longer; a zero request gives n = 1. The device may
/// itself round the timeout up further (rxe, for one, has a floor). A dead link is then detected
/// after about `duration() × (retry_count + 1)`.
/// Thread-safety: a value type.
/// @see ibv_modify_qp(3) (`timeout`)
class ack_timeout {
public:
    /// 4.096 µs, the unit of the encoding.
    static constexpr std::chrono::nanoseconds unit{4096};
    /// The largest code, 31: about 2.44 hours.
    static constexpr std::uint8_t max_code = 31;

    /// The shortest encodable timeout at least `at_least` long (see the class comment).
    /// @throws argument_error for a negative duration.
    template <class Rep, class Period>
    constexpr ack_timeout(std::chrono::duration<Rep, Period> at_least) // NOLINT(google-explicit-constructor)
        : code_(code_for(std::chrono::duration<double, std::nano>(at_least).count())) {}

    /// The timeout with code `code` (0 = infinite).
    /// @throws argument_error when code > 31.
    [[nodiscard]] static constexpr ack_timeout from_code(std::uint8_t code) {
        if (code > max_code) [[unlikely]]
            detail::throw_argument("ACK timeout code " + std::to_string(code) + " is over the largest, 31");
        return ack_timeout{code, 0};
    }
    /// Never time out (code 0): a sender whose peer is gone waits forever. Never the default.
    [[nodiscard]] static constexpr ack_timeout infinite() noexcept { return ack_timeout{0, 0}; }

    /// The IB code n, 0 … 31.
    [[nodiscard]] constexpr std::uint8_t code() const noexcept { return code_; }
    /// True for code 0.
    [[nodiscard]] constexpr bool is_infinite() const noexcept { return code_ == 0; }
    /// 4.096 µs × 2ⁿ; `std::chrono::nanoseconds::max()` when infinite.
    [[nodiscard]] constexpr std::chrono::nanoseconds duration() const noexcept {
        return code_ == 0 ? std::chrono::nanoseconds::max() : unit * (std::int64_t{1} << code_);
    }

    /// Same code.
    friend constexpr bool operator==(ack_timeout, ack_timeout) noexcept = default;

private:
    constexpr ack_timeout(std::uint8_t code, int) noexcept : code_(code) {}

    static constexpr std::uint8_t code_for(double ns) {
        if (!(ns >= 0)) [[unlikely]] // also NaN
            detail::throw_argument("an ACK timeout must not be negative");
        double v = 2.0 * 4096.0;
        for (std::uint8_t n = 1; n < max_code; ++n, v *= 2)
            if (v >= ns) return n;
        return max_code;
    }

    std::uint8_t code_;
};

/// The default local ACK timeout of every path (`qp_settings::local_ack_timeout`): 67 ms, rounded up to code 14, 4.096
/// µs × 2^14 = 67.1 ms. With `default_retry_count` a sender whose peer died silently completes its request with
/// IBV_WC_RETRY_EXC_ERR after about 67.1 ms × (6 + 1) = 470 ms (`dead_peer_bound`).
inline constexpr ack_timeout default_ack_timeout{std::chrono::milliseconds{67}};

/// The time after which a sender whose peer died silently (no DREQ, no NAK: a lost host, a
/// destroyed QP, a link that went down) completes its oldest outstanding request with
/// IBV_WC_RETRY_EXC_ERR: `timeout.duration() × (retry_count + 1)`, the first try and each
/// retransmission waiting one ACK timeout. Devices may round the timeout up or add their own
/// margin (rxe arms its retransmit timer in jiffies). `nanoseconds::max()` for an infinite
/// timeout; a `retry_count` of 7 is infinite on rxe, which this function does not know.
/// @see ibv_modify_qp(3) (`timeout`, `retry_cnt`)
[[nodiscard]] constexpr std::chrono::nanoseconds dead_peer_bound(ack_timeout timeout,
                                                                 std::uint8_t retry_count) noexcept {
    if (timeout.is_infinite()) return std::chrono::nanoseconds::max();
    return timeout.duration() * (std::int64_t{retry_count} + 1);
}

/// The minimum RNR NAK timer of an RC QP, which governs this QP as a **receiver**: when a SEND
/// (or WRITE with immediate) arrives and no receive is posted, this QP answers with an RNR NAK
/// that tells the *peer's* sender to wait at least this long before it retries; the peer's
/// `rnr_retry_count` says how often it does. The IB encoding is a 5-bit code with the table below
/// (milliseconds); note code 0 is the **longest**, 655.36 ms (the CM's default):
///
/// | code | ms | code | ms | code | ms | code | ms |
/// |---|---|---|---|---|---|---|---|
/// | 0 | 655.36 | 8 | 0.16 | 16 | 2.56 | 24 | 40.96 |
/// | 1 | 0.01 | 9 | 0.24 | 17 | 3.84 | 25 | 61.44 |
/// | 2 | 0.02 | 10 | 0.32 | 18 | 5.12 | 26 | 81.92 |
/// | 3 | 0.03 | 11 | 0.48 | 19 | 7.68 | 27 | 122.88 |
/// | 4 | 0.04 | 12 | 0.64 | 20 | 10.24 | 28 | 163.84 |
/// | 5 | 0.06 | 13 | 0.96 | 21 | 15.36 | 29 | 245.76 |
/// | 6 | 0.08 | 14 | 1.28 | 22 | 20.48 | 30 | 327.68 |
/// | 7 | 0.12 | 15 | 1.92 | 23 | 30.72 | 31 | 491.52 |
///
/// Made from a duration, it rounds **up**: the code of the smallest table value at least the
/// request (a zero request gives 0.01 ms, code 1), clamped to 655.36 ms (code 0) for anything
/// longer.
/// Thread-safety: a value type.
/// @see ibv_modify_qp(3) (`min_rnr_timer`)
class rnr_timer {
public:
    /// The table of the IB specification: microseconds by code.
    static constexpr std::array<std::uint32_t, 32> table_us{
        655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
        480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
        20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

    /// The shortest table value at least `at_least` long (see the class comment).
    /// @throws argument_error for a negative duration.
    template <class Rep, class Period>
    constexpr rnr_timer(std::chrono::duration<Rep, Period> at_least) // NOLINT(google-explicit-constructor)
        : code_(code_for(std::chrono::duration<double, std::micro>(at_least).count())) {}

    /// The timer with code `code`.
    /// @throws argument_error when code > 31.
    [[nodiscard]] static constexpr rnr_timer from_code(std::uint8_t code) {
        if (code > 31) [[unlikely]]
            detail::throw_argument("RNR timer code " + std::to_string(code) + " is over the largest, 31");
        return rnr_timer{code, 0};
    }

    /// The IB code, 0 … 31.
    [[nodiscard]] constexpr std::uint8_t code() const noexcept { return code_; }
    /// The table value.
    [[nodiscard]] constexpr std::chrono::microseconds duration() const noexcept {
        return std::chrono::microseconds{table_us[code_]};
    }

    /// Same code.
    friend constexpr bool operator==(rnr_timer, rnr_timer) noexcept = default;

private:
    constexpr rnr_timer(std::uint8_t code, int) noexcept : code_(code) {}

    static constexpr std::uint8_t code_for(double us) {
        if (!(us >= 0)) [[unlikely]] // also NaN
            detail::throw_argument("an RNR timer must not be negative");
        for (std::uint8_t n = 1; n < 32; ++n) // codes 1 … 31 ascend
            if (static_cast<double>(table_us[n]) >= us) return n;
        return 0; // 655.36 ms, the longest
    }

    std::uint8_t code_;
};

} // namespace v0
} // namespace rdmacxx
