#pragma once
/// @file
/// `cm::event`, an RDMA CM event that acknowledges itself, and `cm::event_channel`, the file
/// descriptor events arrive on.

#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event_type.hpp"

#include <fcntl.h>
#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// The connection data of a connected-service event (`connect_request`, `established` on
/// RDMA_PS_TCP): what the peer asked for or agreed to. A plain value.
/// @see rdma_get_cm_event(3), CONN EVENT DATA
struct connection_data {
    std::uint8_t responder_resources = 0; ///< RDMA READ/atomic requests the peer lets us have outstanding
    std::uint8_t initiator_depth = 0;     ///< RDMA READ/atomic requests the peer may have outstanding at us
    std::uint8_t flow_control = 0;        ///< 1 when the sender provides hardware flow control
    std::uint8_t retry_count = 0;         ///< transport retries (connect_request only)
    std::uint8_t rnr_retry_count = 0;     ///< RNR NAK retries (7 = forever)
    bool srq = false;                     ///< the sender uses a shared receive queue
    std::uint32_t qp_num = 0;             ///< the peer's QP number
};

/// The datagram data of a UD event (`established` on RDMA_PS_UDP, `multicast_join`): how to
/// address the peer or group. A plain value.
/// @see rdma_get_cm_event(3), UD EVENT DATA
struct ud_data {
    ibv_ah_attr ah_attr{};    ///< address-handle attributes of the peer or group (for `address_handle`)
    std::uint32_t qp_num = 0; ///< the peer's QP number (0xffffff for a multicast group)
    std::uint32_t qkey = 0;   ///< the Q_Key to send with
};

/// One RDMA CM event, taken from an `event_channel`. Move-only; acknowledges itself
/// (rdma_ack_cm_event(3)) when destroyed or when `ack()` is called, which frees its private
/// data: copy what you need first. Destroying an id blocks until its events are acknowledged,
/// so keep events short-lived.
///
/// `private_data()` is the whole buffer the CM delivered: it may be longer than what the peer
/// wrote, the rest zeroed (rdma_get_cm_event(3)).
/// Thread-safety: an event is used by one thread at a time.
/// @see rdma_get_cm_event(3), rdma_ack_cm_event(3)
class event {
public:
    /// Takes ownership of `e`, which this object acknowledges.
    explicit event(rdma_cm_event* e) noexcept : handle_(e) {}

    /// The event's type.
    [[nodiscard]] event_type type() const noexcept { return static_cast<event_type>(handle_->event); }
    /// The status: 0 on success, else `-errno` or a transport value (the reject reason of
    /// `rejected`).
    [[nodiscard]] int status() const noexcept { return handle_->status; }
    /// True when the type is not a failure and the status is 0.
    [[nodiscard]] bool ok() const noexcept { return !is_failure(type()) && status() == 0; }
    /// The id the event is for; for `connect_request` a new id for the new connection, which
    /// the receiver owns (wrap it in `cm::id`, or reject and destroy it).
    [[nodiscard]] rdma_cm_id* id() const noexcept { return handle_->id; }
    /// For `connect_request`: the listening id the request came to; otherwise null.
    [[nodiscard]] rdma_cm_id* listen_id() const noexcept { return handle_->listen_id; }
    /// True when the event's id is in a datagram port space (UDP, IPoIB), so `ud()` applies.
    [[nodiscard]] bool is_datagram() const noexcept {
        return handle_->id != nullptr && (handle_->id->ps == RDMA_PS_UDP || handle_->id->ps == RDMA_PS_IPOIB);
    }

    /// The private data the peer sent, valid until the event is acknowledged; empty when none.
    [[nodiscard]] std::span<std::byte const> private_data() const noexcept {
        void const* p = is_datagram() ? handle_->param.ud.private_data : handle_->param.conn.private_data;
        std::uint8_t const n =
            is_datagram() ? handle_->param.ud.private_data_len : handle_->param.conn.private_data_len;
        if (p == nullptr) return {};
        return {static_cast<std::byte const*>(p), n};
    }
    /// A copy of `private_data()`, which outlives the event.
    [[nodiscard]] std::vector<std::byte> private_data_copy() const {
        auto const s = private_data();
        return {s.begin(), s.end()};
    }

    /// The connection data (meaningful for connected-service `connect_request` and `established`).
    [[nodiscard]] connection_data conn() const noexcept {
        auto const& c = handle_->param.conn;
        return {c.responder_resources, c.initiator_depth, c.flow_control, c.retry_count,
                c.rnr_retry_count,     c.srq != 0,        c.qp_num};
    }
    /// The datagram data (meaningful for UD `established` and `multicast_join`).
    [[nodiscard]] ud_data ud() const noexcept {
        auto const& u = handle_->param.ud;
        return {u.ah_attr, u.qp_num, u.qkey};
    }

