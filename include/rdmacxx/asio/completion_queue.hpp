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

#include <memory>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// A completion queue served by an Asio execution context: an `event_driven` (or
/// `checked<event_driven>`) CQ of at least `min_entries` entries on a completion channel of its
/// own, routed by that channel's `completion_dispatcher`, which the context's
/// `dispatcher_service` makes (with the options given) and owns. The queue pairs made on it
/// (`io::queue_pair`, `io::connection`) and its `io::shared_receive_queue`s start their
/// operations on that dispatcher.
///
/// Destroy it after its QPs, as with verbs. Destroyed (or replaced by a move assignment) with
/// none of their operations pending, it destroys the CQ, which tells the dispatcher (its batch
/// waits complete with `operation_aborted`), and then the channel. With operations of its QPs
/// pending, the device would refuse to destroy the CQ (EBUSY: a QP still uses it) and their
/// requests may still write their memory: the CQ and the channel are then kept by the
/// dispatcher until it is destroyed with its context, so that those operations still complete,
/// or complete aborted when their QP goes. The dispatcher stays in the service until the context goes or the next
/// `dispatcher_for` lookup finds its channel gone. Movable (the CQ and the channel stay where
/// they are, on the heap); a moved-from one holds nothing and may only be destroyed or assigned.
/// Thread-safety: as its dispatcher's (the context's own thread, see docs/asio.md, "Threads"),
/// destruction included.
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
        : held_(std::make_unique<held>(ctx, min_entries, cq_opt)) {
        completion_dispatcher& d = dispatcher_for(ex, held_->channel, opt);
        d.add(held_->cq);
        dispatcher_ = d.anchor_cell();
    }
    /// Takes over `other`'s CQ and channel; `other` holds nothing.
    completion_queue(completion_queue&&) noexcept = default;
    /// Lets go of the CQ and channel held, as the destructor does, then takes over `other`'s.
    completion_queue& operator=(completion_queue&& other) noexcept {
        if (this != &other) {
            let_go();
            held_ = std::move(other.held_);
            dispatcher_ = std::move(other.dispatcher_);
        }
        return *this;
    }
    completion_queue(completion_queue const&) = delete;
    completion_queue& operator=(completion_queue const&) = delete;
    /// Destroys the CQ, then the channel, unless operations of its QPs are pending (see the class).
    ~completion_queue() { let_go(); }

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
    [[nodiscard]] cq_type& cq() noexcept { return held_->cq; }
    /// The channel the CQ delivers its events to.
    [[nodiscard]] completion_channel& channel() noexcept { return held_->channel; }

    /// What a CM connection borrows to make its QP on this CQ (both queues) in `pd`:
    /// `cm::shared_qp<rc>(cq.resources(pd))` (with an SRQ: `io::shared_receive_queue::resources`).
    /// `pd` must outlive the connection.
    [[nodiscard]] cm::resources<Completion> resources(protection_domain& pd) noexcept {
        return {.pd = pd, .send_cq = held_->cq, .recv_cq = held_->cq, .srq = nullptr, .channel = &held_->channel};
    }

private:
    struct held {
        held(context& ctx, int min_entries, cq_options const& opt) : channel(ctx), cq(ctx, min_entries, channel, opt) {}
        completion_channel channel; // destroyed after the CQ
        cq_type cq;
    };

    // Destroys the CQ and the channel, or keeps them when operations that complete on the CQ are
    // pending (their QPs still use it: see the class).
    void let_go() noexcept {
        if (!held_) return;
        if (completion_dispatcher* const d = dispatcher_.get_if(); d != nullptr && d->routes(held_->cq.native_handle()))
            [[unlikely]] {
            try {
                d->keep(std::shared_ptr<held>(std::move(held_))); // destroyed with the dispatcher
            } catch (...) {                                       // no memory to keep it with: left allocated
                (void)held_.release(); // NOLINT(bugprone-unused-return-value): kept on purpose, see the class
            }
            return;
        }
        held_.reset();
    }

    std::unique_ptr<held> held_;
    rdmacxx::detail::link<completion_dispatcher> dispatcher_;
};

} // namespace io
} // namespace v0
} // namespace rdmacxx
