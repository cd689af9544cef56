#pragma once
/// @file
/// Transport policies: `rc`, `uc`, `ud` — the QP type, the operations it allows, and the
/// attribute masks of its state transitions.

#include "rdmacxx/detail/verbs.hpp"

#include <concepts>

namespace rdmacxx {
inline namespace v0 {

/// Reliable Connected: every operation; acknowledged, retried, in order.
struct rc {
    static constexpr ibv_qp_type qp_type = IBV_QPT_RC;
    static constexpr char const* name = "RC";
    static constexpr bool connected = true;
    static constexpr bool allows_write = true;
    static constexpr bool allows_read = true;
    static constexpr bool allows_atomic = true;
    static constexpr int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    static constexpr int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    static constexpr int rts_mask =
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
};

/// Unreliable Connected: send, send-with-immediate, RDMA write, write-with-immediate; no
/// acknowledgements, a lost packet drops its message.
struct uc {
    static constexpr ibv_qp_type qp_type = IBV_QPT_UC;
    static constexpr char const* name = "UC";
    static constexpr bool connected = true;
    static constexpr bool allows_write = true;
    static constexpr bool allows_read = false;
    static constexpr bool allows_atomic = false;
    static constexpr int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    static constexpr int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    static constexpr int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
};

/// Unreliable Datagram: send and send-with-immediate only, each addressed by an address handle,
/// remote QPN and Q_Key, at most one path MTU long; every receive buffer starts with a 40-byte
/// GRH.
struct ud {
    static constexpr ibv_qp_type qp_type = IBV_QPT_UD;
    static constexpr char const* name = "UD";
    static constexpr bool connected = false;
    static constexpr bool allows_write = false;
    static constexpr bool allows_read = false;
    static constexpr bool allows_atomic = false;
    static constexpr int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    static constexpr int rtr_mask = IBV_QP_STATE;
    static constexpr int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    /// Bytes of Global Route Header in front of every UD receive.
    static constexpr unsigned grh_bytes = 40;
};

/// A transport policy: `rc`, `uc`, `ud`.
template <class T>
concept transport = requires {
    { T::qp_type } -> std::convertible_to<ibv_qp_type>;
    { T::connected } -> std::convertible_to<bool>;
    { T::allows_write } -> std::convertible_to<bool>;
    { T::allows_read } -> std::convertible_to<bool>;
    { T::allows_atomic } -> std::convertible_to<bool>;
    { T::init_mask } -> std::convertible_to<int>;
    { T::rtr_mask } -> std::convertible_to<int>;
    { T::rts_mask } -> std::convertible_to<int>;
};

} // namespace v0
} // namespace rdmacxx
