#pragma once
/// @file
/// `cm::event`, an RDMA CM event that acknowledges itself, and `cm::event_channel`, the file
/// descriptor events arrive on.

#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event_type.hpp"
#include "rdmacxx/detail/wait.hpp"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
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

/// One RDMA CM event, taken from an `event_channel`. A value (copyable). The event is acknowledged
/// (rdma_ack_cm_event(3)) the moment it is taken: this object keeps its own copy of everything
/// the event carried (type, status, ids, connection or UD data, private data), so it stays valid
/// for as long as it lives and never holds up its id. Destroying the id it names (or a
/// `connection` owning it), migrating it or leaving a multicast group while still holding the
/// event is therefore safe: rdma_destroy_id(3), rdma_migrate_id(3) and rdma_leave_multicast(3)
/// block only while an event of theirs is unacknowledged, and none ever is. `id()` and
/// `listen_id()` are the raw ids as they were: compare them, do not use them after destroying
/// those ids.
///
/// `private_data()` is the whole buffer the CM delivered: it may be longer than what the peer
/// wrote, the rest zeroed (rdma_get_cm_event(3)).
/// Thread-safety: an event is used by one thread at a time.
/// @see rdma_get_cm_event(3), rdma_ack_cm_event(3)
class event {
public:
    /// Copies `e` and acknowledges it (rdma_ack_cm_event(3)) at once: `e` is invalid afterwards.
    explicit event(rdma_cm_event* e) noexcept
        : copy_(*e), datagram_(e->id != nullptr && (e->id->ps == RDMA_PS_UDP || e->id->ps == RDMA_PS_IPOIB)) {
        void const* const p = is_datagram() ? e->param.ud.private_data : e->param.conn.private_data;
        std::uint8_t const n = is_datagram() ? e->param.ud.private_data_len : e->param.conn.private_data_len;
        private_data_len_ = p == nullptr ? 0 : n;
        if (private_data_len_ != 0) std::memcpy(private_data_.data(), p, private_data_len_);
        rdmacxx::detail::cm_event_deleter{}(e);
        point_at_own_copy();
    }

    /// Copies `other` (an event is a value: it holds no resource), pointing the private data at
    /// this object's own copy.
    event(event const& other) noexcept
        : copy_(other.copy_), private_data_(other.private_data_), private_data_len_(other.private_data_len_),
          datagram_(other.datagram_) {
        point_at_own_copy();
    }
    /// As the copy constructor.
    event& operator=(event const& other) noexcept {
        if (this != &other) {
            copy_ = other.copy_;
            private_data_ = other.private_data_;
            private_data_len_ = other.private_data_len_;
            datagram_ = other.datagram_;
            point_at_own_copy();
        }
        return *this;
    }
    ~event() = default;

    /// The event's type.
    [[nodiscard]] event_type type() const noexcept { return static_cast<event_type>(copy_.event); }
    /// The status: 0 on success, else `-errno` or a transport value (the reject reason of
    /// `rejected`).
    [[nodiscard]] int status() const noexcept { return copy_.status; }
    /// True when the type is not a failure and the status is 0.
    [[nodiscard]] bool ok() const noexcept { return !is_failure(type()) && status() == 0; }
    /// The id the event is for; for `connect_request` a new id for the new connection, which
    /// the receiver owns (wrap it in `cm::id`, or reject and destroy it).
    [[nodiscard]] rdma_cm_id* id() const noexcept { return copy_.id; }
    /// For `connect_request`: the listening id the request came to; otherwise null.
    [[nodiscard]] rdma_cm_id* listen_id() const noexcept { return copy_.listen_id; }
    /// True when the event's id was in a datagram port space (UDP, IPoIB) when the event was
    /// taken, so `ud()` applies.
    [[nodiscard]] bool is_datagram() const noexcept { return datagram_; }

    /// The private data the peer sent (at most 255 bytes), valid as long as this object; empty
    /// when none.
    [[nodiscard]] std::span<std::byte const> private_data() const noexcept {
        return {private_data_.data(), private_data_len_};
    }
    /// A copy of `private_data()`.
    [[nodiscard]] std::vector<std::byte> private_data_copy() const {
        auto const s = private_data();
        return {s.begin(), s.end()};
    }

