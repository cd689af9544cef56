#pragma once
/// @file
/// Opt-in in-flight tracking: the completion-strategy wrapper `checked<C>`, the error
/// `in_flight_error` and its handler, and the ledgers that count posted-but-not-completed work
/// per queue pair and per memory region.
///
/// Tracking is chosen at compile time by wrapping a completion strategy:
/// `queue_pair<rc, checked<busy_poll>>` on `completion_queue<checked<busy_poll>>`. With a plain
/// strategy nothing of this header runs on the posting or polling path (the instruction counts of
/// `tools/instruction-counts` are those of hand-written verbs).

#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/error.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

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
/// from a shared CQ are kept by the CQ and returned by its next poll.
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

namespace detail {
/// True for `checked<C>`.
template <class C>
inline constexpr bool tracks_in_flight = requires {
    requires C::tracks_in_flight;
};
} // namespace detail

/// Work still in flight where it must not be: a memory region deregistered, or a queue pair
/// destroyed, while requests posted through it had not completed. Code EBUSY
/// (`std::errc::device_or_resource_busy`).
class in_flight_error : public error {
public:
    /// @param message    what was destroyed and what was in flight
    /// @param sends      send-queue requests in flight
    /// @param receives   receive-queue requests in flight
    in_flight_error(std::string message, std::uint64_t sends, std::uint64_t receives)
        : error(std::make_error_code(std::errc::device_or_resource_busy), std::move(message)), sends_(sends),
          receives_(receives) {}

    /// Send-queue requests in flight (for a region: requests of any queue that use it).
    [[nodiscard]] std::uint64_t sends() const noexcept { return sends_; }
    /// Receive-queue requests in flight (0 for a region, which counts all under `sends()`).
    [[nodiscard]] std::uint64_t receives() const noexcept { return receives_; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "sends in flight: " << sends_ << '\n' << lead << "receives in flight: " << receives_ << '\n';
    }

private:
    std::uint64_t sends_;
    std::uint64_t receives_;
};

/// What a destructor does with an `in_flight_error` (destructors do not throw): the default
/// prints `dump_detailed(std::cerr, "E:", 2)` and calls std::terminate(), as `std::thread`'s
/// destructor does for a thread still joinable, except while an exception unwinds the stack
/// (then it only prints, and the exception in flight goes on).
using in_flight_handler = void (*)(in_flight_error const&) noexcept;

namespace detail {
inline void default_in_flight_handler(in_flight_error const& e) noexcept {
    try {
        e.dump_detailed(std::cerr, "E:", 2);
    } catch (...) { // NOLINT(bugprone-empty-catch): nothing more to do on the way to terminate
    }
    if (std::uncaught_exceptions() == 0) std::terminate(); // while unwinding, the first error goes on
}
inline std::atomic<in_flight_handler>& in_flight_handler_slot() noexcept {
    static std::atomic<in_flight_handler> slot{&default_in_flight_handler};
    return slot;
}
inline void report_in_flight(in_flight_error const& e) noexcept { in_flight_handler_slot().load()(e); }
} // namespace detail

/// Installs `handler` for the `in_flight_error`s found by destructors and returns the previous
/// one; nullptr restores the default. Thread-safety: safe to call from any thread.
inline in_flight_handler set_in_flight_handler(in_flight_handler handler) noexcept {
    return detail::in_flight_handler_slot().exchange(handler != nullptr ? handler : &detail::default_in_flight_handler);
}

namespace detail {

/// The process-wide count of requests in flight per memory region, keyed by device context and
/// lkey. Thread-safety: internally locked.
class region_ledger {
public:
    static region_ledger& instance() noexcept {
        static region_ledger ledger;
        return ledger;
    }

    /// True once any checked QP has posted: memory_region's destructor looks no further before.
    [[nodiscard]] static bool used() noexcept { return used_flag().load(std::memory_order_relaxed); }

    void acquire(ibv_context const* ctx, std::span<std::uint32_t const> lkeys) {
        used_flag().store(true, std::memory_order_relaxed);
        std::lock_guard const lock(mutex_);
        for (std::uint32_t const lkey : lkeys)
            ++counts_[key{ctx, lkey}];
    }

