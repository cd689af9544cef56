#pragma once
/// @file
/// Where a CM connection's QP comes from: `cm::resources` (the protection domain, CQs, optional
/// SRQ and completion channel a server already has, for the CM flows to borrow instead of making
/// their own for every connection) and `cm::qp_source`, the one parameter of `cm::connect`,
/// `connect_request::accept` and `multicast_group` that names the source (`own_qp`,
/// `shared_qp`, `user_qp`).

#include "rdmacxx/cq.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/post_policy.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/transport.hpp"

#include <optional>
#include <string>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// What a connection borrows instead of making its own: the PD its QP is created in (register
/// the memory you post there, once, for every connection), the CQs of its send and receive
/// queues (they may be one CQ, shared by any number of connections), an optional SRQ the QP takes
/// its receive buffers from (post receives there), and the completion channel those CQs deliver
/// their events on (for `connection::cq_channel()`; null for `busy_poll` CQs or when unknown).
///
/// Lifetime: every object named here must outlive each connection made with it; the connection
/// never destroys them. All must be on the RDMA device the CM resolves the connection to (the
/// listener's for the passive side: make the PD on `listener.cm_id().context()`); the flows check
/// the PD and refuse a mismatch with `argument_error` before anything is sent.
///
/// Teardown on shared CQs: a connection never polls a CQ it borrows (it would take the
/// completions of other connections). Destroying it moves its QP to ERR and destroys the QP: the
/// flushed completions of the work it still had in flight (IBV_WC_WR_FLUSH_ERR, `qp_num()` of
/// that QP) stay in the CQ for your poller, which must ignore QPNs it no longer knows. Receives
/// posted to an SRQ belong to the SRQ and are not flushed. A `checked` QP drains its own work
/// before it is destroyed and keeps other QPs' completions for the CQ's next poll.
/// Thread-safety: a plain aggregate of references; the objects' own rules apply.
/// @see rdma_create_qp(3), ibv_create_srq(3), ibv_create_comp_channel(3)
template <class Completion>
struct resources {
    protection_domain& pd;                 ///< the QP's PD (register memory here)
    completion_queue<Completion>& send_cq; ///< completions of the send queue
    completion_queue<Completion>& recv_cq; ///< completions of the receive queue (or the SRQ's)
    shared_receive_queue* srq = nullptr;   ///< receive buffers shared with other QPs; null: the QP's own
    completion_channel* channel = nullptr; ///< the channel `send_cq` and `recv_cq` use; null: none
};

namespace detail {
/// Refuses resources that cannot serve a connection on `verbs` (the device the CM resolved):
/// a PD or CQ on another device, or a channel that is not the one the CQs use.
/// @throws argument_error naming the mismatch; nothing has been sent.
template <class Completion>
void check_resources(resources<Completion> const& r, ibv_context* verbs, std::string const& what) {
    if (r.pd.native_handle()->context != verbs) [[unlikely]]
        rdmacxx::detail::throw_argument(what + ": the protection domain is on device " +
                                        ::ibv_get_device_name(r.pd.native_handle()->context->device) +
                                        ", the CM resolved device " + ::ibv_get_device_name(verbs->device) +
                                        "; make the PD on the id's context (cm::id::context())");
    if (r.send_cq.native_handle()->context != verbs || r.recv_cq.native_handle()->context != verbs) [[unlikely]]
        rdmacxx::detail::throw_argument(what + ": a CQ is on another device than the one the CM resolved (" +
                                        ::ibv_get_device_name(verbs->device) + ")");
    if (r.channel != nullptr && (!r.send_cq.delivers_to(*r.channel) || !r.recv_cq.delivers_to(*r.channel))) [[unlikely]]
        rdmacxx::detail::throw_argument(what + ": the completion channel given is not the one the CQs deliver to");
}
} // namespace detail

/// Where a connection's QP comes from, the one parameter that tells the three cases apart:
///
/// - `own_qp<Transport, Completion>()` (the default, `{}`): the connection makes its own PD, CQ
///   (`connection_options::cq_entries` entries) and completion channel on the device the CM
///   resolves, then the QP; it owns them all (a self-contained connection).
/// - `shared_qp<Transport>(resources)`: the QP is made in `resources.pd` on its CQs (and SRQ),
///   which the connection borrows (they must outlive it, on the device the CM resolves): a
///   server's one PD, CQ, SRQ and channel for every connection. The source holds references:
///   the PD, CQs and SRQ must not move until the handshake has made the QP (a pending connect
///   or accept); the connection follows them afterwards.
/// - `user_qp(qp)`: a queue pair you created (RC or UC, any post policy, `checked` or not, in
///   RESET, in a PD on the device the CM resolves), which the connection borrows (followed: a QP
///   destroyed before the handshake takes it is refused with `orphaned_error`). The CM's
///   attributes move it through INIT, RTR and RTS under the settings; whatever fails, it is left
///   in ERR (what was posted completes flushed; `reset()` it to connect again).
///
/// A value type, cheap to copy (an aggregate of handles). Thread-safety: as a value.
template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post>
struct qp_source {
    std::optional<resources<Completion>> shared{};                         ///< borrowed PD, CQs, SRQ, channel
    rdmacxx::detail::link<queue_pair<Transport, Completion, Post>> user{}; ///< the user's QP
};

/// The connection's own PD, CQ, channel and QP (the default source: `{}` says the same).
template <transport Transport, completion_strategy Completion>
[[nodiscard]] qp_source<Transport, Completion> own_qp() noexcept {
    return {};
}

/// The QP made on `r` (PD, CQs, SRQ, channel: the aggregate is copied, the objects it names are
/// borrowed and must outlive the connection).
template <transport Transport, completion_strategy Completion>
[[nodiscard]] qp_source<Transport, Completion> shared_qp(resources<Completion> const& r) {
    return {.shared = r};
}

/// The queue pair `qp` you created (RC or UC), borrowed by the connection.
template <transport Transport, completion_strategy Completion, post_policy Post>
    requires(Transport::connected)
[[nodiscard]] qp_source<Transport, Completion, Post> user_qp(queue_pair<Transport, Completion, Post>& qp) {
    return {.user = qp.anchor_cell()};
}

} // namespace cm
} // namespace v0
} // namespace rdmacxx
