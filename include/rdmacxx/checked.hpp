#pragma once
/// @file
/// Opt-in in-flight tracking: the completion-strategy wrapper `checked<C>`. The error it reports,
/// `in_flight_error`, and its handler are in in_flight.hpp; the ledgers that count
/// posted-but-not-completed work are in checked/: per memory region (region_ledger.hpp), per
/// queue pair (qp_ledger.hpp), per CQ and QP (cq_ledger.hpp), and what they knew of failed
/// requests (failure_notes.hpp).
///
/// Tracking is chosen at compile time by wrapping a completion strategy:
/// `queue_pair<rc, checked<busy_poll>>` on `completion_queue<checked<busy_poll>>`. With a plain
/// strategy nothing of this header runs on the posting or polling path (the instruction counts of
/// `tools/instruction-counts` are those of hand-written verbs).

#include "rdmacxx/checked/cq_ledger.hpp"
#include "rdmacxx/checked/failure_notes.hpp"
#include "rdmacxx/checked/qp_ledger.hpp"
#include "rdmacxx/checked/region_ledger.hpp"
#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/in_flight.hpp"

namespace rdmacxx {
inline namespace v0 {

namespace detail {
template <class C>
struct spin_of {};
template <class C>
    requires requires { C::spin; }
struct spin_of<C> {
    static constexpr auto spin = C::spin;
};
} // namespace detail

/// Completion strategy `C` (`busy_poll`, `event_driven`, `adaptive`) with in-flight tracking.
///
/// A `queue_pair<T, checked<C>>` records every request it posts until its completion is polled
/// from a `completion_queue<checked<C>>` (an unsignaled send is complete when a later send of its
/// queue completes). It counts them per queue pair (`queue_pair::in_flight_sends()`,
/// `in_flight_recvs()`) and per memory region (`memory_region::in_flight()`, by the lkeys of
/// the non-inline scatter-gather entries), and:
/// - `memory_region::deregister()` with work in flight throws `in_flight_error` and keeps the
///   region registered; destroying such a region reports an `in_flight_error` to the handler;
/// - destroying a queue pair with work in flight moves it to ERR and drains its flushed
///   completions from its CQs before ibv_destroy_qp(3), so that no buffer is written after its
///   owner is gone (an RC or UC QP also posts a signaled empty SEND after the move, as the
///   kernel's ib_drain_sq() does, to learn that unsignaled sends ended); when send requests
///   were among them, or some did not complete within `queue_pair::drain_timeout`, it reports
///   an `in_flight_error` to the handler (outstanding receives alone are the normal state of a
///   QP and are drained quietly).
///
/// Completions keep the user's `wr_id`: the QP posts its own sequence numbers and the CQ puts
/// the user's back before a completion is returned. Completions of other QPs that a drain polls
/// from a shared CQ are kept by the CQ and returned by its next poll. A failed completion's
/// `work_completion::throw_if_error()` names the queue, operation, remote address and rkey of
/// the request that was posted (kept for the last 64 failed completions of the process).
///
/// Thread-safety: the ledgers are locked, but posting to one QP from several threads at once
/// must be serialised by the caller, as for a plain QP. Without that, requests reach the device
/// in another order than they were recorded in, and a completion then arrives for a request the
/// ledger already retired: such a completion is reported to the handler as an `in_flight_error`
/// that names this misuse, and is dropped (its `wr_id` would be an internal tag).
/// Costs: a mutex and a few hash-map updates per request; for debugging and tests.
/// Not tracked: receives posted to a `shared_receive_queue` (their completions pass through
/// untouched), the peer's memory, and a QP adopted without its CQs.
template <class C>
struct checked : detail::spin_of<C> {
    /// The strategy that waits.
    using strategy = C;
    /// As the wrapped strategy.
    static constexpr bool uses_channel = C::uses_channel;
    /// True: queue pairs and CQs of this strategy track work in flight.
    static constexpr bool tracks_in_flight = true;
};

} // namespace v0
} // namespace rdmacxx
