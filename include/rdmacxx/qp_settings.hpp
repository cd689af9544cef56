#pragma once
/// @file
/// `qp_settings`: the attributes of a connected or datagram QP's INIT, RTR and RTS transitions,
/// one value type for every path that brings a QP up (`queue_pair::connect` and `activate`, the
/// RDMA CM's flows, the peer group), with the InfiniBand specification's names, durations for
/// its timers (timeouts.hpp), the side each governs, defaults that detect a dead peer on every
/// provider, and one validator.

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

/// The default Q_Key of a UD QP: 0x01234567, the value the RDMA CM's UDP port space uses
/// (RDMA_UDP_QKEY), so that a UD QP brought up by `activate` and one the CM made agree.
inline constexpr std::uint32_t default_qkey = 0x01234567;

/// The largest GRH flow label: 20 bits.
inline constexpr std::uint32_t max_flow_label = 0xFFFFF;

/// The attributes of a QP's INIT, RTR and RTS transitions, named as the InfiniBand
/// specification names them; each says which side it governs. The same type, the same defaults
/// and the same checks on every path: `queue_pair::connect` / `activate` (verbs), the RDMA CM
/// (`cm::connect`, `connect_request::accept`, on the connection's own QP, on shared resources or
/// on a QP you made; `cm::connection_options::settings`) and the peer group
/// (`peer_group_options::settings`). docs/connection-options.md has them in one table.
///
/// The defaults are what a production program would choose:
///
/// - nothing remote is granted unless asked (`remote_access`);
/// - a peer that died silently is detected on every provider: local ACK timeout about 67 ms and
///   6 retries, so the sender's request completes with IBV_WC_RETRY_EXC_ERR after about
///   67.1 ms × 7 = 470 ms (`dead_peer_bound`);
/// - a receiver that falls behind is waited for, but not forever: this QP's RNR NAKs ask the
///   peer to back off 1.28 ms (not the CM's 655 ms), and this QP retries RNR NAKs 6 times (not
///   the infinite 7) before its request completes with IBV_WC_RNR_RETRY_EXC_ERR;
/// - as many RDMA READs and atomics in flight as the device allows, not 1;
/// - the path's own addressing: the fields of the path (`path_mtu`, `pkey_index`,
///   `service_level`, `hop_limit`, `traffic_class`, `flow_label`) are optional; empty, they are
///   what the path gives: on the verbs path the port's active MTU (no more than the remote
///   endpoint's), P_Key index 0, SL 0, hop limit 64, traffic class 0, no flow label; on the CM
///   path what the CM resolved (its route, the id's type of service). Set, they replace it.
///
/// A value type. `detail::validate` checks it against a device before anything reaches it.
/// @see ibv_modify_qp(3), rdma_init_qp_attr(3)
struct qp_settings {
    /// INIT, RC and UC: what the **peer** may do to memory through this QP
    /// (`qp_access_flags`): `access::remote_write`, `remote_read` (RC), `remote_atomic` (RC).
    /// Granted only as asked: the default grants nothing, so a peer's RDMA WRITE, READ or atomic
    /// completes with a remote access error on its side. Refused (argument_error) for atomics on
    /// a device whose `atomic_cap` is IBV_ATOMIC_NONE. UC has neither READ nor atomics: on a UC
    /// QP only `remote_write` is granted, the rest left out.
    access remote_access = access::none;
    /// INIT: the P_Key table index of the port; empty: the path's (verbs: 0).
    std::optional<std::uint16_t> pkey_index{};
    /// INIT, UD: the Q_Key this QP receives with (and that senders to it must use). Default
    /// `default_qkey`; the CM's UDP port space accepts only that value.
    std::uint32_t qkey = default_qkey;
    /// RTR, both directions: the largest path MTU; the smaller of this and the path's is used
    /// (verbs: the port's active MTU and the remote endpoint's `path_mtu`). Empty: the path's.
    std::optional<ibv_mtu> path_mtu{};
    /// RTR: SL, the service level of the path (InfiniBand: the VL it maps to; RoCE: the 802.1p
    /// priority of the frames, where the device maps it). 0 … 15; empty: the path's (verbs: 0).
    std::optional<std::uint8_t> service_level{};
    /// RTR: the GRH hop limit of every packet this QP sends; empty: the path's (verbs: 64).
    std::optional<std::uint8_t> hop_limit{};
    /// RTR: the GRH traffic class (RoCE: the IP header's DSCP and ECN bits, DSCP =
    /// traffic_class >> 2) of every packet this QP sends. Empty: the path's (verbs: 0; CM: the
    /// id's type of service, `cm::connection_options::type_of_service`).
    std::optional<std::uint8_t> traffic_class{};
    /// RTR: the GRH flow label, 20 bits (0 … 0xFFFFF): packets of one flow stay on one path
    /// (RoCE v2: the kernel may derive the UDP source port from it). Empty: the path's (verbs:
    /// none, 0).
    std::optional<std::uint32_t> flow_label{};
    /// RTR, RC, this QP as a **receiver**: the back-off its RNR NAKs ask of the peer's sender,
    /// rounded up to the IB table (see `rnr_timer`); default 1.28 ms.
    rdmacxx::rnr_timer min_rnr_timer = std::chrono::microseconds{1280};
    /// RTR, RC, this QP as a **responder** (target): RDMA READs and atomics from the peer it
    /// accepts outstanding (`max_dest_rd_atomic`); empty: the device's `max_qp_rd_atom` (the CM:
    /// no more than the peer's initiator depth). Keep it at least the peer's `initiator_depth`.
    std::optional<std::uint8_t> responder_resources{};
    /// RTS, RC, this QP as a **sender** (requester): how long it waits for an ACK before
    /// retransmitting, rounded up to 4.096 µs × 2ⁿ (see `ack_timeout`); default
    /// `default_ack_timeout`: 67 ms → n = 14, 67.1 ms.
    rdmacxx::ack_timeout local_ack_timeout = default_ack_timeout;
    /// RTS, RC, this QP as a **sender**: retransmissions after an ACK timeout (0 … 7) before the
    /// request completes with IBV_WC_RETRY_EXC_ERR. Default 6 (`default_retry_count`): 7 never
    /// runs out on rxe (see `max_retry_count`).
    std::uint8_t retry_count = default_retry_count;
    /// RTS, RC, this QP as a **sender**: retries after an RNR NAK (0 … 6, or
    /// `rnr_retry_infinite`, 7, forever) before the request completes with
    /// IBV_WC_RNR_RETRY_EXC_ERR. How long it waits between them is the *peer's* `min_rnr_timer`.
    std::uint8_t rnr_retry_count = 6;
    /// RTS, RC, this QP as an **initiator** (requester): RDMA READs and atomics it may have
    /// outstanding (`max_rd_atomic`); empty: the device's `max_qp_init_rd_atom` (the CM: no more
    /// than the peer's responder resources).
    std::optional<std::uint8_t> initiator_depth{};
};

