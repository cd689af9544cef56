#pragma once
/// @file
/// The RDMA CM's errors, below `rdmacxx::error`: `cm::cm_error` and its kinds — address error,
/// route error (and its own type for "no route": `route_not_found_error`), unreachable,
/// rejected, connect error, timeout — each carrying the event type, the event's status, the
/// reject reason and the peer's private data.

#include "rdmacxx/cm/event_type.hpp"
#include "rdmacxx/error.hpp"

#include <cerrno>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// The name of an InfiniBand CM reject reason (the status of a `rejected` event on IB and
/// RoCE; IBTA 12.6.7.2, table 112), e.g. 8 → "invalid service ID", 28 → "consumer defined".
/// "reject reason N" for a value the table does not name. Constant time, no allocation.
[[nodiscard]] constexpr char const* reject_reason_name(int reason) noexcept {
    switch (reason) {
    case 1:
        return "no QP available";
    case 2:
        return "no EE context available";
    case 3:
        return "no resources available";
    case 4:
        return "timeout";
    case 5:
        return "unsupported request";
    case 6:
        return "invalid communication ID";
    case 7:
        return "invalid communication instance";
    case 8:
        return "invalid service ID";
    case 9:
        return "invalid transport service type";
    case 10:
        return "stale connection";
    case 11:
        return "RDC does not exist";
    case 12:
        return "invalid GID";
    case 13:
        return "invalid LID";
    case 14:
        return "invalid SL";
    case 15:
        return "invalid traffic class";
    case 16:
        return "invalid hop limit";
    case 17:
        return "invalid packet rate";
    case 24:
        return "port CM redirect";
    case 25:
        return "port redirect";
    case 26:
        return "invalid MTU";
    case 27:
        return "insufficient responder resources";
    case 28:
        return "consumer defined";
    case 29:
        return "invalid RNR retry";
    case 30:
        return "duplicate local communication ID";
    case 31:
        return "invalid class version";
    case 32:
        return "invalid flow label";
    case 33:
        return "invalid alternate flow label";
    default:
        return nullptr;
    }
}

/// The error category of CM reject reasons: `value` is the status of a `rejected` event,
/// `message()` its name (`reject_reason_name`). Thread-safety: immutable, shared.
[[nodiscard]] inline std::error_category const& reject_category() noexcept {
    struct category final : std::error_category {
        [[nodiscard]] char const* name() const noexcept override { return "rdmacxx.cm_reject"; }
        [[nodiscard]] std::string message(int value) const override {
            char const* n = reject_reason_name(value);
            return n != nullptr ? std::string{n} : "reject reason " + std::to_string(value);
        }
    };
    static category const instance;
    return instance;
}

/// The error code of a failed CM event: a negative status is `-errno` (`std::system_category()`),
/// the status of `rejected` is a reject reason (`reject_category()`), other positive values are
/// transport-specific (kept in `std::system_category()`), and 0 becomes `fallback`.
[[nodiscard]] inline std::error_code make_cm_error_code(std::optional<event_type> type, int status,
                                                        int fallback = EIO) noexcept {
    if (type == event_type::rejected && status > 0) return {status, reject_category()};
    if (status < 0) return {-status, std::system_category()};
    if (status > 0) return {status, std::system_category()};
    return {fallback, std::system_category()};
}

