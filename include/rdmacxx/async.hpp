#pragma once
/// @file
/// Asynchronous events of a device: `async_event` (typed, acknowledges itself, identifies the
/// affected QP, CQ, SRQ, WQ or port) and `async_event_queue` (the context's async event file
/// descriptor, read with a timeout, non-blocking capable, delivering to a handler or a queue,
/// raising `async_error` for error events when asked).

#include "rdmacxx/context.hpp"
#include "rdmacxx/detail/wait.hpp"
#include "rdmacxx/error.hpp"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// The kind of object an asynchronous event is about.
enum class async_object {
    cq,     ///< a completion queue (`ibv_async_event::element.cq`)
    qp,     ///< a queue pair (`element.qp`)
    srq,    ///< a shared receive queue (`element.srq`)
    wq,     ///< a work queue (`element.wq`)
    port,   ///< a port of the device (`element.port_num`)
    device, ///< the whole device
};

/// "CQ", "QP", "SRQ", "WQ", "port" or "device".
[[nodiscard]] constexpr std::string_view to_string(async_object o) noexcept {
    switch (o) {
    case async_object::cq:
        return "CQ";
    case async_object::qp:
        return "QP";
    case async_object::srq:
        return "SRQ";
    case async_object::wq:
        return "WQ";
    case async_object::port:
        return "port";
    case async_object::device:
        return "device";
    }
    return "unknown";
}

/// The kind of object an event of type `type` is about, as ibv_get_async_event(3) documents it.
[[nodiscard]] constexpr async_object affected_object(ibv_event_type type) noexcept {
    switch (type) {
    case IBV_EVENT_CQ_ERR:
        return async_object::cq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return async_object::qp;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        return async_object::srq;
    case IBV_EVENT_WQ_FATAL:
        return async_object::wq;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
        return async_object::port;
    case IBV_EVENT_DEVICE_FATAL:
        return async_object::device;
    }
    return async_object::device;
}

/// True for the error events: the affected QP, CQ, SRQ or WQ is in the error state (CQ error,
/// QP fatal, QP request error, QP access error, path migration error, SRQ error, WQ fatal) or
/// the device is unusable (device fatal). Port error (the link went down) is a state change the
/// port recovers from, not an error here; nor are the informational events.
[[nodiscard]] constexpr bool is_error_event(ibv_event_type type) noexcept {
    switch (type) {
    case IBV_EVENT_CQ_ERR:
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_WQ_FATAL:
    case IBV_EVENT_DEVICE_FATAL:
        return true;
    default:
        return false;
    }
}

/// One asynchronous event, read from a context's async event queue. Move-only; acknowledges
/// itself (ibv_ack_async_event(3)) on destruction, or earlier with `ack()`.
///
/// Destroying a QP, CQ, SRQ or WQ waits until every event about it is acknowledged: let the
/// event go (or `ack()` it) before destroying its object. The context must outlive the event.
/// Thread-safety: one thread at a time per event.
/// @see ibv_get_async_event(3), ibv_ack_async_event(3)
class async_event {
public:
    /// Takes over an event read from `ctx` by ibv_get_async_event(3), and the duty to
    /// acknowledge it.
    async_event(ibv_context* ctx, ibv_async_event const& raw) noexcept : ctx_(ctx), raw_(raw) {}
    /// Takes over `other`'s event and duty to acknowledge it; `other` is left acknowledged-empty.
    async_event(async_event&& other) noexcept
        : ctx_(other.ctx_), raw_(other.raw_), pending_(std::exchange(other.pending_, false)) {}
    /// Acknowledges the event held, then takes over `other`'s.
    async_event& operator=(async_event&& other) noexcept {
        if (this != &other) {
            ack();
            ctx_ = other.ctx_;
            raw_ = other.raw_;
            pending_ = std::exchange(other.pending_, false);
        }
        return *this;
    }
    async_event(async_event const&) = delete;
    async_event& operator=(async_event const&) = delete;
    /// Acknowledges the event if still pending.
    ~async_event() { ack(); }

    /// Acknowledges the event now (idempotent). The accessors keep working; `qp()`, `cq()`,
    /// `srq()` and `wq()` then point at objects that may be destroyed at any time.
    void ack() noexcept {
        if (std::exchange(pending_, false)) ::ibv_ack_async_event(&raw_);
    }
    /// True until acknowledged.
    [[nodiscard]] bool pending() const noexcept { return pending_; }