    void release(ibv_context const* ctx, std::span<std::uint32_t const> lkeys) noexcept {
        std::lock_guard const lock(mutex_);
        for (std::uint32_t const lkey : lkeys)
            if (auto it = counts_.find(key{ctx, lkey}); it != counts_.end() && --it->second == 0) counts_.erase(it);
    }

    [[nodiscard]] std::uint64_t count(ibv_context const* ctx, std::uint32_t lkey) const noexcept {
        std::lock_guard const lock(mutex_);
        auto const it = counts_.find(key{ctx, lkey});
        return it == counts_.end() ? 0 : it->second;
    }

private:
    struct key {
        ibv_context const* ctx;
        std::uint32_t lkey;
        friend bool operator==(key const&, key const&) = default;
    };
    struct key_hash {
        std::size_t operator()(key const& k) const noexcept {
            return std::hash<void const*>{}(k.ctx) ^ (std::hash<std::uint32_t>{}(k.lkey) * 0x9e3779b97f4a7c15ULL);
        }
    };
    static std::atomic<bool>& used_flag() noexcept {
        static std::atomic<bool> flag{false};
        return flag;
    }

    mutable std::mutex mutex_;
    std::unordered_map<key, std::uint64_t, key_hash> counts_;
};

/// The requests of one checked QP that have been posted and not yet completed, in posting
/// order per queue. Posted requests carry a tag as `wr_id`: the top two bits say which queue
/// (0b10 send, 0b11 receive), the rest is the request's sequence number; `complete` maps a
/// completion back to the user's `wr_id`. A completion whose `wr_id` is not a tag of this
/// ledger's (a receive taken from a shared receive queue) is left as it is.
/// Thread-safety: internally locked (a poller and a poster may be different threads).
class qp_ledger {
public:
    static constexpr std::uint64_t tag_bit = std::uint64_t{1} << 63;
    static constexpr std::uint64_t recv_bit = std::uint64_t{1} << 62;
    static constexpr std::uint64_t seq_mask = recv_bit - 1;

    qp_ledger(ibv_context const* ctx, std::uint32_t qp_num) : ctx_(ctx), qp_num_(qp_num) {}
    qp_ledger(qp_ledger const&) = delete;
    qp_ledger& operator=(qp_ledger const&) = delete;
    ~qp_ledger() {
        std::lock_guard const lock(mutex_);
        release_all(send_);
        release_all(recv_);
    }

    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp_num_; }

    /// Records the chain `wrs` (n requests) before it is posted and replaces each `wr_id` by its
    /// tag; returns the sequence number of the first. Records nothing when it throws.
    std::uint64_t record(ibv_send_wr* wrs, std::size_t n) {
        std::lock_guard const lock(mutex_);
        std::uint64_t const first = send_.next;
        try {
            for (std::size_t i = 0; i < n; ++i) {
                bool const inlined = (wrs[i].send_flags & IBV_SEND_INLINE) != 0;
                wrs[i].wr_id = push(send_, wrs[i].wr_id,
                                    inlined ? std::span<ibv_sge const>{}
                                            : std::span<ibv_sge const>{wrs[i].sg_list, sge_count(wrs[i])});
            }
        } catch (...) {
            unwind(send_, first, wrs);
            throw;
        }
        return first;
    }
    /// As above for a receive chain.
    std::uint64_t record(ibv_recv_wr* wrs, std::size_t n) {
        std::lock_guard const lock(mutex_);
        std::uint64_t const first = recv_.next;
        try {
            for (std::size_t i = 0; i < n; ++i)
                wrs[i].wr_id = push(recv_, wrs[i].wr_id, std::span<ibv_sge const>{wrs[i].sg_list, sge_count(wrs[i])});
        } catch (...) {
            unwind(recv_, first, wrs);
            throw;
        }
        return first;
    }
    /// Records one send request written with the extended API; returns its tag (whose low bits
    /// are its sequence number, for `cancel_sends`).
    std::uint64_t record_send(std::uint64_t user_wr_id, unsigned flags, std::span<ibv_sge const> sges) {
        std::lock_guard const lock(mutex_);
        return push(send_, user_wr_id, (flags & IBV_SEND_INLINE) != 0 ? std::span<ibv_sge const>{} : sges);
    }