/// Root of the CM's errors (python-rdma's CM error layer): an event that reported a failure, an
/// expected event that did not come in time, or a CM call that failed with an errno that means
/// the same thing (e.g. rdma_resolve_addr(3) failing at once with ENETUNREACH).
///
/// Holds the event type (empty when the failure was synchronous), the event's raw status, and
/// a copy of the private data the peer sent with it (the whole buffer the CM delivered, zero
/// padded past what the peer wrote).
/// Thread-safety: as any exception object.
class cm_error : public rdmacxx::error {
public:
    /// @param type          the event that reported it, or empty for a synchronous failure
    /// @param status        the event's status (`-errno`, or a reject reason for `rejected`)
    /// @param message       what rdmacxx was doing, e.g. "connecting to 198.18.0.1:7471"
    /// @param private_data  the peer's private data, copied
    /// @param fallback      the errno used when `status` is 0
    cm_error(std::optional<event_type> type, int status, std::string message, std::vector<std::byte> private_data = {},
             int fallback = EIO)
        : rdmacxx::error(make_cm_error_code(type, status, fallback),
                         (type ? std::string{to_string(*type)} + " event " : std::string{}) + std::move(message)),
          type_(type), status_(status), private_data_(std::move(private_data)) {}

    /// The event type that reported the failure; empty when a call failed synchronously.
    [[nodiscard]] std::optional<event_type> event() const noexcept { return type_; }
    /// The event's raw status: `-errno`, a reject reason, or 0.
    [[nodiscard]] int status() const noexcept { return status_; }
    /// The private data the peer sent with the event (empty when none).
    [[nodiscard]] std::span<std::byte const> private_data() const noexcept { return private_data_; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "event: " << (type_ ? to_string(*type_) : "none (synchronous)") << '\n'
           << lead << "status: " << status_ << '\n'
           << lead << "private_data_len: " << private_data_.size() << '\n';
    }

private:
    std::optional<event_type> type_;
    int status_;
    std::vector<std::byte> private_data_;
};

/// Address resolution failed (`addr_error`, or rdma_resolve_addr(3) / rdma_bind_addr(3)
/// refusing the address): no local RDMA device reaches it, or its neighbour did not answer.
class address_error : public cm_error {
public:
    using cm_error::cm_error;
};

/// Route resolution failed (`route_error`).
class route_error : public cm_error {
public:
    using cm_error::cm_error;
};

/// No route to the destination exists (the analogue of python-rdma's `SAPathNotFoundError`):
/// the routing table has none (ENETUNREACH, EHOSTUNREACH) or the path query found none.
class route_not_found_error : public route_error {
public:
    using route_error::route_error;
};

/// The peer did not answer the connection request (`unreachable`): nobody there, or its CM
/// timed out.
class unreachable_error : public cm_error {
public:
    using cm_error::cm_error;
};

/// The peer rejected the request (`rejected`): no listener on the port (reason 8, "invalid
/// service ID", on IB and RoCE), or the server called reject, maybe with private data.
class rejected_error : public cm_error {
public:
    using cm_error::cm_error;
    /// The transport's reject reason (the event status), e.g. 28 for a consumer reject.
    [[nodiscard]] int reason() const noexcept { return status(); }
    /// True when the peer's application rejected (reason 28, "consumer defined"), so the
    /// private data is the application's.
    [[nodiscard]] bool by_consumer() const noexcept { return status() == 28; }
};

/// Establishing the connection failed after it was accepted (`connect_error`).
class connect_error : public cm_error {
public:
    using cm_error::cm_error;
};

/// The step of a CM flow that a `timeout_error` names: which wait ran out.
enum class step {
    other,           ///< a wait of no named step (e.g. `listener::get_request`)
    resolve_address, ///< rdma_resolve_addr(3) until `addr_resolved`
    resolve_route,   ///< rdma_resolve_route(3) until `route_resolved`
    connect,         ///< rdma_connect(3) until `established` (or the connect response)
    accept,          ///< rdma_accept(3) until `established`
    disconnect,      ///< rdma_disconnect(3) until `disconnected`
    join,            ///< rdma_join_multicast(3) until `multicast_join`
};

/// "resolve address", "resolve route", "connect", "accept", "disconnect", "join", "other".
[[nodiscard]] constexpr char const* to_string(step s) noexcept {
    switch (s) {
    case step::resolve_address:
        return "resolve address";
    case step::resolve_route:
        return "resolve route";
    case step::connect:
        return "connect";
    case step::accept:
        return "accept";
    case step::disconnect:
        return "disconnect";
    case step::join:
        return "join";
    case step::other:
        break;
    }
    return "other";
}