    /// The event type.
    [[nodiscard]] ibv_event_type type() const noexcept { return raw_.event_type; }
    /// The event type as text, e.g. "port error". @see ibv_event_type_str(3)
    [[nodiscard]] std::string_view name() const noexcept { return ::ibv_event_type_str(raw_.event_type); }
    /// The kind of object it is about.
    [[nodiscard]] async_object object() const noexcept { return affected_object(raw_.event_type); }
    /// True for an error event (see `is_error_event`).
    [[nodiscard]] bool is_error() const noexcept { return is_error_event(raw_.event_type); }

    /// The affected QP (compare with `queue_pair::native_handle()`), or nullptr for other events.
    [[nodiscard]] ibv_qp* qp() const noexcept { return object() == async_object::qp ? raw_.element.qp : nullptr; }
    /// The affected QP's number, or 0 for other events.
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp() != nullptr ? qp()->qp_num : 0; }
    /// The affected CQ (compare with `completion_queue::native_handle()`), or nullptr.
    [[nodiscard]] ibv_cq* cq() const noexcept { return object() == async_object::cq ? raw_.element.cq : nullptr; }
    /// The affected SRQ, or nullptr.
    [[nodiscard]] ibv_srq* srq() const noexcept { return object() == async_object::srq ? raw_.element.srq : nullptr; }
    /// The affected WQ, or nullptr.
    [[nodiscard]] ibv_wq* wq() const noexcept { return object() == async_object::wq ? raw_.element.wq : nullptr; }
    /// The affected port (1-based) for a port event, else 0.
    [[nodiscard]] int port_num() const noexcept { return object() == async_object::port ? raw_.element.port_num : 0; }
    /// The name of the device the event came from.
    [[nodiscard]] std::string_view device_name() const noexcept { return ::ibv_get_device_name(ctx_->device); }

    /// What it affects, for people: "QP 17", "CQ 0x5624718b1710", "SRQ 0x…", "WQ 0x…",
    /// "port 1", "device".
    [[nodiscard]] std::string affected() const {
        switch (object()) {
        case async_object::qp:
            return "QP " + std::to_string(qp_num());
        case async_object::port:
            return "port " + std::to_string(port_num());
        case async_object::device:
            return "device";
        case async_object::cq:
            return "CQ " + pointer_text(raw_.element.cq);
        case async_object::srq:
            return "SRQ " + pointer_text(raw_.element.srq);
        case async_object::wq:
            return "WQ " + pointer_text(raw_.element.wq);
        }
        return "device";
    }

    /// "port error on rxe0 for port 1".
    [[nodiscard]] std::string to_string() const {
        return std::string{name()} + " on " + std::string{device_name()} + " for " + affected();
    }

    /// The event as an `async_error` (whatever its type).
    [[nodiscard]] async_error to_error() const {
        return async_error{raw_.event_type, std::string{device_name()}, affected(), qp_num(), port_num()};
    }

    /// When this is an error event: acknowledges it and throws it as `async_error`.
    /// @throws async_error for an error event (see `is_error_event`).
    void raise_if_error() {
        if (!is_error()) return;
        async_error e = to_error();
        ack();
        throw e;
    }

    /// The raw event.
    [[nodiscard]] ibv_async_event const& native() const noexcept { return raw_; }

private:
    static std::string pointer_text(void const* p) {
        char buf[32] = {};
        (void)std::snprintf(buf, sizeof buf, "%p", p);
        return buf;
    }

    ibv_context* ctx_;
    ibv_async_event raw_;
    bool pending_ = true;
};

/// Options of an `async_event_queue`.
struct async_options {
    /// Throw error events (see `is_error_event`) as `async_error` from `get`, `wait`,
    /// `try_get`, `dispatch` and `drain` instead of returning them.
    bool raise_errors = false;
};

/// The asynchronous events of one open device, read from its async event file descriptor
/// (`ibv_context::async_fd`). A non-owning view of the context (it keeps the `ibv_context`, so
/// the `rdmacxx::context` may move), which must outlive it. Every view of one context reads the
/// same events: each event goes to exactly one reader.
///
/// The queue puts the fd in non-blocking mode (O_NONBLOCK) when it is made, and every read
/// first waits for readability with ppoll(2): when several readers see the same event, the
/// losers' ibv_get_async_event(3) fails with EAGAIN, which they take as "nothing", so
/// `try_get` never blocks and `wait` never overstays its timeout. Keep O_NONBLOCK set on the fd
/// (an epoll(7) user has no reason to clear it). `get` is the unbounded wait; `wait(timeout)`
/// its bounded twin.
/// Thread-safety: reading from several threads is safe (each event goes to one of them).
/// @see ibv_get_async_event(3)
class async_event_queue {
public:
    /// A view of `ctx`'s async events; sets O_NONBLOCK on the context's async event fd.
    /// @throws sys_error when fcntl(2) fails.
    explicit async_event_queue(context& ctx, async_options opt = {}) : ctx_(ctx.native_handle()), opt_(opt) {
        int const flags = ::fcntl(fd(), F_GETFL);
        if (flags < 0) [[unlikely]]
            detail::throw_errno("fcntl", "reading the flags of the async event fd");
        if ((flags & O_NONBLOCK) == 0 && ::fcntl(fd(), F_SETFL, flags | O_NONBLOCK) < 0) [[unlikely]]
            detail::throw_errno("fcntl", "setting O_NONBLOCK on the async event fd");
    }

