#pragma once
/// @file
/// `io::completion_queue`: a CQ as an Asio I/O object. It makes its own completion channel,
/// registers the CQ with that channel's dispatcher in its execution context's
/// `dispatcher_service` when it is made, and the CQ tells the dispatcher when it goes: nothing to
/// `add` or `remove`. Its queue pairs (`io::queue_pair`, `io::connection`) take their dispatcher
/// from it.

#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/service.hpp"
#include "rdmacxx/cm/resources.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/srq.hpp"

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// A completion queue served by an Asio execution context: an `event_driven` (or
/// `checked<event_driven>`) CQ of at least `min_entries` entries on a completion channel of its
/// own, routed by that channel's `completion_dispatcher`, which the context's
/// `dispatcher_service` makes (with the options given) and owns. The queue pairs made on it
/// (`io::queue_pair`, `io::connection`) start their operations on that dispatcher.
///
/// Destroying it destroys the CQ, which tells the dispatcher (its batch waits complete with
/// `operation_aborted`); a QP still on it keeps the CQ on the device (EBUSY) and its operations
/// pending until the QP goes, which completes them: destroy the QPs first, as with verbs. The
/// dispatcher stays in the service until the context goes or the next `dispatcher_for` lookup
/// finds its channel gone. Movable (the dispatcher follows the CQ and the channel); a moved-from
/// one holds nothing.
/// Thread-safety: as its dispatcher's (the context's own thread, see docs/asio.md, "Threads").
/// @see ibv_create_comp_channel(3), ibv_create_cq(3), completion_dispatcher::add
template <completion_strategy Completion = event_driven>
class completion_queue {
    static_assert(Completion::uses_channel, "an io::completion_queue is event-driven: its dispatcher waits on its "
                                            "completion channel (event_driven or checked<event_driven>)");

public:
    /// The dispatcher's executor.
    using executor_type = completion_dispatcher::executor_type;
    /// The CQ it holds.
    using cq_type = rdmacxx::completion_queue<Completion>;

    /// Makes a channel and a CQ of at least `min_entries` entries on `ctx`, and routes the CQ by
    /// the channel's dispatcher in `ex`'s execution context, made with `opt`.
    /// @throws sys_error when the channel, the CQ or the dispatcher's descriptor cannot be made or
    ///         the CQ cannot be armed; argument_error as `rdmacxx::completion_queue`'s constructor;
    ///         std::bad_alloc. Nothing is left behind (a dispatcher made for the channel is dropped
    ///         at the service's next lookup).
    template <class Executor>
    completion_queue(Executor const& ex, context& ctx, int min_entries, dispatcher_options const& opt = {},
                     cq_options const& cq_opt = {})
        : channel_(ctx), cq_(ctx, min_entries, channel_, cq_opt) {
        completion_dispatcher& d = dispatcher_for(ex, channel_, opt);
        d.add(cq_);
        dispatcher_ = d.anchor_cell();
    }

    /// The dispatcher's executor: the completions of the operations on this CQ's queue pairs are
    /// delivered from it.
    /// @throws orphaned_error when the dispatcher was destroyed (its context shut down).
    [[nodiscard]] executor_type get_executor() const { return dispatcher().get_executor(); }
    /// The dispatcher that routes its completions.
    /// @throws orphaned_error when it was destroyed (its context shut down).
    [[nodiscard]] completion_dispatcher& dispatcher() const {
        return dispatcher_.get("io::completion_queue", "completion dispatcher");
    }
    /// The CQ (to make a QP on: `io::queue_pair` takes this object itself).
    [[nodiscard]] cq_type& cq() noexcept { return cq_; }
    /// The channel the CQ delivers its events to.
    [[nodiscard]] completion_channel& channel() noexcept { return channel_; }

    /// What a CM connection borrows to make its QP on this CQ (both queues) in `pd`, with the
    /// receive buffers of `srq` when not null: `cm::shared_qp<rc>(cq.resources(pd))`. `pd` (and
    /// `srq`) must outlive the connection.
    [[nodiscard]] cm::resources<Completion> resources(protection_domain& pd,
                                                      shared_receive_queue* srq = nullptr) noexcept {
        return {.pd = pd, .send_cq = cq_, .recv_cq = cq_, .srq = srq, .channel = &channel_};
    }

private:
    completion_channel channel_; // destroyed after the CQ
    cq_type cq_;
    rdmacxx::detail::link<completion_dispatcher> dispatcher_;
};

} // namespace io
} // namespace v0
} // namespace rdmacxx
