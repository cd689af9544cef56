#pragma once
/// @file
/// What `checked<C>` tracking (see checked.hpp) knew of the last failed requests, for the
/// `wc_error` of their completions, and the report of a completion that came for a request
/// already retired. Internals.

#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/in_flight.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// What tracking knew of the last failed completions it returned (64, process-wide): the
/// queue, operation, remote address and rkey of each request, for `wc_error`. Looked up by the
/// completion's defined fields (QP number, user `wr_id`, status, vendor error).
/// Thread-safety: internally locked.
class failure_notes {
public:
    static failure_notes& instance() noexcept {
        static failure_notes notes;
        return notes;
    }

    /// Keeps what is known of the failed completion `wc` (its `wr_id` already the user's).
    void note(ibv_wc const& wc, tracked_request const& request) noexcept {
        failure_note_hook.store(&find_noted, std::memory_order_release);
        std::lock_guard const lock(mutex_);
        notes_[next_++ % notes_.size()] = {wc.wr_id, wc.qp_num, wc.vendor_err, wc.status, request};
    }

    /// What was noted of `wc`, the most recent match first; nullopt when nothing was.
    [[nodiscard]] std::optional<tracked_request> find(ibv_wc const& wc) const noexcept {
        std::lock_guard const lock(mutex_);
        for (std::size_t k = 0; k < notes_.size() && k < next_; ++k) {
            entry const& e = notes_[(next_ - 1 - k) % notes_.size()];
            if (e.wr_id == wc.wr_id && e.qp_num == wc.qp_num && e.vendor_err == wc.vendor_err && e.status == wc.status)
                return e.request;
        }
        return std::nullopt;
    }

    /// `failure_note_hook`'s answer, installed by the first `note`.
    static bool find_noted(ibv_wc const& wc, tracked_request& request) noexcept {
        auto const found = instance().find(wc);
        if (found) request = *found;
        return found.has_value();
    }

private:
    struct entry {
        std::uint64_t wr_id = 0;
        std::uint32_t qp_num = 0;
        std::uint32_t vendor_err = 0;
        ibv_wc_status status = IBV_WC_SUCCESS;
        tracked_request request;
    };
    mutable std::mutex mutex_;
    std::array<entry, 64> notes_{};
    std::size_t next_ = 0;
};

/// Reports to the in-flight handler a completion that arrived for a request its QP's ledger had
/// already retired: the QP was posted to from two threads at once without a lock.
inline void report_stale_completion(std::uint32_t qp_num, bool receive, std::uint64_t seq, std::uint64_t oldest,
                                    std::uint64_t sends, std::uint64_t receives) noexcept {
    try {
        std::string what = "checked QP " + std::to_string(qp_num) + ": a completion arrived for " +
                           (receive ? "receive" : "send") + " request #" + std::to_string(seq) +
                           ", older than the oldest on record (#" + std::to_string(oldest) +
                           "): requests were posted to this QP from two threads at once without a lock, and reached "
                           "the device in another order than they were recorded in (serialising the posts to one "
                           "QP is the caller's job); the completion was dropped, and the wr_id of a request may "
                           "never be returned";
        report_in_flight(in_flight_error(std::move(what), sends, receives));
    } catch (...) { // NOLINT(bugprone-empty-catch): no memory for the message; the completion is dropped all the same
    }
}

} // namespace detail
} // namespace v0
} // namespace rdmacxx