/// The expected event did not arrive within its timeout, or the CM itself gave up on the step
/// with ETIMEDOUT. Its code is ETIMEDOUT; `step()` names the step whose timeout ran out.
class timeout_error : public cm_error {
public:
    /// @param message what rdmacxx was waiting for, with the timeout
    explicit timeout_error(std::string message) : cm_error(std::nullopt, -ETIMEDOUT, std::move(message)) {}
    /// @param s the step whose timeout ran out
    /// @param message what rdmacxx was waiting for, with the timeout
    timeout_error(cm::step s, std::string message)
        : cm_error(std::nullopt, -ETIMEDOUT, std::string{to_string(s)} + " timed out: " + std::move(message)),
          step_(s) {}
    /// The step whose timeout ran out (`step::other` for a wait of no named step).
    [[nodiscard]] cm::step step() const noexcept { return step_; }

private:
    cm::step step_ = cm::step::other;
};

/// The device of an id went away (`device_removal`).
class device_removed_error : public cm_error {
public:
    using cm_error::cm_error;
};

/// A multicast group could not be joined, or was lost (`multicast_error`).
class multicast_error : public cm_error {
public:
    using cm_error::cm_error;
};

} // namespace cm

namespace detail {
/// Throws the `cm_error` subclass matching a failure event `type` with `status` and the
/// peer's private data; `what` says what rdmacxx was doing.
[[noreturn]] RDMACXX_COLD inline void throw_cm_event(cm::event_type type, int status, std::string what,
                                                     std::vector<std::byte> private_data = {}) {
    switch (type) {
    case cm::event_type::addr_error:
        if (status == -ENETUNREACH || status == -EHOSTUNREACH)
            throw cm::route_not_found_error(type, status, std::move(what), std::move(private_data));
        throw cm::address_error(type, status, std::move(what), std::move(private_data));
    case cm::event_type::route_error:
        if (status == -ENETUNREACH || status == -EHOSTUNREACH || status == -ENODATA)
            throw cm::route_not_found_error(type, status, std::move(what), std::move(private_data));
        throw cm::route_error(type, status, std::move(what), std::move(private_data));
    case cm::event_type::unreachable:
        throw cm::unreachable_error(type, status, std::move(what), std::move(private_data));
    case cm::event_type::rejected:
        throw cm::rejected_error(type, status, std::move(what), std::move(private_data));
    case cm::event_type::connect_error:
        throw cm::connect_error(type, status, std::move(what), std::move(private_data));
    case cm::event_type::device_removal:
        throw cm::device_removed_error(type, status, std::move(what), std::move(private_data), ENODEV);
    case cm::event_type::multicast_error:
        throw cm::multicast_error(type, status, std::move(what), std::move(private_data));
    default:
        throw cm::cm_error(type, status, "unexpected while " + what, std::move(private_data), EPROTO);
    }
}

/// Throws for a librdmacm call that returned `rc` (-1 + errno, or -errno): an address error
/// (or `cm::route_not_found_error` for ENETUNREACH / EHOSTUNREACH) for the address calls, otherwise
/// `sys_error` naming the call.
[[noreturn]] RDMACXX_COLD inline void throw_cm_call(int rc, char const* call, std::string what,
                                                    bool address_call = false) {
    int const err = cm_errno(rc);
    if (address_call) {
        if (err == ENETUNREACH || err == EHOSTUNREACH)
            throw cm::route_not_found_error(std::nullopt, -err, std::string{call} + " failed " + what);
        if (err == EADDRNOTAVAIL || err == ENODEV || err == EADDRINUSE || err == EAFNOSUPPORT)
            throw cm::address_error(std::nullopt, -err, std::string{call} + " failed " + what);
    }
    throw sys_error(err, call, std::move(what));
}
} // namespace detail
} // namespace v0
} // namespace rdmacxx
