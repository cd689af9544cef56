#pragma once
/// @file
/// The Asio adapter's completion dispatcher (`completion_dispatcher`, its class in
/// rdmacxx/asio/dispatcher_class.hpp), and what it does when the objects it serves go: the QPs,
/// SRQs and CQs whose operations it routes tell it once they are destroyed (their destruction
/// watch, rdmacxx/ownership.hpp), and it completes what can no longer complete with
/// `operation_aborted`; the checks that set those watches when an operation starts; `forget`.

#include "rdmacxx/asio/dispatcher_class.hpp"

/// @cond
namespace rdmacxx {
inline namespace v0 {
namespace io {

template <transport Transport, completion_strategy Completion, post_policy Post>
std::size_t completion_dispatcher::forget(rdmacxx::queue_pair<Transport, Completion, Post>& qp) {
    auto const inside = thread_.enter(who);
    ibv_qp* const native = qp.native_handle();
    if (native == nullptr) return 0;
    if (qp.destruction_watch().watcher() == anchor_.identity()) qp.destruction_watch().set({}, nullptr);
    return drop_qp(native);
}

template <class QP>
void completion_dispatcher::route_from(QP& qp, ibv_cq* cq) {
    cq_entry const* const e = find(cq);
    if (e == nullptr || e->batch) [[unlikely]]
        rdmacxx::detail::throw_argument(
            e == nullptr ? "the QP's CQ is not served by this completion dispatcher (add it first): the "
                           "operation could never complete"
                         : "the QP's CQ is a batch CQ of this completion dispatcher (cq_mode::batch): the "
                           "operation could never complete");
    rdmacxx::detail::destruction_watch& w = qp.destruction_watch();
    if (w.watcher() == anchor_.identity()) [[likely]]
        return;
    if (w.notifier() == &on_qp_destroyed) {
        completion_dispatcher const* const other = rdmacxx::detail::link<completion_dispatcher>::follow(w.watcher());
        if (other != nullptr && other->routes(qp.native_handle())) [[unlikely]]
            rdmacxx::detail::throw_argument("the QP has operations pending in another completion dispatcher");
    }
    w.set(anchor_.cell().erased(), &on_qp_destroyed);
}

inline void completion_dispatcher::route_from(rdmacxx::shared_receive_queue& srq) {
    rdmacxx::detail::destruction_watch& w = srq.destruction_watch();
    if (w.watcher() == anchor_.identity()) [[likely]]
        return;
    if (w.notifier() == &on_srq_destroyed) {
        completion_dispatcher const* const other = rdmacxx::detail::link<completion_dispatcher>::follow(w.watcher());
        if (other != nullptr && other->routes(srq.native_handle())) [[unlikely]]
            rdmacxx::detail::throw_argument("the SRQ has receives pending in another completion dispatcher");
    }
    w.set(anchor_.cell().erased(), &on_srq_destroyed);
}

// A QP whose operations it routed is gone (its destructor, after ibv_destroy_qp(3): the
// device no longer touches their memory): they complete with operation_aborted, posted.
// Destroying the QP on another thread while one is inside the dispatcher is refused by the
// thread rule: thread_error, which ends the process here (a destructor's noexcept).
inline void completion_dispatcher::on_qp_destroyed(void const* cell, void* qp) noexcept {
    if (completion_dispatcher* const d = rdmacxx::detail::link<completion_dispatcher>::follow(cell)) {
        auto const inside = d->thread_.enter(who);
        (void)d->drop_qp(static_cast<ibv_qp*>(qp));
    }
}
// An SRQ it routed receives of is gone (after ibv_destroy_srq(3), which succeeds only once
// no QP uses it): those receives can never complete, so they complete with operation_aborted.
inline void completion_dispatcher::on_srq_destroyed(void const* cell, void* srq) noexcept {
    if (completion_dispatcher* const d = rdmacxx::detail::link<completion_dispatcher>::follow(cell)) {
        auto const inside = d->thread_.enter(who);
        for (std::uint32_t i = 0; i < d->slots_.size(); ++i)
            if (d->slots_[i].srq == srq && d->slots_.taken(i)) d->abort_now(i);
        d->stop_reading_when_idle();
    }
}
// A CQ it serves goes: it is served no more (as `remove`), and what waits on it is aborted.
inline void completion_dispatcher::on_cq_destroyed(void const* cell, void* cq) noexcept {
    if (completion_dispatcher* const d = rdmacxx::detail::link<completion_dispatcher>::follow(cell)) {
        auto const inside = d->thread_.enter(who);
        d->drop_cq(static_cast<ibv_cq*>(cq));
    }
}
// Completes every operation posted to `qp` with operation_aborted (posted); how many. One
// whose handler cannot be posted (no memory on a foreign executor) is destroyed uncalled.
inline std::size_t completion_dispatcher::drop_qp(ibv_qp* qp) noexcept {
    std::size_t n = 0;
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].qp != qp || !slots_.taken(i)) continue;
        ++n;
        abort_now(i);
    }
    stop_reading_when_idle();
    return n;
}
// Serves `cq` no more; its batch wait, which has nothing on the device, completes with
// operation_aborted (posted). Routed operations whose completion would arrive on it are kept:
// their QP outlives its CQ only when the device refused to destroy the CQ, and it may still
// write their memory; they complete when the QP goes.
inline void completion_dispatcher::drop_cq(ibv_cq* cq) noexcept {
    cq_entry* const e = find(cq);
    if (e == nullptr) return;
    std::uint32_t const waiter = e->waiter;
    cqs_.erase(e);
    if (waiter != npos) abort_now(waiter);
    stop_reading_when_idle();
}
// Completes slot `i` with operation_aborted, posted; out of memory, its handler is destroyed.
inline void completion_dispatcher::abort_now(std::uint32_t i) noexcept {
    try {
        complete(i, detail::op_result{io::detail::operation_aborted(), {}, 0}, true);
    } catch (...) { // NOLINT(bugprone-empty-catch): the slot is free, the handler gone with the exception
    }
}
// Whether an operation posted to `qp` (a receive posted to `srq`) is pending here.
inline bool completion_dispatcher::routes(ibv_qp* qp) const noexcept {
    for (std::uint32_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].qp == qp && slots_.taken(i)) return true;
    return false;
}
inline bool completion_dispatcher::routes(ibv_cq* cq) const noexcept {
    for (std::uint32_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].cq == cq && slots_.taken(i)) return true;
    return false;
}
inline bool completion_dispatcher::routes(ibv_srq* srq) const noexcept {
    for (std::uint32_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].srq == srq && slots_.taken(i)) return true;
    return false;
}

} // namespace io
} // namespace v0
} // namespace rdmacxx
/// @endcond
