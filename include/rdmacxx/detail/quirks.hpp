#pragma once
/// @file
/// Internals: the provider quirks rdmacxx works around, in one place. Each has a name here, with
/// the device and the rdma-core and kernel versions where it was seen; the public headers refer
/// to these names, and docs/devices.md ("Provider quirks") has a line for each. Known and not
/// worked around (documented only): rxe in rdma-core 44 computes the length of a multi-entry
/// ibv_wr_set_sge_list(3) / ibv_wr_set_inline_data_list(3) wrongly (see `extended_post`); its
/// connection manager, after a DREQ sent while the link was down, may answer nothing more for
/// that connection (the CM's waits are bounded; a dead link then shows in the traffic).

#include "rdmacxx/detail/verbs.hpp"

#include <cstdint>

namespace rdmacxx {
inline namespace v0 {
namespace detail::quirks {

/// The vendor ID that rxe (Soft-RoCE) reports in `ibv_device_attr::vendor_id`: how the quirks
/// below that need a test at run time recognise it.
inline constexpr std::uint32_t rxe_vendor_id = 0xffffff;

/// rxe, rdma-core 44 … 54 (seen with Linux 6.1, Debian 12): after ibv_next_poll(3) finds the CQ
/// empty, the ibv_end_poll(3) that the manual asks for overruns the CQ's consumer index (fixed
/// by rdma-core b78b414, "rxe: fix completion queue consumer index overrun"). False for such a
/// device: an extended CQ there takes one completion per batch (ibv_start_poll, ibv_end_poll)
/// and never calls ibv_next_poll.
[[nodiscard]] constexpr bool batches_extended_polls(std::uint32_t vendor_id) noexcept {
    return vendor_id != rxe_vendor_id;
}

/// rxe, rdma-core 44 / Linux 6.1: a transport retry count (`retry_cnt`) of 7 never runs out (its
/// completer skips the decrement when the count is 7, `rxe_comp.c`), so a sender whose peer died
/// silently retransmits for ever; the InfiniBand specification makes 7 a count of seven.
inline constexpr std::uint8_t rxe_endless_retry_count = 7;
/// The largest transport retry count that is finite on every provider: 6, the default of both
/// connection paths.
inline constexpr std::uint8_t largest_finite_retry_count = rxe_endless_retry_count - 1;

/// rxe, Linux 6.1: the receive completion of a SEND with invalidate carries the kernel's
/// IB_WC_WITH_INVALIDATE bit (1 << 2) in `wc_flags`, not the verbs ABI's IBV_WC_WITH_INV
/// (1 << 3); it reads as IBV_WC_IP_CSUM_OK. Its `invalidated_rkey` is right.
inline constexpr unsigned rxe_with_inv_flag = IBV_WC_IP_CSUM_OK;
/// The `wc_flags` bits by which a receive completion on a device of `vendor_id` says that a
/// SEND with invalidate revoked `invalidated_rkey`.
[[nodiscard]] constexpr unsigned with_inv_flags(std::uint32_t vendor_id) noexcept {
    constexpr unsigned with_inv = IBV_WC_WITH_INV;
    return vendor_id == rxe_vendor_id ? with_inv | rxe_with_inv_flag : with_inv;
}

/// rxe, rdma-core 44: copies `imm_data` and `qp_type.xrc.remote_srqn` of every request into its
/// WQE, whatever the opcode: they are written (0 where the operation has none), so that no
/// uninitialised byte is read. The `_imm` requests overwrite `imm_data` afterwards.
inline void zero_copied_fields(ibv_send_wr& wr) noexcept {
    wr.imm_data = 0;
    wr.qp_type.xrc.remote_srqn = 0;
}

/// rxe, rdma-core 44: reads `wr.rdma.remote_addr` and `rkey` (the bytes of `wr.ud`'s address on
/// UD) into its WQE for every opcode: a request with no remote address on a connected transport
/// has them zeroed.
inline void zero_remote_address(ibv_send_wr& wr) noexcept {
    wr.wr.rdma.remote_addr = 0;
    wr.wr.rdma.rkey = 0;
}

/// rxe with the MAD layer of Linux 6.1 (Debian 12): the reply to a MAD sent over RoCE v2 over
/// IPv4 (from an IPv4-mapped GID) is dropped by the kernel, which matches a reply by the GID it
/// reads in the received packet's GRH slot, where rxe has put the IPv4 header; the request
/// arrives and is answered. `mad::port::source_gid_for` sends to a link-local GID from a
/// link-local one; a call that used an IPv4-mapped GID adds this text to its timeout error.
inline constexpr char const* mad_ipv4_reply_dropped =
    "an IPv4-mapped GID: Linux 6.1's MAD layer drops the replies to MADs sent over RoCE v2 over IPv4; "
    "address the peer by its link-local GID";

} // namespace detail::quirks
} // namespace v0
} // namespace rdmacxx
