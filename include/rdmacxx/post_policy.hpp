#pragma once
/// @file
/// Post policies of `queue_pair`: `legacy_post` (ibv_post_send(3) chains, the default) and
/// `extended_post` (the ibv_wr_* API: ibv_wr_start(3), ibv_wr_send(3) & co., ibv_wr_complete(3)).

#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"

#include <cerrno>
#include <concepts>
#include <cstdint>
#include <string>

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

/// Creates a QP of `Transport` with the extended post API (ibv_create_qp_ex(3), its operation
/// set announced) from the attributes `init` (whose `cap` becomes what the device gave), in
/// `pd`. A provider whose extended API has no memory-window operations refuses the whole set
/// (EOPNOTSUPP or EINVAL): the QP is then made without them and `window_ops` cleared, and posting
/// one to it is refused before the device.
/// @throws sys_error naming ibv_create_qp_ex and the device when the QP cannot be made.
template <class Transport>
[[nodiscard]] ibv_qp* create_qp_ex(ibv_pd* pd, ibv_qp_init_attr& init, bool& window_ops) {
    ibv_qp_init_attr_ex ex{};
    ex.send_cq = init.send_cq;
    ex.recv_cq = init.recv_cq;
    ex.srq = init.srq;
    ex.cap = init.cap;
    ex.qp_type = init.qp_type;
    ex.sq_sig_all = init.sq_sig_all;
    ex.pd = pd;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ex.send_ops_flags = send_ops_for<Transport>();
    ibv_context* const verbs = pd->context;
    ibv_qp* qp = ::ibv_create_qp_ex(verbs, &ex);
    if (int const err = errno;
        qp == nullptr && (ex.send_ops_flags & window_send_ops) != 0 && (err == EOPNOTSUPP || err == EINVAL)) {
        ex.send_ops_flags &= ~window_send_ops;
        qp = ::ibv_create_qp_ex(verbs, &ex);
        window_ops = false;
    }
    if (qp == nullptr) [[unlikely]]
        throw_errno("ibv_create_qp_ex", [&] {
            return std::string{"for a "} + Transport::name + " QP with the extended post API (ibv_wr_*) on " +
                   std::string{::ibv_get_device_name(verbs->device)} +
                   ": the device may not support it; use legacy_post";
        });
    init.cap = ex.cap;
    return qp;
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
