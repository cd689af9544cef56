#pragma once
/// @file
/// Post policies of `queue_pair`: `legacy_post` (ibv_post_send(3) chains, the default) and
/// `extended_post` (the ibv_wr_* API: ibv_wr_start(3), ibv_wr_send(3) & co., ibv_wr_complete(3)).

#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"

#include <arpa/inet.h>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>

namespace rdmacxx {
inline namespace v0 {

/// Post policy: requests are built as `ibv_send_wr` chains and posted with ibv_post_send(3).
/// Works on every device; `wr_error::bad_index()` names the refused request.
struct legacy_post {
    static constexpr bool extended = false;
};

/// Post policy: requests are written with the extended API between ibv_wr_start(3) and
/// ibv_wr_complete(3), straight into the send queue without an intermediate `ibv_send_wr`. The
/// QP is created with ibv_create_qp_ex(3) announcing the operations its transport allows; a
/// device without the API refuses that with a `sys_error` naming it. A batch that
/// ibv_wr_complete(3) refuses is dropped whole (`wr_error::bad_index()` is 0, nothing posted).
/// Known provider limit: rdma-core 44's rxe computes the length of a multi-entry
/// ibv_wr_set_sge_list(3) or ibv_wr_set_inline_data_list(3) wrongly (fixed upstream later); requests
/// of one span, which use ibv_wr_set_sge(3) / ibv_wr_set_inline_data(3), are right everywhere.
struct extended_post {
    static constexpr bool extended = true;
};

/// A post policy: `legacy_post` or `extended_post`.
template <class P>
concept post_policy = requires {
    { P::extended } -> std::convertible_to<bool>;
};

namespace detail {

/// The `ibv_qp_create_send_ops_flags` a transport's operations need.
template <class Transport>
constexpr std::uint64_t send_ops_for() noexcept {
    std::uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    if constexpr (Transport::allows_write) ops |= IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    if constexpr (Transport::allows_read) ops |= IBV_QP_EX_WITH_RDMA_READ;
    if constexpr (Transport::allows_atomic)
        ops |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    return ops;
}

/// Writes one typed request with the extended API (between ibv_wr_start and ibv_wr_complete),
/// its completion to carry `wr_id`.
template <class Transport, class W>
void write_extended(ibv_qp_ex* qpx, W const& w, std::uint64_t wr_id) noexcept {
    qpx->wr_id = wr_id;
    qpx->wr_flags = w.flags();
    constexpr ibv_wr_opcode op = W::opcode;
    if constexpr (op == IBV_WR_SEND)
        ::ibv_wr_send(qpx);
    else if constexpr (op == IBV_WR_SEND_WITH_IMM)
        ::ibv_wr_send_imm(qpx, htonl(w.imm()));
    else if constexpr (op == IBV_WR_RDMA_WRITE)
        ::ibv_wr_rdma_write(qpx, w.rkey(), w.remote_address());
    else if constexpr (op == IBV_WR_RDMA_WRITE_WITH_IMM)
        ::ibv_wr_rdma_write_imm(qpx, w.rkey(), w.remote_address(), htonl(w.imm()));
    else if constexpr (op == IBV_WR_RDMA_READ)
        ::ibv_wr_rdma_read(qpx, w.rkey(), w.remote_address());
    else if constexpr (op == IBV_WR_ATOMIC_CMP_AND_SWP)
        ::ibv_wr_atomic_cmp_swp(qpx, w.rkey(), w.remote_address(), w.compare(), w.swap());
    else if constexpr (op == IBV_WR_ATOMIC_FETCH_AND_ADD)
        ::ibv_wr_atomic_fetch_add(qpx, w.rkey(), w.remote_address(), w.add());
    if constexpr (Transport::qp_type == IBV_QPT_UD)
        ::ibv_wr_set_ud_addr(qpx, w.destination().ah, w.destination().remote_qpn, w.destination().remote_qkey);
    auto const sges = w.sges();
    if constexpr (W::sge_count == 1) { // the single-entry calls: cheaper, and right on every provider
        if ((w.flags() & IBV_SEND_INLINE) != 0)
            ::ibv_wr_set_inline_data(qpx, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sges[0].addr)),
                                     sges[0].length);
        else
            ::ibv_wr_set_sge(qpx, sges[0].lkey, sges[0].addr, sges[0].length);
    } else if ((w.flags() & IBV_SEND_INLINE) != 0) {
        std::array<ibv_data_buf, W::sge_count> bufs;
        for (std::size_t i = 0; i < W::sge_count; ++i)
            bufs[i] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(sges[i].addr)), sges[i].length};
        ::ibv_wr_set_inline_data_list(qpx, W::sge_count, bufs.data());
    } else {
        ::ibv_wr_set_sge_list(qpx, W::sge_count, sges.data());
    }
}

} // namespace detail
} // namespace v0
} // namespace rdmacxx
