#pragma once
/// @file
/// The C boundary of the RDMA connection manager: the only header that includes librdmacm.
/// Everything in rdmacxx/cm/ includes this one, never <rdma/rdma_cma.h> directly.

#include "rdmacxx/detail/verbs.hpp"

#include <infiniband/ib.h> // sockaddr_ib (AF_IB)
#include <rdma/rdma_cma.h>

#include <cerrno>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// Deleter of an event channel (rdma_destroy_event_channel(3)).
struct cm_channel_deleter {
    void operator()(rdma_event_channel* c) const noexcept { ::rdma_destroy_event_channel(c); }
};

/// Deleter of an RDMA CM id (rdma_destroy_id(3)); blocks until the id's reported events are
/// acknowledged, which `cm::event` guarantees by acknowledging each event the moment it is taken.
struct cm_id_deleter {
    void operator()(rdma_cm_id* id) const noexcept { (void)::rdma_destroy_id(id); }
};

/// Deleter of an event (rdma_ack_cm_event(3)): acknowledging releases it.
struct cm_event_deleter {
    void operator()(rdma_cm_event* e) const noexcept { (void)::rdma_ack_cm_event(e); }
};

/// The errno of a librdmacm call that returned -1; older librdmacm returned -errno without
/// setting errno (rdma_cm(7), RETURN CODES), which this also accepts. Never 0.
[[nodiscard]] inline int cm_errno(int rc) noexcept {
    if (rc < -1) return -rc;
    return errno != 0 ? errno : EIO;
}

} // namespace detail
} // namespace v0
} // namespace rdmacxx
