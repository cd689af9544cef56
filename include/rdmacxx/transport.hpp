#pragma once
/// @file
/// Transport policies: `rc`, `uc`, `ud` — each a tag with its QP type, the attribute masks of its
/// state transitions and its operation set (the `ibv_qp_create_send_ops_flags` its QPs announce);
/// and `transport_set`, the set of transports an operation is legal on (each work-request type
/// carries one, see wr.hpp).

#include "rdmacxx/detail/verbs.hpp"

#include <concepts>
#include <cstdint>

namespace rdmacxx {
inline namespace v0 {

/// A set of transports, by QP type: what a work-request type names as the transports it may be
/// posted on (`write::transports == transport_set::of<rc, uc>()`). A literal type: tested at
/// compile time.
struct transport_set {
    std::uint32_t bits = 0; ///< bit `1 << qp_type` for each member

    /// The set of the transports `Ts…`.
    template <class... Ts>
    [[nodiscard]] static constexpr transport_set of() noexcept {
        return {(std::uint32_t{0} | ... | (std::uint32_t{1} << Ts::qp_type))};
    }
    /// True when transport `T` is in the set.
    template <class T>
    [[nodiscard]] constexpr bool has() const noexcept {
        return (bits & (std::uint32_t{1} << T::qp_type)) != 0;
    }
    /// True when both sets have the same members.
    friend constexpr bool operator==(transport_set, transport_set) noexcept = default;
};

/// Reliable Connected: every operation; acknowledged, retried, in order.
struct rc {
    static constexpr ibv_qp_type qp_type = IBV_QPT_RC; ///< the QP type ibv_create_qp(3) gets
    static constexpr char const* name = "RC";          ///< for messages
    static constexpr bool connected = true;            ///< RTR names a remote QP
    /// Operation set: what an `extended_post` QP announces to ibv_create_qp_ex(3).
    static constexpr std::uint64_t send_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                              IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                              IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                              IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |
                                              IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
    /// Attributes of RESET → INIT.
    static constexpr int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    /// Attributes of INIT → RTR.
    static constexpr int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    /// Attributes of RTR → RTS.
    static constexpr int rts_mask =
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
};

/// Unreliable Connected: send, send-with-immediate, RDMA write, write-with-immediate; no
/// acknowledgements, a lost packet drops its message.
struct uc {
    static constexpr ibv_qp_type qp_type = IBV_QPT_UC; ///< the QP type ibv_create_qp(3) gets
    static constexpr char const* name = "UC";          ///< for messages
    static constexpr bool connected = true;            ///< RTR names a remote QP
    /// Operation set: what an `extended_post` QP announces to ibv_create_qp_ex(3).
    static constexpr std::uint64_t send_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                              IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    /// Attributes of RESET → INIT.
    static constexpr int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    /// Attributes of INIT → RTR.
    static constexpr int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    /// Attributes of RTR → RTS.
    static constexpr int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
};

/// Unreliable Datagram: send and send-with-immediate only, each addressed by an address handle,
/// remote QPN and Q_Key, at most one path MTU long; every receive buffer starts with a 40-byte
/// GRH.
struct ud {
    static constexpr ibv_qp_type qp_type = IBV_QPT_UD; ///< the QP type ibv_create_qp(3) gets
    static constexpr char const* name = "UD";          ///< for messages
    static constexpr bool connected = false;           ///< RTR names no remote QP
    /// Operation set: what an `extended_post` QP announces to ibv_create_qp_ex(3).
    static constexpr std::uint64_t send_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    /// Attributes of RESET → INIT.
    static constexpr int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    /// Attributes of INIT → RTR.
    static constexpr int rtr_mask = IBV_QP_STATE;
    /// Attributes of RTR → RTS.
    static constexpr int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    /// Bytes of Global Route Header in front of every UD receive.
    static constexpr unsigned grh_bytes = 40;
};

/// A transport policy: `rc`, `uc`, `ud`, or one of the user's with the same members (QP type,
/// whether RTR names a remote QP, operation set, the three transition masks).
template <class T>
concept transport = requires {
    { T::qp_type } -> std::convertible_to<ibv_qp_type>;
    { T::name } -> std::convertible_to<char const*>;
    { T::connected } -> std::convertible_to<bool>;
    { T::send_ops } -> std::convertible_to<std::uint64_t>;
    { T::init_mask } -> std::convertible_to<int>;
    { T::rtr_mask } -> std::convertible_to<int>;
    { T::rts_mask } -> std::convertible_to<int>;
};

} // namespace v0
} // namespace rdmacxx
