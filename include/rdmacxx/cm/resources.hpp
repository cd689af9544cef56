#pragma once
/// @file
/// `cm::resources`: the protection domain, CQs, optional SRQ and completion channel a server
/// already has, for the CM flows (`cm::connect`, `connect_request::accept`, `multicast_group`)
/// to borrow instead of making their own for every connection.

#include "rdmacxx/cq.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/srq.hpp"

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

} // namespace cm
} // namespace v0
} // namespace rdmacxx