namespace detail {
/// The device's limits (atomic_cap, max_qp_rd_atom, max_qp_init_rd_atom) of the verbs context
/// `ctx`; `what` names the object asked for in the error.
/// @throws sys_error when ibv_query_device(3) fails.
[[nodiscard]] inline ibv_device_attr query_device(ibv_context* ctx, std::string const& what) {
    ibv_device_attr dev{};
    if (int rc = ::ibv_query_device(ctx, &dev); rc != 0) [[unlikely]]
        throw_sys(rc, "ibv_query_device", "for " + what);
    return dev;
}

/// @throws argument_error when `flow_label` is over 20 bits or `service_level` over 15; `what`
///         names the object it was meant for. (`validate` and address handles use it.)
inline void check_qos(std::uint32_t flow_label, std::uint8_t service_level, std::string const& what,
                      char const* after = "; nothing was changed") {
    if (flow_label > max_flow_label) [[unlikely]]
        throw_argument("flow label " + std::to_string(flow_label) + " for " + what +
                       " is over 20 bits (at most 1048575)" + after);
    if (service_level > 15) [[unlikely]]
        throw_argument("service level " + std::to_string(service_level) + " for " + what + " is over 15" + after);
}

/// The one check of `qp_settings`, for every path: against the device `dev` of a QP of type
/// `type`; `what` names the QP or connection, `after` ends the message ("; nothing was sent").
/// @throws argument_error when the retry count or RNR retry count is over 7, the SL over 15, the
///         flow label over 20 bits, the initiator depth over the device's `max_qp_init_rd_atom`,
///         the responder resources over its `max_qp_rd_atom`, remote atomics asked of a device
///         without them (RC), or a path MTU that is not one of IBV_MTU_256 … IBV_MTU_4096.
inline void validate(qp_settings const& s, ibv_qp_type type, ibv_device_attr const& dev, std::string const& what,
                     char const* after = "; nothing was changed") {
    auto fail = [&](std::string const& why) { throw_argument(why + " for " + what + after); };
    if (s.retry_count > max_retry_count || s.rnr_retry_count > rnr_retry_infinite) [[unlikely]]
        fail("retry_count " + std::to_string(s.retry_count) + " and rnr_retry_count " +
             std::to_string(s.rnr_retry_count) + " must each be 0 … 7");
    check_qos(s.flow_label.value_or(0), s.service_level.value_or(0), what, after);
    if (s.path_mtu && (*s.path_mtu < IBV_MTU_256 || *s.path_mtu > IBV_MTU_4096)) [[unlikely]]
        fail("path MTU code " + std::to_string(static_cast<int>(*s.path_mtu)) +
             " is not an MTU (IBV_MTU_256 … IBV_MTU_4096; leave path_mtu empty for the path's)");
    if (s.initiator_depth && *s.initiator_depth > dev.max_qp_init_rd_atom) [[unlikely]]
        fail("initiator_depth " + std::to_string(*s.initiator_depth) + " is over the device's max_qp_init_rd_atom of " +
             std::to_string(dev.max_qp_init_rd_atom));
    if (s.responder_resources && *s.responder_resources > dev.max_qp_rd_atom) [[unlikely]]
        fail("responder_resources " + std::to_string(*s.responder_resources) +
             " is over the device's max_qp_rd_atom of " + std::to_string(dev.max_qp_rd_atom));
    if (type != IBV_QPT_UC && has(s.remote_access, access::remote_atomic) && dev.atomic_cap == IBV_ATOMIC_NONE)
        [[unlikely]]
        fail("cannot grant remote atomics: the device's atomic_cap is IBV_ATOMIC_NONE");
}

/// Writes what `s` sets into `attr`, the attributes of the transition to `attr.qp_state` (INIT,
/// RTR or RTS) of a QP of type `type` on the device `dev`, over what the path gave (the verbs
/// path's own attributes, or the CM's from rdma_init_qp_attr(3)), and adds the fields to
/// `mask`. The RD-atomic depths left empty become the path's, no more than the device's
/// limits. On UC, RC's fields are taken out of the mask and READ and atomic access out of the
/// flags (the CM's TCP port space gives RC's). `s` has passed `validate`.
inline void apply(qp_settings const& s, ibv_qp_type type, ibv_device_attr const& dev, ibv_qp_attr& attr,
                  int& mask) noexcept {
    bool const rc = type == IBV_QPT_RC;
    switch (attr.qp_state) {
    case IBV_QPS_INIT:
        if (s.pkey_index) {
            attr.pkey_index = *s.pkey_index;
            mask |= IBV_QP_PKEY_INDEX;
        }
        if (type == IBV_QPT_UD) {
            attr.qkey = s.qkey;
            mask |= IBV_QP_QKEY;
        } else {
            attr.qp_access_flags = static_cast<unsigned>(to_native(s.remote_access));
            mask |= IBV_QP_ACCESS_FLAGS;
        }
        break;
    case IBV_QPS_RTR:
        if (s.path_mtu && (attr.path_mtu == ibv_mtu{} || *s.path_mtu < attr.path_mtu)) attr.path_mtu = *s.path_mtu;
        if (s.service_level) attr.ah_attr.sl = *s.service_level;
        if (attr.ah_attr.is_global != 0) {
            if (s.hop_limit) attr.ah_attr.grh.hop_limit = *s.hop_limit;
            if (s.traffic_class) attr.ah_attr.grh.traffic_class = *s.traffic_class;
            if (s.flow_label) attr.ah_attr.grh.flow_label = *s.flow_label;
        }
        if (rc) {
            auto const limit = static_cast<std::uint8_t>(std::clamp(dev.max_qp_rd_atom, 0, 255));
            attr.max_dest_rd_atomic = s.responder_resources.value_or(std::min(attr.max_dest_rd_atomic, limit));
            attr.min_rnr_timer = s.min_rnr_timer.code();
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        break;
    case IBV_QPS_RTS:
        if (rc) {
            auto const limit = static_cast<std::uint8_t>(std::clamp(dev.max_qp_init_rd_atom, 0, 255));
            attr.max_rd_atomic = s.initiator_depth.value_or(std::min(attr.max_rd_atomic, limit));
            attr.timeout = s.local_ack_timeout.code();
            attr.retry_cnt = s.retry_count;
            attr.rnr_retry = s.rnr_retry_count;
            mask |= IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
        }
        break;
    default:
        break;
    }
    if (type == IBV_QPT_UC) {
        mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                  IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER);
        attr.qp_access_flags &= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    }
}
} // namespace detail

} // namespace v0
} // namespace rdmacxx
