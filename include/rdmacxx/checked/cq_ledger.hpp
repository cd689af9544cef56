#pragma once
/// @file
/// The `checked<C>` ledgers of a CQ (the checked QPs it serves, the completions a drain took for
/// others) and of a QP's whole in-flight state (`qp_tracking`, which drains a QP it destroys).
/// See checked.hpp. Internals.

#include "rdmacxx/checked/failure_notes.hpp"
#include "rdmacxx/checked/qp_ledger.hpp"
#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/in_flight.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The checked QPs of one CQ and the completions a drain took for others. Thread-safety:
/// internally locked.
class cq_ledger {
public:
    explicit cq_ledger(ibv_cq* cq) : cq_(cq) {}

    void attach(qp_ledger* qp) {
        std::lock_guard const lock(mutex_);
        qps_.push_back(qp);
    }
    void detach(qp_ledger const* qp) noexcept {
        std::lock_guard const lock(mutex_);
        std::erase(qps_, qp);
    }

    /// Polls up to `max` completions into `out`: first those kept by a drain, then the CQ's;
    /// accounts each with its QP's ledger. A stale completion (`qp_ledger::outcome::stale`) is
    /// reported to the in-flight handler and dropped, as is one a reset forgot. Returns the count
    /// or ibv_poll_cq(3)'s negative value.
    int poll(ibv_wc* out, int max) noexcept {
        stale_completion stale;
        int n = 0;
        {
            std::lock_guard const lock(mutex_);
            for (bool again = true; again;) {
                n = 0;
                while (n < max && !kept_.empty()) {
                    out[n++] = kept_.front();
                    kept_.pop_front();
                }
                again = false;
                if (n < max) {
                    int const got = ::ibv_poll_cq(cq_, max - n, out + n);
                    if (got < 0 && n == 0) return got;
                    again = got == max - n; // the CQ may hold more
                    if (got > 0) n += got;  // on a failure, the kept ones are still returned (and accounted)
                }
                int kept = 0;
                for (int i = 0; i < n; ++i) {
                    if (!account(out[i], stale)) continue; // dropped
                    if (kept != i) out[kept] = out[i];
                    ++kept;
                }
                again = again && kept == 0 && n != 0; // all dropped: look again rather than report none
                n = kept;
            }
        }
        stale.report();
        return n;
    }

    /// Takes the CQ's completions: those of `qp`'s requests are accounted and dropped, the others
    /// kept for the next `poll`. Returns false when ibv_poll_cq(3) fails.
    /// @throws std::bad_alloc when a completion cannot be kept.
    bool drain_for(qp_ledger& qp) {
        stale_completion stale;
        bool const ok = drain_locked(qp, stale);
        stale.report();
        return ok;
    }

private:
    // The first stale completion met while the lock was held, reported once it is released (the
    // handler is the user's code).
    struct stale_completion {
        bool found = false;
        std::uint32_t qp_num = 0;
        bool receive = false;
        std::uint64_t seq = 0, oldest = 0, sends = 0, receives = 0;
        void report() const noexcept {
            if (found) report_stale_completion(qp_num, receive, seq, oldest, sends, receives);
        }
    };

    // Accounts `wc` with its QP's ledger; false when it is to be dropped (stale or forgotten).
    bool account(ibv_wc& wc, stale_completion& stale) const noexcept {
        qp_ledger* const qp = find(wc.qp_num);
        if (qp == nullptr) return true;
        qp_ledger::outcome const o = settle(*qp, wc, stale);
        return o != qp_ledger::outcome::stale && o != qp_ledger::outcome::forgotten;
    }

    // qp.complete(wc), noting the first stale completion in `stale`.
    static qp_ledger::outcome settle(qp_ledger& qp, ibv_wc& wc, stale_completion& stale) noexcept {
        std::uint64_t seq = 0, oldest = 0;
        bool const receive = (wc.wr_id & qp_ledger::recv_bit) != 0;
        qp_ledger::outcome const o = qp.complete(wc, &seq, &oldest);
        if (o == qp_ledger::outcome::stale && !stale.found)
            stale = {true, qp.qp_num(), receive, seq, oldest, qp.sends(), qp.recvs()};
        return o;
    }

    bool drain_locked(qp_ledger& qp, stale_completion& stale) {
        using outcome = qp_ledger::outcome;
        std::lock_guard const lock(mutex_);
        for (auto it = kept_.begin(); it != kept_.end();) { // kept by an earlier drain of another QP
            if (it->qp_num == qp.qp_num() && settle(qp, *it, stale) != outcome::not_ours)
                it = kept_.erase(it);
            else
                ++it;
        }
        std::array<ibv_wc, 16> wcs{};
        for (;;) {
            int const got = ::ibv_poll_cq(cq_, static_cast<int>(wcs.size()), wcs.data());
            if (got < 0) return false;
            for (int i = 0; i < got; ++i) {
                ibv_wc& wc = wcs[static_cast<std::size_t>(i)];
                // Another QP's, or not a request of the ledger's (a receive from a shared
                // receive queue): kept for the user's next poll.
                if (wc.qp_num != qp.qp_num() || settle(qp, wc, stale) == outcome::not_ours) kept_.push_back(wc);
            }
            if (got < static_cast<int>(wcs.size())) return true;
        }
    }

