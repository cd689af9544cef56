#pragma once
/// @file
/// What the verbs headers know of `checked<C>` in-flight tracking without including it: the
/// `tracks_in_flight` trait, the ledgers' names (defined under checked/, which only
/// checked.hpp includes), and two hooks through which the ledgers, once used, answer the
/// questions of code that is not a template of the completion strategy (a memory region's
/// requests in flight, what was noted of a failed completion). A program that never uses
/// `checked<C>` compiles no mutex, hash map or ledger, and the hooks stay null.

#include "rdmacxx/detail/verbs.hpp"

#include <atomic>
#include <cstdint>

namespace rdmacxx {
inline namespace v0 {

struct tracked_request; // error.hpp

namespace detail {

/// True for `checked<C>`.
template <class C>
inline constexpr bool tracks_in_flight = requires {
    requires C::tracks_in_flight;
};

class qp_tracking; // checked/cq_ledger.hpp
class cq_ledger;   // checked/cq_ledger.hpp

/// `T`, named so that it depends on `C`: a use in a template of `C` is then checked only when
/// instantiated (by then checked.hpp, which names `checked<C>`, has defined it).
template <class C, class T>
struct dependent {
    using type = T;
};

/// Requests in flight that use the region of lkey `lkey` on context `ctx`.
using region_in_flight_fn = std::uint64_t (*)(ibv_context const* ctx, std::uint32_t lkey) noexcept;
/// Set by the region ledger when a checked QP first posts; null before (nothing in flight).
inline std::atomic<region_in_flight_fn> region_in_flight_hook{nullptr};

/// Fills `request` with what tracking noted of the failed completion `wc`; false when nothing.
using failure_note_fn = bool (*)(ibv_wc const& wc, tracked_request& request) noexcept;
/// Set by the failure notes when a checked CQ first returns a failed completion; null before.
inline std::atomic<failure_note_fn> failure_note_hook{nullptr};

/// Requests in flight that use region `mr` (0 unless checked QPs have posted).
[[nodiscard]] inline std::uint64_t region_in_flight(ibv_mr const* mr) noexcept {
    region_in_flight_fn const f = region_in_flight_hook.load(std::memory_order_acquire);
    return f != nullptr ? f(mr->context, mr->lkey) : 0;
}

// failed_completion_error, which asks failure_note_hook, is in work_completion.hpp: it makes a
// wc_error, and this layer knows no error type.

} // namespace detail
} // namespace v0
} // namespace rdmacxx