    /// Forgets the requests from sequence number (or tag) `from` on (not posted after all);
    /// returns the user's `wr_id` of the one at `from`.
    std::uint64_t cancel_sends(std::uint64_t from) noexcept {
        std::lock_guard const lock(mutex_);
        return cancel(send_, from & seq_mask);
    }
    std::uint64_t cancel_recvs(std::uint64_t from) noexcept {
        std::lock_guard const lock(mutex_);
        return cancel(recv_, from & seq_mask);
    }

    /// Accounts for completion `wc` of this QP: retires its request and every earlier one of
    /// the same queue, and puts the user's `wr_id` back into `wc`. Returns false, leaving `wc`
    /// as it is, when its `wr_id` is not one of this ledger's tags.
    bool complete(ibv_wc& wc) noexcept {
        if ((wc.wr_id & tag_bit) == 0) return false;
        bool const recv_tag = (wc.wr_id & recv_bit) != 0;
        // A successful completion names its queue: a receive from a shared receive queue whose
        // user wr_id looks like a send tag is told apart here.
        if (wc.status == IBV_WC_SUCCESS && ((wc.opcode & IBV_WC_RECV) != 0) != recv_tag) return false;
        std::lock_guard const lock(mutex_);
        queue& q = recv_tag ? recv_ : send_;
        std::uint64_t const seq = wc.wr_id & seq_mask;
        if (seq < q.front_seq || seq >= q.next) return false;
        wc.wr_id = q.records[seq - q.front_seq].user_wr_id;
        while (q.front_seq <= seq)
            pop_front(q);
        return true;
    }

    [[nodiscard]] std::uint64_t sends() const noexcept {
        std::lock_guard const lock(mutex_);
        return send_.records.size();
    }
    [[nodiscard]] std::uint64_t recvs() const noexcept {
        std::lock_guard const lock(mutex_);
        return recv_.records.size();
    }
    /// The user's `wr_id` of the oldest send in flight (meaningful when `sends()` is not 0).
    [[nodiscard]] std::uint64_t oldest_send_wr_id() const noexcept {
        std::lock_guard const lock(mutex_);
        return send_.records.empty() ? 0 : send_.records.front().user_wr_id;
    }
    /// Forgets every request (the QP was reset: its queues were emptied without completions).
    void forget_all() noexcept {
        std::lock_guard const lock(mutex_);
        release_all(send_);
        release_all(recv_);
    }

private:
    struct record_t {
        std::uint64_t user_wr_id;
        std::uint32_t lkeys; // how many entries of queue::lkeys are this request's
    };
    struct queue {
        std::deque<record_t> records;
        std::deque<std::uint32_t> lkeys; // the distinct non-inline lkeys of each record, in order
        std::uint64_t front_seq = 0;     // sequence number of records.front()
        std::uint64_t next = 0;          // sequence number of the next request
        std::uint64_t tag_bits = 0;      // tag_bit, and recv_bit for the receive queue
    };

    static std::size_t sge_count(ibv_send_wr const& wr) noexcept {
        return wr.sg_list == nullptr || wr.num_sge < 0 ? 0 : static_cast<std::size_t>(wr.num_sge);
    }
    static std::size_t sge_count(ibv_recv_wr const& wr) noexcept {
        return wr.sg_list == nullptr || wr.num_sge < 0 ? 0 : static_cast<std::size_t>(wr.num_sge);
    }

    // Appends a record; returns its tag. Strong guarantee: on an exception nothing is recorded.
    std::uint64_t push(queue& q, std::uint64_t user_wr_id, std::span<ibv_sge const> sges) {
        std::array<std::uint32_t, 16> local{};
        std::vector<std::uint32_t> many;
        std::span<std::uint32_t> distinct;
        if (sges.size() <= local.size()) {
            distinct = std::span{local}.first(sges.size());
        } else {
            many.resize(sges.size());
            distinct = many;
        }
        std::size_t n = 0;
        for (ibv_sge const& s : sges)
            if (s.length != 0 && std::find(distinct.begin(), distinct.begin() + static_cast<std::ptrdiff_t>(n),
                                           s.lkey) == distinct.begin() + static_cast<std::ptrdiff_t>(n))
                distinct[n++] = s.lkey;
        distinct = distinct.first(n);
        q.records.push_back({user_wr_id, static_cast<std::uint32_t>(n)});
        try {
            q.lkeys.insert(q.lkeys.end(), distinct.begin(), distinct.end());
            try {
                region_ledger::instance().acquire(ctx_, distinct);
            } catch (...) {
                q.lkeys.erase(q.lkeys.end() - static_cast<std::ptrdiff_t>(n), q.lkeys.end());
                throw;
            }
        } catch (...) {
            q.records.pop_back();
            throw;
        }
        q.tag_bits = tag_bit | (&q == &recv_ ? recv_bit : 0);
        return q.next++ | q.tag_bits;
    }