    /// Throws the `cm_error` matching this event when it reports a failure (address error,
    /// route error, unreachable, rejected with the reject reason, …), with its private data.
    /// @param what what the caller was doing, for the message
    void throw_if_failed(std::string const& what) const {
        if (!ok()) [[unlikely]]
            rdmacxx::detail::throw_cm_event(type(), status(), what, private_data_copy());
    }

    /// "established", "rejected (status 28)", … for logs.
    [[nodiscard]] std::string to_string() const {
        std::string s = cm::to_string(type());
        if (status() != 0) s += " (status " + std::to_string(status()) + ")";
        return s;
    }

    /// Acknowledges the event now; the object is empty afterwards.
    void ack() noexcept { handle_.reset(); }
    /// True until acknowledged.
    [[nodiscard]] explicit operator bool() const noexcept { return handle_ != nullptr; }
    /// The librdmacm event.
    [[nodiscard]] rdma_cm_event* native_handle() const noexcept { return handle_.get(); }

private:
    std::unique_ptr<rdma_cm_event, rdmacxx::detail::cm_event_deleter> handle_;
};

/// An RDMA CM event channel (`rdma_event_channel`): the file descriptor the events of its ids
/// arrive on. Move-only; destroy it after its ids.
///
/// The descriptor is non-blocking from creation, so it can go into epoll/poll at once; `get()`
/// still blocks (it polls for readability), `try_get()` never does, and `get(timeout)` waits at
/// most the timeout.
/// Thread-safety: librdmacm serialises the channel; two threads may take events, each gets
/// different ones.
/// @see rdma_create_event_channel(3), rdma_get_cm_event(3)
class event_channel {
public:
    /// Creates a channel with a non-blocking descriptor.
    /// @throws sys_error when rdma_create_event_channel(3) or fcntl(2) fails.
    event_channel() : handle_(::rdma_create_event_channel()) {
        if (!handle_) [[unlikely]]
            rdmacxx::detail::throw_errno("rdma_create_event_channel");
        int const flags = ::fcntl(handle_->fd, F_GETFL);
        if (flags < 0 || ::fcntl(handle_->fd, F_SETFL, flags | O_NONBLOCK) < 0) [[unlikely]]
            rdmacxx::detail::throw_errno("fcntl", "making the CM event channel non-blocking");
    }

    /// The file descriptor: readable when an event is pending (for epoll/poll).
    [[nodiscard]] int fd() const noexcept { return handle_->fd; }

    /// The next event if one is pending, else empty. Never blocks.
    /// @throws sys_error when rdma_get_cm_event(3) fails other than with EAGAIN.
    [[nodiscard]] std::optional<event> try_get() {
        rdma_cm_event* e = nullptr;
        if (int rc = ::rdma_get_cm_event(handle_.get(), &e); rc != 0) {
            int const err = rdmacxx::detail::cm_errno(rc);
            if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return std::nullopt;
            rdmacxx::detail::throw_sys(err, "rdma_get_cm_event");
        }
        return event{e};
    }

    /// The next event, waiting at most `timeout` (a negative timeout waits forever); empty when
    /// none came in time.
    /// @throws sys_error when poll(2) or rdma_get_cm_event(3) fails.
    [[nodiscard]] std::optional<event> get(std::chrono::milliseconds timeout) {
        auto const deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            if (auto e = try_get()) return e;
            int wait_ms = -1;
            if (timeout.count() >= 0) {
                auto const left =
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
                if (left.count() <= 0) return std::nullopt;
                wait_ms = static_cast<int>(left.count()) + 1;
            }
            pollfd pfd{fd(), POLLIN, 0};
            if (::poll(&pfd, 1, wait_ms) < 0 && errno != EINTR) [[unlikely]]
                rdmacxx::detail::throw_errno("poll", "waiting on the CM event channel");
        }
    }

    /// The next event; blocks until one arrives.
    /// @throws sys_error when poll(2) or rdma_get_cm_event(3) fails.
    [[nodiscard]] event get() { return *get(std::chrono::milliseconds{-1}); }

    /// The librdmacm channel.
    [[nodiscard]] rdma_event_channel* native_handle() const noexcept { return handle_.get(); }

private:
    std::unique_ptr<rdma_event_channel, rdmacxx::detail::cm_channel_deleter> handle_;
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
