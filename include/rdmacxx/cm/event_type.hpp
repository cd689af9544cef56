#pragma once
/// @file
/// `cm::event_type`: the kinds of RDMA CM events, and their names.

#include "rdmacxx/detail/cm.hpp"

#include <cstdint>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// The type of an RDMA CM event, one enumerator per `RDMA_CM_EVENT_*` of rdma_get_cm_event(3),
/// with the same values.
/// @see rdma_get_cm_event(3), rdma_event_str(3)
enum class event_type : int {
    addr_resolved = RDMA_CM_EVENT_ADDR_RESOLVED,       ///< rdma_resolve_addr(3) succeeded
    addr_error = RDMA_CM_EVENT_ADDR_ERROR,             ///< rdma_resolve_addr(3) failed
    route_resolved = RDMA_CM_EVENT_ROUTE_RESOLVED,     ///< rdma_resolve_route(3) succeeded
    route_error = RDMA_CM_EVENT_ROUTE_ERROR,           ///< rdma_resolve_route(3) failed
    connect_request = RDMA_CM_EVENT_CONNECT_REQUEST,   ///< passive side: a peer asks to connect (new id)
    connect_response = RDMA_CM_EVENT_CONNECT_RESPONSE, ///< active side without a QP on its id: the peer accepted
    connect_error = RDMA_CM_EVENT_CONNECT_ERROR,       ///< establishing the connection failed
    unreachable = RDMA_CM_EVENT_UNREACHABLE,           ///< active side: the peer did not answer
    rejected = RDMA_CM_EVENT_REJECTED,                 ///< the peer (or its CM) rejected the request
    established = RDMA_CM_EVENT_ESTABLISHED,           ///< the connection (or UD lookup) is complete
    disconnected = RDMA_CM_EVENT_DISCONNECTED,         ///< the connection is gone
    device_removal = RDMA_CM_EVENT_DEVICE_REMOVAL,     ///< the id's device went away: destroy the id
    multicast_join = RDMA_CM_EVENT_MULTICAST_JOIN,     ///< rdma_join_multicast(3) succeeded
    multicast_error = RDMA_CM_EVENT_MULTICAST_ERROR,   ///< a join failed, or a joined group was lost
    addr_change = RDMA_CM_EVENT_ADDR_CHANGE,           ///< the id's network device changed its address
    timewait_exit = RDMA_CM_EVENT_TIMEWAIT_EXIT,       ///< the id's QP left timewait and may be reused
};

/// The `RDMA_CM_EVENT_*` name without its prefix, in lower case ("established"); "unknown" for
/// a value outside the enumeration. Constant time, no allocation.
[[nodiscard]] constexpr char const* to_string(event_type t) noexcept {
    switch (t) {
    case event_type::addr_resolved:
        return "addr_resolved";
    case event_type::addr_error:
        return "addr_error";
    case event_type::route_resolved:
        return "route_resolved";
    case event_type::route_error:
        return "route_error";
    case event_type::connect_request:
        return "connect_request";
    case event_type::connect_response:
        return "connect_response";
    case event_type::connect_error:
        return "connect_error";
    case event_type::unreachable:
        return "unreachable";
    case event_type::rejected:
        return "rejected";
    case event_type::established:
        return "established";
    case event_type::disconnected:
        return "disconnected";
    case event_type::device_removal:
        return "device_removal";
    case event_type::multicast_join:
        return "multicast_join";
    case event_type::multicast_error:
        return "multicast_error";
    case event_type::addr_change:
        return "addr_change";
    case event_type::timewait_exit:
        return "timewait_exit";
    }
    return "unknown";
}

/// True for the event types that report a failure (address, route, connect, unreachable,
/// rejected, multicast error, device removal).
[[nodiscard]] constexpr bool is_failure(event_type t) noexcept {
    switch (t) {
    case event_type::addr_error:
    case event_type::route_error:
    case event_type::connect_error:
    case event_type::unreachable:
    case event_type::rejected:
    case event_type::multicast_error:
    case event_type::device_removal:
        return true;
    default:
        return false;
    }
}

} // namespace cm
} // namespace v0
} // namespace rdmacxx