    // Undoes the records of a chain from sequence number `first` on and gives the requests
    // their user wr_ids back.
    template <class Wr>
    void unwind(queue& q, std::uint64_t first, Wr* wrs) noexcept {
        for (std::uint64_t seq = first; seq < q.next; ++seq)
            wrs[seq - first].wr_id = q.records[seq - q.front_seq].user_wr_id;
        (void)cancel(q, first);
    }

    void pop_front(queue& q) noexcept {
        release_front_lkeys(q, q.records.front().lkeys);
        q.records.pop_front();
        ++q.front_seq;
    }

    void release_front_lkeys(queue& q, std::uint32_t n) noexcept {
        std::array<std::uint32_t, 16> keys{};
        while (n != 0) {
            std::uint32_t const k = std::min<std::uint32_t>(n, keys.size());
            std::copy_n(q.lkeys.begin(), k, keys.begin());
            q.lkeys.erase(q.lkeys.begin(), q.lkeys.begin() + k);
            region_ledger::instance().release(ctx_, std::span{keys}.first(k));
            n -= k;
        }
    }

    // With the lock held.
    std::uint64_t cancel(queue& q, std::uint64_t from) noexcept {
        std::uint64_t user = 0;
        while (q.next > from && !q.records.empty()) {
            record_t const r = q.records.back();
            user = r.user_wr_id;
            std::array<std::uint32_t, 16> keys{};
            std::uint32_t n = r.lkeys;
            while (n != 0) {
                std::uint32_t const k = std::min<std::uint32_t>(n, keys.size());
                std::copy(q.lkeys.end() - k, q.lkeys.end(), keys.begin());
                q.lkeys.erase(q.lkeys.end() - k, q.lkeys.end());
                region_ledger::instance().release(ctx_, std::span{keys}.first(k));
                n -= k;
            }
            q.records.pop_back();
            --q.next;
        }
        return user;
    }

    void release_all(queue& q) noexcept {
        while (!q.records.empty())
            pop_front(q);
    }

    ibv_context const* ctx_;
    std::uint32_t qp_num_;
    mutable std::mutex mutex_;
    queue send_;
    queue recv_;
};

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
    /// accounts each with its QP's ledger. Returns the count or ibv_poll_cq(3)'s negative value.
    int poll(ibv_wc* out, int max) noexcept {
        std::lock_guard const lock(mutex_);
        int n = 0;
        while (n < max && !kept_.empty()) {
            out[n++] = kept_.front();
            kept_.pop_front();
        }
        if (n < max) {
            int const got = ::ibv_poll_cq(cq_, max - n, out + n);
            if (got < 0 && n == 0) return got;
            if (got > 0) n += got; // on a failure, the kept ones are still returned (and accounted)
        }
        for (int i = 0; i < n; ++i)
            if (qp_ledger* qp = find(out[i].qp_num); qp != nullptr) qp->complete(out[i]);
        return n;
    }

    /// Takes the CQ's completions: those of `qp`'s requests are accounted and dropped, the others
    /// kept for the next `poll`. Returns false when ibv_poll_cq(3) fails.
    /// @throws std::bad_alloc when a completion cannot be kept.
    bool drain_for(qp_ledger& qp) {
        std::lock_guard const lock(mutex_);
        for (auto it = kept_.begin(); it != kept_.end();) { // kept by an earlier drain of another QP
            if (it->qp_num == qp.qp_num() && qp.complete(*it))
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
                if (wc.qp_num != qp.qp_num() || !qp.complete(wc)) kept_.push_back(wc);
            }
            if (got < static_cast<int>(wcs.size())) return true;
        }
    }

private:
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
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        bool const in_error = ::ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0;
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
