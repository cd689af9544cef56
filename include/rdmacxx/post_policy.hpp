#pragma once
/// @file
/// Post policies of `queue_pair`: `legacy_post` (ibv_post_send(3) chains, the default) and
/// `extended_post` (the ibv_wr_* API: ibv_wr_start(3), ibv_wr_send(3) & co., ibv_wr_complete(3)).

#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"

#include <concepts>
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
/// Known provider limit (detail/quirks.hpp): rdma-core 44's rxe computes the length of a
/// multi-entry ibv_wr_set_sge_list(3) or ibv_wr_set_inline_data_list(3) wrongly (fixed upstream
/// later); requests of one span, which use ibv_wr_set_sge(3) / ibv_wr_set_inline_data(3), are right
/// everywhere.
struct extended_post {
    static constexpr bool extended = true;
};

/// A post policy: `legacy_post` or `extended_post`.
template <class P>
concept post_policy = requires {
    { P::extended } -> std::convertible_to<bool>;
};

namespace detail {

/// The memory-window operations (bind, local invalidate, SEND with invalidate): an extended QP
/// announces them when its transport has them, unless the device refuses them at creation.
inline constexpr std::uint64_t window_send_ops =
    IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;

/// The `ibv_qp_create_send_ops_flags` a transport's QPs announce: its operation set.
template <class Transport>
constexpr std::uint64_t send_ops_for() noexcept {
    return Transport::send_ops;
}

/// Writes one typed request with the extended API (between ibv_wr_start and ibv_wr_complete),
/// its completion to carry `wr_id`: the request's own `build<Transport>(ibv_qp_ex*)`.
template <class Transport, class W>
void write_extended(ibv_qp_ex* qpx, W const& w, std::uint64_t wr_id) noexcept {
    static_assert((Transport::send_ops & W::send_op) == W::send_op,
                  "rdmacxx: the operation is legal on this transport but missing from its send_ops: add its "
                  "IBV_QP_EX_WITH_* flag to the transport's operation set");
    qpx->wr_id = wr_id;
    qpx->wr_flags = w.flags();
    w.template build<Transport>(qpx);
}

} // namespace detail
} // namespace v0
} // namespace rdmacxx