    qp_ledger* find(std::uint32_t qp_num) const noexcept {
        for (qp_ledger* qp : qps_)
            if (qp->qp_num() == qp_num) return qp;
        return nullptr;
    }

    ibv_cq* cq_;
    std::mutex mutex_;
    std::vector<qp_ledger*> qps_;
    std::deque<ibv_wc> kept_;
};

/// The in-flight state of one checked QP: its ledger, attached to the ledgers of its send and
/// receive CQs for as long as it lives.
class qp_tracking {
public:
    qp_tracking(ibv_context const* ctx, std::uint32_t qp_num, std::shared_ptr<cq_ledger> send_cq,
                std::shared_ptr<cq_ledger> recv_cq)
        : ledger_(ctx, qp_num), send_cq_(std::move(send_cq)), recv_cq_(std::move(recv_cq)) {
        send_cq_->attach(&ledger_);
        if (recv_cq_ != send_cq_) {
            try {
                recv_cq_->attach(&ledger_);
            } catch (...) {
                send_cq_->detach(&ledger_);
                throw;
            }
        }
    }
    qp_tracking(qp_tracking const&) = delete;
    qp_tracking& operator=(qp_tracking const&) = delete;
    ~qp_tracking() {
        send_cq_->detach(&ledger_);
        if (recv_cq_ != send_cq_) recv_cq_->detach(&ledger_);
    }

    [[nodiscard]] qp_ledger& ledger() noexcept { return ledger_; }

    /// Moves `qp` to ERR and takes the completions of its requests in flight from its CQs,
    /// waiting up to `timeout` for the flushed ones. On a connected QP (`marker` set) a signaled
    /// empty SEND is posted after the move, as the kernel's ib_drain_sq() does: its flushed
    /// completion retires the unsignaled sends before it, which complete without a completion.
    /// Returns the error to report: when send requests were in flight, or when some did not
    /// complete in time; else nullopt (also when memory ran out while draining).
    [[nodiscard]] std::optional<in_flight_error> drain(ibv_qp* qp, char const* transport_name, bool marker,
                                                       std::chrono::milliseconds timeout) noexcept {
        std::uint64_t const sends = ledger_.sends();
        std::uint64_t const recvs = ledger_.recvs();
        if (sends + recvs == 0) return std::nullopt;
        std::uint64_t const oldest = ledger_.oldest_send_wr_id();
        bool const in_error = rdmacxx::detail::move_to_error(qp);
        auto const deadline = std::chrono::steady_clock::now() + timeout;
        try {
            if (in_error && marker && sends != 0) {
                ibv_send_wr wr{};
                wr.opcode = IBV_WR_SEND;
                wr.send_flags = IBV_SEND_SIGNALED;
                std::uint64_t const seq = ledger_.record(&wr, 1);
                ibv_send_wr* bad = nullptr;
                if (::ibv_post_send(qp, &wr, &bad) != 0) (void)ledger_.cancel_sends(seq); // full: wait instead
            }
            while (in_error && ledger_.sends() + ledger_.recvs() != 0) {
                if (!send_cq_->drain_for(ledger_)) break;
                if (recv_cq_ != send_cq_ && !recv_cq_->drain_for(ledger_)) break;
                if (std::chrono::steady_clock::now() >= deadline) break;
                std::this_thread::yield();
            }
            std::uint64_t const left = ledger_.sends() + ledger_.recvs();
            if (sends == 0 && left == 0) return std::nullopt;
            std::string what = std::string{transport_name} + " QP " + std::to_string(ledger_.qp_num()) +
                               " destroyed with " + std::to_string(sends) + " send and " + std::to_string(recvs) +
                               " receive requests in flight";
            if (sends != 0) what += " (oldest send wr_id " + std::to_string(oldest) + ")";
            if (!in_error)
                what += "; ibv_modify_qp(3) to ERR failed, nothing was drained";
            else if (left != 0)
                what += "; moved to ERR, and " + std::to_string(left) + " did not complete within " +
                        std::to_string(timeout.count()) + " ms";
            else
                what += "; moved to ERR and drained their completions before destroying it";
            return in_flight_error(std::move(what), sends, recvs);
        } catch (...) { // out of memory while keeping other QPs' completions
            return std::nullopt;
        }
    }

private:
    qp_ledger ledger_;
    std::shared_ptr<cq_ledger> send_cq_; // shared: a CQ destroyed too early frees nothing under us
    std::shared_ptr<cq_ledger> recv_cq_;
};

} // namespace detail
} // namespace v0
} // namespace rdmacxx
