#pragma once
/// @file
/// `qp_capabilities`, the sizes of a QP's queues, and the `adopt_qp` tag. The attributes of its
/// transitions are `qp_settings` (qp_settings.hpp).

#include "rdmacxx/detail/verbs.hpp"

#include <cstdint>
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

namespace detail {
/// The creation attributes of a QP of type `type` sized by `caps`, its completions on
/// `send_cq` and `recv_cq`, its receives from `srq` when not null (its own receive queue then
/// has no entries); every request signaled only when asked. For queue_pair and cm::id alike.
[[nodiscard]] inline ibv_qp_init_attr qp_init_attributes(ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq,
                                                         ibv_srq* srq, qp_capabilities const& caps) noexcept {
    ibv_qp_init_attr init{};
    init.send_cq = send_cq;
    init.recv_cq = recv_cq;
    init.srq = srq;
    init.cap.max_send_wr = caps.max_send_wr;
    init.cap.max_recv_wr = srq != nullptr ? 0 : caps.max_recv_wr;
    init.cap.max_send_sge = caps.max_send_sge;
    init.cap.max_recv_sge = caps.max_recv_sge;
    init.cap.max_inline_data = caps.max_inline_data;
    init.qp_type = type;
    init.sq_sig_all = 0;
    return init;
}

/// What the device gave: the capabilities in `init` after the QP was created.
[[nodiscard]] inline qp_capabilities granted(ibv_qp_init_attr const& init) noexcept {
    return {init.cap.max_send_wr, init.cap.max_recv_wr, init.cap.max_send_sge, init.cap.max_recv_sge,
            init.cap.max_inline_data};
}

/// "for a RC QP with max_send_wr 128, max_recv_wr 128, max_inline_data 0": what a failed
/// creation asked for.
[[nodiscard]] inline std::string describe_request(char const* transport, qp_capabilities const& caps) {
    // Appended one piece at a time: g++ 12 at -O2 without -g misreads the chain of operator+ on
    // a temporary as an out-of-bounds memcpy (-Warray-bounds).
    std::string what{"for a "};
    what += transport;
    what += " QP with max_send_wr " + std::to_string(caps.max_send_wr);
    what += ", max_recv_wr " + std::to_string(caps.max_recv_wr);
    what += ", max_inline_data " + std::to_string(caps.max_inline_data);
    return what;
}
} // namespace detail

} // namespace v0
} // namespace rdmacxx
