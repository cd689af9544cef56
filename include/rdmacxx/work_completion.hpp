#pragma once
/// @file
/// One work completion, typed: `work_completion` (layout-compatible with `ibv_wc`), the UD
/// helpers `ud_payload` and `ud_grh`, and `completion_batch<N>`, what
/// `completion_queue::poll<N>()` returns.

#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/error.hpp"

#include <arpa/inet.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>

namespace rdmacxx {
inline namespace v0 {

template <class Completion>
class completion_queue;

namespace detail {

/// The `wc_error` of the failed completion `wc`, with what tracking noted of its request
/// (detail/tracking.hpp's `failure_note_hook`, set once a checked CQ has seen a failure).
[[nodiscard]] inline wc_error failed_completion_error(ibv_wc const& wc) {
    if (failure_note_fn const f = failure_note_hook.load(std::memory_order_acquire); f != nullptr) {
        tracked_request request;
        if (f(wc, request)) return {wc, request};
    }
    return wc_error(wc);
}

} // namespace detail

/// One work completion (`ibv_wc`), typed. Same size and layout as `ibv_wc`, so a span of them is
/// handed to ibv_poll_cq(3) as it is.
/// @see ibv_poll_cq(3)
class work_completion {
public:
    /// Leaves the completion uninitialised, as an `ibv_wc` in C: an array of them costs nothing
    /// before ibv_poll_cq(3) fills it. Value-initialise (`work_completion{}`) for zeros.
    work_completion() noexcept = default;
    /// Wraps a raw completion.
    explicit work_completion(ibv_wc const& wc) noexcept : wc_(wc) {}

    /// True when the status is IBV_WC_SUCCESS.
    [[nodiscard]] bool ok() const noexcept { return wc_.status == IBV_WC_SUCCESS; }
    /// The status.
    [[nodiscard]] ibv_wc_status status() const noexcept { return wc_.status; }
    /// The status as a `std::error_code` in `wc_category()` (false when successful).
    [[nodiscard]] std::error_code error_code() const noexcept { return make_wc_error_code(wc_.status); }
    /// The `wr_id` of the work request it completes.
    [[nodiscard]] std::uint64_t wr_id() const noexcept { return wc_.wr_id; }
    /// The operation (valid only when `ok()`, except for the receive bit).
    [[nodiscard]] ibv_wc_opcode opcode() const noexcept { return wc_.opcode; }
    /// True for a receive-queue completion (a receive or a write-with-immediate's arrival).
    [[nodiscard]] bool is_recv() const noexcept { return (wc_.opcode & IBV_WC_RECV) != 0; }
    /// Bytes received (receive completions), or bytes read/atomics (some providers).
    [[nodiscard]] std::uint32_t byte_len() const noexcept { return wc_.byte_len; }
    /// True when the sender attached immediate data.
    [[nodiscard]] bool has_imm() const noexcept { return (wc_.wc_flags & IBV_WC_WITH_IMM) != 0; }
    /// The immediate data in host byte order (as the sender passed it to `send_imm`/`write_imm`).
    [[nodiscard]] std::uint32_t imm_data() const noexcept { return ntohl(wc_.imm_data); }
    /// The local QP number.
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return wc_.qp_num; }
    /// The sender's QP number (UD receives).
    [[nodiscard]] std::uint32_t src_qp() const noexcept { return wc_.src_qp; }
    /// True when a 40-byte GRH precedes the payload in the receive buffer (UD).
    [[nodiscard]] bool has_grh() const noexcept { return (wc_.wc_flags & IBV_WC_GRH) != 0; }
    /// The provider's vendor error syndrome (meaningful when not `ok()`).
    [[nodiscard]] std::uint32_t vendor_err() const noexcept { return wc_.vendor_err; }
    /// The raw completion.
    [[nodiscard]] ibv_wc const& native() const noexcept { return wc_; }

    /// Throws `wc_error` built from this completion when it failed.
    /// @throws wc_error with the status, vendor error, `wr_id` and QP number; for a request of a
    ///         `checked` QP also its queue, operation, remote address and rkey.
    void throw_if_error() const {
        if (!ok()) [[unlikely]]
            throw_error();
    }

private:
    // A failed completion's opcode is undefined: what is known beside its defined fields comes
    // from in-flight tracking (checked.hpp), when the request was tracked.
    RDMACXX_COLD [[noreturn]] void throw_error() const { throw detail::failed_completion_error(wc_); }

    ibv_wc wc_; // not zeroed: see the default constructor
};
static_assert(sizeof(work_completion) == sizeof(ibv_wc), "work_completion must be layout-compatible with ibv_wc");

/// The payload of a UD receive: `buffer` (the receive buffer that was posted) less the 40-byte
/// GRH in front, `wc.byte_len() - 40` bytes long.
/// @throws argument_error when the completion is shorter than a GRH or longer than the buffer.
template <class T>
[[nodiscard]] std::span<T> ud_payload(std::span<T> buffer, work_completion const& wc) {
    static_assert(sizeof(T) == 1, "a UD payload is bytes: pass a span of std::byte, char or unsigned char");
    if (wc.byte_len() < 40 || wc.byte_len() > buffer.size()) [[unlikely]]
        detail::throw_argument("UD completion of " + std::to_string(wc.byte_len()) +
                               " bytes does not fit a GRH of 40 bytes and a buffer of " +
                               std::to_string(buffer.size()) + " bytes");
    return buffer.subspan(40, wc.byte_len() - 40);
}

/// The 40-byte GRH at the front of a UD receive buffer (meaningful when `wc.has_grh()`).
template <class T>
[[nodiscard]] std::span<T, 40> ud_grh(std::span<T> buffer) {
    static_assert(sizeof(T) == 1, "a GRH is bytes");
    if (buffer.size() < 40) [[unlikely]]
        detail::throw_argument("a UD receive buffer holds at least a 40-byte GRH");
    return buffer.template first<40>();
}

/// Up to `N` completions returned by value from `completion_queue::poll<N>()`; a range.
template <std::size_t N>
class completion_batch {
public:
    // For N == 1 the end is fixed and the begin moves to it when the batch is empty: both GCC
    // and clang then see a loop of at most one turn (with `begin() + count` clang keeps a loop).
    [[nodiscard]] work_completion const* begin() const noexcept {
        if constexpr (N == 1)
            return count_ != 0 ? items() : items() + 1;
        else
            return items();
    }
    [[nodiscard]] work_completion const* end() const noexcept {
        if constexpr (N == 1)
            return items() + 1;
        else
            return items() + count_;
    }
    [[nodiscard]] std::size_t size() const noexcept { return count_; }
    [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
    [[nodiscard]] work_completion const& operator[](std::size_t i) const noexcept { return items()[i]; }

private:
    template <class>
    friend class completion_queue;
    // Raw storage, not an array of work_completion: those would be zeroed on every poll<N>()
    // (N × 48 bytes) only to be overwritten by ibv_poll_cq(3). work_completion is an
    // implicit-lifetime type, so the completions the provider writes here are objects.
    // (No std::launder: GCC treats it as opaque and could no longer fold begin() + count.)
    [[nodiscard]] work_completion* items() noexcept { return reinterpret_cast<work_completion*>(storage_); }
    [[nodiscard]] work_completion const* items() const noexcept {
        return reinterpret_cast<work_completion const*>(storage_);
    }
    struct no_init {};
    // For poll<N>(), which sets count_ itself: no dead store into the escaped object.
    explicit completion_batch(no_init) noexcept {}
    alignas(work_completion) std::byte storage_[N * sizeof(work_completion)];
    std::uint32_t count_; // 32 bits: ibv_poll_cq(3)'s int is stored without widening

public:
    /// An empty batch.
    completion_batch() noexcept : count_(0) {}
};

} // namespace v0
} // namespace rdmacxx
