#pragma once
/// @file
/// `connect_options`: the attributes of a QP's INIT, RTR and RTS transitions, with its timers in
/// time units (timeouts.hpp) and defaults chosen for production use; `qp_capabilities`, the sizes
/// of a QP's queues; the `adopt_qp` tag.

#include "rdmacxx/access.hpp"
#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/timeouts.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace rdmacxx {
inline namespace v0 {

/// Sizes of a QP's queues, asked for at creation; after creation `queue_pair::capabilities()`
/// holds what the device really gave (at least as much).
struct qp_capabilities {
    std::uint32_t max_send_wr = 128;   ///< outstanding send-queue requests
    std::uint32_t max_recv_wr = 128;   ///< outstanding receive-queue requests
    std::uint32_t max_send_sge = 1;    ///< scatter-gather entries per send request
    std::uint32_t max_recv_sge = 1;    ///< scatter-gather entries per receive request
    std::uint32_t max_inline_data = 0; ///< bytes a send request may carry inline
};

/// Tag of the `queue_pair` constructor that adopts a QP created elsewhere (by the RDMA CM).
struct adopt_qp_t {
    explicit adopt_qp_t() = default;
};
/// The `adopt_qp_t` tag value.
inline constexpr adopt_qp_t adopt_qp{};

/// Attributes of the INIT, RTR and RTS transitions (`queue_pair::connect`, `activate`). Each
/// says which side it governs. The defaults are what a production program would choose:
///
/// - nothing remote is granted unless asked (`remote_access`);
/// - a peer that died silently is detected on every provider: ACK timeout about 67 ms and 6
///   retries, so the sender's request completes with IBV_WC_RETRY_EXC_ERR after about
///   67.1 ms × 7 = 470 ms (`dead_peer_bound`); the same as the CM path's defaults
///   (`cm::connection_parameters`);
/// - a receiver that falls behind is waited for, but not forever: this QP's RNR NAKs ask the
///   peer to back off 1.28 ms (not the CM's 655 ms), and this QP retries RNR NAKs 6 times
///   (not the infinite 7) before its request completes with IBV_WC_RNR_RETRY_EXC_ERR;
/// - as many RDMA READs and atomics in flight as the device allows (`max_qp_init_rd_atom`,
///   `max_qp_rd_atom`), not 1.
///
/// @see ibv_modify_qp(3)
struct connect_options {
    /// What the **peer** may do to memory through this QP (RC, UC): `access::remote_write`,
    /// `remote_read`, `remote_atomic`. Granted only as asked: the default grants nothing, so a
    /// peer's RDMA WRITE, READ or atomic completes with a remote access error on its side.
    /// Asking for `remote_atomic` on a device whose `atomic_cap` is IBV_ATOMIC_NONE is refused.
    access remote_access = access::none;
    /// The largest path MTU; 0: the port's active MTU. `connect` uses the smaller of this and the
    /// remote endpoint's `path_mtu`, so both sides agree.
    ibv_mtu path_mtu = ibv_mtu{};
    std::uint16_t pkey_index = 0; ///< P_Key table index
    /// SL: the service level of the path (InfiniBand: the VL it maps to; RoCE: the 802.1p
    /// priority of the frames, where the device maps it). 0 … 15.
    std::uint8_t service_level = 0;
    std::uint8_t hop_limit = 64; ///< GRH hop limit
    /// GRH traffic class (RoCE: the IP header's DSCP and ECN bits, DSCP = traffic_class >> 2):
    /// the QoS class of every packet this QP sends. The RDMA CM derives it from the id's type of
    /// service (`cm::id::set_type_of_service`) instead.
    std::uint8_t traffic_class = 0;
    /// GRH flow label, 20 bits (0 … 0xFFFFF): packets of one flow stay on one path (RoCE v2: the
    /// kernel may derive the UDP source port from it). 0: none chosen. Over 20 bits, `connect`
    /// (`to_rtr`) throws argument_error before anything reaches the device.
    std::uint32_t flow_label = 0;
    /// This QP as a **sender** (RC): how long it waits for an ACK before retransmitting, rounded
    /// up to 4.096 µs × 2ⁿ (see `ack_timeout`); default `default_ack_timeout`: 67 ms → n = 14,
    /// 67.1 ms.
    rdmacxx::ack_timeout timeout = default_ack_timeout;
    /// This QP as a **sender** (RC): retransmissions after an ACK timeout (0 … 7) before the
    /// request completes with IBV_WC_RETRY_EXC_ERR. Default 6 (`default_retry_count`): 7 never
    /// runs out on rxe (see `max_retry_count`).
    std::uint8_t retry_count = default_retry_count;
    /// This QP as a **sender** (RC): retries after an RNR NAK (0 … 6, or `rnr_retry_infinite`, 7,
    /// forever) before the request completes with IBV_WC_RNR_RETRY_EXC_ERR. How long it waits
    /// between them is the *peer's* `min_rnr_timer`.
    std::uint8_t rnr_retry = 6;
    /// This QP as a **receiver** (RC): the back-off its RNR NAKs ask of the peer's sender, rounded
    /// up to the IB table (see `rnr_timer`); 1.28 ms.
    rdmacxx::rnr_timer min_rnr_timer = std::chrono::microseconds{1280};
    /// This QP as an **initiator** (RC): RDMA READs and atomics it may have outstanding; empty:
    /// the device's `max_qp_init_rd_atom`. Over that limit, `connect` throws argument_error.
    std::optional<std::uint8_t> max_rd_atomic{};
    /// This QP as a **target** (RC): RDMA READs and atomics from the peer it accepts
    /// outstanding; empty: the device's `max_qp_rd_atom`. Keep it at least the peer's
    /// `max_rd_atomic`. Over the device's limit, `connect` throws argument_error.
    std::optional<std::uint8_t> max_dest_rd_atomic{};
    std::uint32_t qkey = 0x11111111; ///< UD Q_Key
};

/// The largest GRH flow label: 20 bits.
inline constexpr std::uint32_t max_flow_label = 0xFFFFF;

namespace detail {
/// The device's limits (atomic_cap, max_qp_rd_atom, max_qp_init_rd_atom) through a QP's own verbs
/// context. @throws sys_error when ibv_query_device(3) fails.
[[nodiscard]] inline ibv_device_attr device_limits(ibv_context* ctx, char const* transport, std::uint32_t qpn) {
    ibv_device_attr dev{};
    if (int rc = ::ibv_query_device(ctx, &dev); rc != 0) [[unlikely]]
        throw_sys(rc, "ibv_query_device", std::string{"for "} + transport + " QP " + std::to_string(qpn));
    return dev;
}

/// The RD-atomic depth asked for, or the device's `limit` when none was.
/// @throws argument_error for one over the limit.
[[nodiscard]] inline std::uint8_t rd_atomic_depth(std::optional<std::uint8_t> asked, int limit, char const* field,
                                                  char const* limit_name, char const* transport, std::uint32_t qpn) {
    auto const max = static_cast<std::uint8_t>(std::clamp(limit, 0, 255));
    if (!asked) return max;
    if (*asked > max) [[unlikely]]
        throw_argument(std::string{field} + " " + std::to_string(*asked) + " is over the device's " + limit_name +
                       " of " + std::to_string(max) + " for " + transport + " QP " + std::to_string(qpn));
    return *asked;
}

/// @throws argument_error when `flow_label` is over 20 bits or `service_level` over 15; `what`
/// names the object it was meant for.
inline void check_qos(std::uint32_t flow_label, std::uint8_t service_level, std::string const& what) {
    if (flow_label > max_flow_label) [[unlikely]]
        throw_argument("flow label " + std::to_string(flow_label) + " for " + what +
                       " is over 20 bits (at most 1048575); nothing was changed");
    if (service_level > 15) [[unlikely]]
        throw_argument("service level " + std::to_string(service_level) + " for " + what +
                       " is over 15; nothing was changed");
}

/// The one range check of the transport and RNR retry counts, for both connection paths:
/// `rnr_name` is the field's name on the caller's path, `after` ends the message.
/// @throws argument_error when `retry_count` or the RNR retry count is over 7.
inline void check_retry_counts(std::uint8_t retry_count, std::uint8_t rnr_retry, char const* rnr_name,
                               char const* after = "") {
    if (retry_count > max_retry_count || rnr_retry > rnr_retry_infinite) [[unlikely]]
        throw_argument("retry_count " + std::to_string(retry_count) + " and " + rnr_name + " " +
                       std::to_string(rnr_retry) + " must each be 0 … 7" + after);
}

/// @throws argument_error when `retry_count` or `rnr_retry` is over 7.
inline void check_retry_counts(connect_options const& opt) {
    check_retry_counts(opt.retry_count, opt.rnr_retry, "rnr_retry");
}
} // namespace detail

} // namespace v0
} // namespace rdmacxx
