#pragma once
/// @file
/// `qp_capabilities`, the sizes of a QP's queues, and the `adopt_qp` tag. The attributes of its
/// transitions are `qp_settings` (qp_settings.hpp).

#include <cstdint>

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

} // namespace v0
} // namespace rdmacxx