    /// The async event file descriptor, for poll(2) or epoll(7) (readable when an event waits).
    [[nodiscard]] int fd() const noexcept { return ctx_->async_fd; }

    /// True when the fd is in non-blocking mode (as the queue sets it).
    /// @throws sys_error when fcntl(2) fails.
    [[nodiscard]] bool nonblocking() const {
        int const flags = ::fcntl(fd(), F_GETFL);
        if (flags < 0) [[unlikely]]
            detail::throw_errno("fcntl", "reading the flags of the async event fd");
        return (flags & O_NONBLOCK) != 0;
    }

    /// The next event, waiting for it as long as it takes; `wait(timeout)` is the bounded twin.
    /// @throws async_error for an error event when `raise_errors` is set; sys_error when
    ///         ppoll(2) or ibv_get_async_event(3) fails.
    [[nodiscard]] async_event get() {
        for (;;)
            if (auto ev = read(std::chrono::steady_clock::time_point::max())) return std::move(*ev);
    }

    /// The next event if one arrives within `timeout` (a `std::chrono` duration; zero or
    /// negative: only one already waiting), else nothing: a timeout is an empty optional, not an
    /// exception.
    /// @throws as `get`.
    template <class Rep, class Period>
    [[nodiscard]] std::optional<async_event> wait(std::chrono::duration<Rep, Period> timeout) {
        auto const deadline = detail::deadline_after(timeout);
        for (;;) {
            if (auto ev = read(deadline)) return ev;
            if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        }
    }

    /// The next event if one is waiting now, else nothing. Never blocks, also when another
    /// thread reads the same context's events at the same time.
    /// @throws as `get`.
    [[nodiscard]] std::optional<async_event> try_get() { return read(std::chrono::steady_clock::time_point{}); }

    /// Hands every event to `handler` (invoked as `handler(async_event&&)` ; the event is
    /// acknowledged when the handler's argument goes away), waiting up to `timeout` for the first
    /// one and taking the others as long as they are already waiting.
    /// @returns the number of events handled.
    /// @throws async_error for an error event when `raise_errors` is set (the events before it
    ///         were handled); whatever `handler` throws; as `get`.
    template <class Handler>
        requires std::invocable<Handler&, async_event&&> std::size_t
        dispatch(Handler&& handler, std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) {
            std::size_t n = 0;
            for (auto ev = wait(timeout); ev; ev = try_get()) {
                handler(std::move(*ev));
                ++n;
            }
            return n;
        }

    /// Appends every event to `queue`, waiting up to `timeout` for the first one and taking the
    /// others as long as they are already waiting. The events stay unacknowledged until taken
    /// out of the queue and destroyed.
    /// @returns the number of events appended.
    /// @throws as `dispatch`.
    std::size_t drain(std::deque<async_event>& queue,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) {
        return dispatch([&queue](async_event&& ev) { queue.push_back(std::move(ev)); }, timeout);
    }

    /// The options given at construction.
    [[nodiscard]] async_options const& options() const noexcept { return opt_; }

private:
    // Waits for readability until `deadline` (max: forever), then reads one event without
    // blocking; nothing on timeout, on EINTR, or when another reader took the event first
    // (EAGAIN: the fd is non-blocking).
    std::optional<async_event> read(std::chrono::steady_clock::time_point deadline) {
        int const ready = detail::wait_readable(fd(), deadline);
        if (ready < 0) [[unlikely]]
            detail::throw_errno("ppoll", "waiting on an async event fd");
        if (ready == 0) return std::nullopt;
        ibv_async_event raw{};
        if (::ibv_get_async_event(ctx_, &raw) != 0) {
            if (errno == EAGAIN || errno == EINTR) return std::nullopt;
            detail::throw_errno("ibv_get_async_event",
                                [&] { return "on " + std::string{::ibv_get_device_name(ctx_->device)}; });
        }
        async_event ev{ctx_, raw};
        if (opt_.raise_errors) ev.raise_if_error();
        return ev;
    }

    ibv_context* ctx_;
    async_options opt_;
};

} // namespace v0
} // namespace rdmacxx