    /// The connection data (meaningful for connected-service `connect_request` and `established`).
    [[nodiscard]] connection_data conn() const noexcept {
        auto const& c = copy_.param.conn;
        return {c.responder_resources, c.initiator_depth, c.flow_control, c.retry_count,
                c.rnr_retry_count,     c.srq != 0,        c.qp_num};
    }
    /// The datagram data (meaningful for UD `established` and `multicast_join`).
    [[nodiscard]] ud_data ud() const noexcept {
        auto const& u = copy_.param.ud;
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

    /// The librdmacm event as it came (a copy: the event itself was acknowledged when it was
    /// taken, so never pass it to rdma_ack_cm_event(3)), its private-data pointer aimed at this
    /// object's copy; valid as long as this object.
    [[nodiscard]] rdma_cm_event const& native() const noexcept { return copy_; }

private:
    void point_at_own_copy() noexcept {
        void const* const p = private_data_len_ != 0 ? private_data_.data() : nullptr;
        if (is_datagram()) {
            copy_.param.ud.private_data = p;
            copy_.param.ud.private_data_len = private_data_len_;
        } else {
            copy_.param.conn.private_data = p;
            copy_.param.conn.private_data_len = private_data_len_;
        }
    }

    rdma_cm_event copy_{};
    std::array<std::byte, 255> private_data_{};
    std::uint8_t private_data_len_ = 0;
    bool datagram_ = false;
};

/// An RDMA CM event channel (`rdma_event_channel`): the file descriptor the events of its ids
/// arrive on. Move-only; destroy it after its ids.
///
/// The descriptor is non-blocking from creation, so it can go into epoll/poll at once; `get()`
/// still blocks (it polls for readability), `try_get()` never does, and `get(timeout)` waits at
/// most the timeout and returns empty when it passed.
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

    /// The next event, waiting at most `timeout` (any `std::chrono` duration, rounded up to whole
    /// milliseconds; zero or less: a single `try_get()`); empty when none came in time — the
    /// timeout is this distinct outcome, never an exception. The bounded twin of `get()`.
    /// @throws sys_error when poll(2) or rdma_get_cm_event(3) fails.
    template <class Rep, class Period>
    [[nodiscard]] std::optional<event> get(std::chrono::duration<Rep, Period> timeout) {
        auto const ms = std::chrono::ceil<std::chrono::milliseconds>(timeout);
        return wait(ms.count() <= 0 ? std::chrono::milliseconds{0} : ms);
    }

    /// The next event; blocks until one arrives (`get(timeout)` is its bounded twin).
    /// @throws sys_error when poll(2) or rdma_get_cm_event(3) fails.
    [[nodiscard]] event get() { return *wait(std::chrono::milliseconds{-1}); }

    /// The librdmacm channel.
    [[nodiscard]] rdma_event_channel* native_handle() const noexcept { return handle_.get(); }

private:
    // Waits at most `timeout` (negative: forever) for the next event.
    std::optional<event> wait(std::chrono::milliseconds timeout) {
        auto const deadline = rdmacxx::detail::deadline_after(timeout); // saturates: max() waits for ever
        for (;;) {
            if (auto e = try_get()) return e;
            int wait_ms = -1;
            if (timeout.count() >= 0) {
                auto const left =
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
                if (left.count() <= 0) return std::nullopt;
                wait_ms = static_cast<int>(std::min<std::chrono::milliseconds::rep>(left.count(), 1 << 30)) + 1;
            }
            pollfd pfd{fd(), POLLIN, 0};
            if (::poll(&pfd, 1, wait_ms) < 0 && errno != EINTR) [[unlikely]]
                rdmacxx::detail::throw_errno("poll", "waiting on the CM event channel");
        }
    }

    std::unique_ptr<rdma_event_channel, rdmacxx::detail::cm_channel_deleter> handle_;
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
