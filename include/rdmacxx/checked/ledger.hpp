#pragma once
/// @file
/// The ledgers of `checked<C>` tracking (see checked.hpp): requests in flight per queue pair,
/// per CQ and per memory region, and what they know of failed requests. Internals.

#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/in_flight.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The process-wide count of requests in flight per memory region, keyed by device context and
/// lkey. Thread-safety: internally locked.
class region_ledger {
public:
    static region_ledger& instance() noexcept {
        static region_ledger ledger;
        return ledger;
    }

    /// Answers memory_region's question through `region_in_flight_hook`, installed by the first
    /// `acquire` (memory_region looks no further before).
    static std::uint64_t count_of(ibv_context const* ctx, std::uint32_t lkey) noexcept {
        return instance().count(ctx, lkey);
    }

    void acquire(ibv_context const* ctx, std::span<std::uint32_t const> lkeys) {
        region_in_flight_hook.store(&count_of, std::memory_order_release);
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
    mutable std::mutex mutex_;
    std::unordered_map<key, std::uint64_t, key_hash> counts_;
};

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

/// The requests of one checked QP that have been posted and not yet completed, in posting
/// order per queue. Posted requests carry a tag as `wr_id`: the top two bits say which queue
/// (0b10 send, 0b11 receive), the rest is the request's sequence number; `complete` maps a
/// completion back to the user's `wr_id`. A completion whose `wr_id` is not a tag of this
/// ledger's (a receive taken from a shared receive queue) is left as it is; one whose tag is
/// older than the oldest request on record is `stale` (see `complete`).
/// Thread-safety: internally locked (a poller and a poster may be different threads).
class qp_ledger {
public:
    static constexpr std::uint64_t tag_bit = std::uint64_t{1} << 63;
    static constexpr std::uint64_t recv_bit = std::uint64_t{1} << 62;
    static constexpr std::uint64_t seq_mask = recv_bit - 1;

    /// What `complete` made of a completion.
    enum class outcome {
        completed, ///< a request of this ledger's: retired, the user's `wr_id` put back
        not_ours,  ///< not a tag of this ledger's: left as it is
        stale,     ///< a tag older than the oldest on record: the misuse `report_stale_completion` names
        forgotten, ///< a request forgotten by `forget_all` (the QP was reset): to drop quietly
    };

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
                                            : std::span<ibv_sge const>{wrs[i].sg_list, sge_count(wrs[i])},
                                    operation_of(wrs[i]));
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
                wrs[i].wr_id =
                    push(recv_, wrs[i].wr_id, std::span<ibv_sge const>{wrs[i].sg_list, sge_count(wrs[i])}, {-1, 0, 0});
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
        return push(send_, user_wr_id, (flags & IBV_SEND_INLINE) != 0 ? std::span<ibv_sge const>{} : sges, {-2, 0, 0});
    }
    /// As above for a typed work request `w` (wr.hpp), whose operation, remote address and rkey
    /// are recorded too.
    template <class W>
    std::uint64_t record_send(W const& w) {
        operation op{static_cast<int>(W::opcode), 0, 0};
        if constexpr (requires { w.remote_address(); }) op = {op.opcode, w.remote_address(), w.rkey()};
        std::lock_guard const lock(mutex_);
        return push(send_, w.wr_id(), (w.flags() & IBV_SEND_INLINE) != 0 ? std::span<ibv_sge const>{} : w.sges(), op);
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
    /// the same queue, and puts the user's `wr_id` back into `wc`; a failed one's request is
    /// noted for `failed_completion_error`. Returns `not_ours`, leaving `wc` as it is, when its
    /// `wr_id` is not one of this ledger's tags; `stale` when the tag is older than the oldest
    /// request on record (posts to the QP from two threads raced: report and drop it), with its
    /// sequence number in `seq` and the oldest's in `oldest`; `forgotten` for a request of
    /// the queues a reset emptied.
    outcome complete(ibv_wc& wc, std::uint64_t* seq_out = nullptr, std::uint64_t* oldest = nullptr) noexcept {
        if ((wc.wr_id & tag_bit) == 0) return outcome::not_ours;
        bool const recv_tag = (wc.wr_id & recv_bit) != 0;
        // A successful completion names its queue: a receive from a shared receive queue whose
        // user wr_id looks like a send tag is told apart here.
        if (wc.status == IBV_WC_SUCCESS && ((wc.opcode & IBV_WC_RECV) != 0) != recv_tag) return outcome::not_ours;
        std::unique_lock lock(mutex_);
        queue& q = recv_tag ? recv_ : send_;
        std::uint64_t const seq = wc.wr_id & seq_mask;
        if (seq >= q.next) return outcome::not_ours;
        if (seq < q.front_seq) {
            if (seq >= q.forgotten_from && seq < q.forgotten_to) return outcome::forgotten;
            if (seq_out != nullptr) *seq_out = seq;
            if (oldest != nullptr) *oldest = q.front_seq;
            return outcome::stale;
        }
        record_t const& r = q.records[seq - q.front_seq];
        wc.wr_id = r.user_wr_id;
        tracked_request const request{recv_tag ? completion_side::receive : completion_side::send, r.op.opcode,
                                      r.op.remote_address, r.op.rkey};
        while (q.front_seq <= seq)
            pop_front(q);
        lock.unlock();
        if (wc.status != IBV_WC_SUCCESS) [[unlikely]]
            failure_notes::instance().note(wc, request);
        return outcome::completed;
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
    /// Completions of those requests still in a CQ are then `forgotten`, not `stale`.
    void forget_all() noexcept {
        std::lock_guard const lock(mutex_);
        for (queue* q : {&send_, &recv_}) {
            q->forgotten_from = q->front_seq;
            q->forgotten_to = q->next;
            release_all(*q);
        }
    }

private:
    struct operation {
        int opcode;                   // ibv_wr_opcode, -1 for a receive, -2 when not known
        std::uint64_t remote_address; // RDMA and atomics
        std::uint32_t rkey;
    };
    struct record_t {
        std::uint64_t user_wr_id;
        std::uint32_t lkeys; // how many entries of queue::lkeys are this request's
        operation op;
    };
    struct queue {
        std::deque<record_t> records;
        std::deque<std::uint32_t> lkeys;  // the distinct non-inline lkeys of each record, in order
        std::uint64_t front_seq = 0;      // sequence number of records.front()
        std::uint64_t next = 0;           // sequence number of the next request
        std::uint64_t tag_bits = 0;       // tag_bit, and recv_bit for the receive queue
        std::uint64_t forgotten_from = 0; // [from, to): the requests the last reset forgot
        std::uint64_t forgotten_to = 0;
    };

    static operation operation_of(ibv_send_wr const& wr) noexcept {
        int const opcode = static_cast<int>(wr.opcode);
        if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
            return {opcode, wr.wr.atomic.remote_addr, wr.wr.atomic.rkey};
        if (is_remote_opcode(opcode)) return {opcode, wr.wr.rdma.remote_addr, wr.wr.rdma.rkey};
        return {opcode, 0, 0};
    }

    static std::size_t sge_count(ibv_send_wr const& wr) noexcept {
        return wr.sg_list == nullptr || wr.num_sge < 0 ? 0 : static_cast<std::size_t>(wr.num_sge);
    }
    static std::size_t sge_count(ibv_recv_wr const& wr) noexcept {
        return wr.sg_list == nullptr || wr.num_sge < 0 ? 0 : static_cast<std::size_t>(wr.num_sge);
    }

    // Appends a record; returns its tag. Strong guarantee: on an exception nothing is recorded.
    std::uint64_t push(queue& q, std::uint64_t user_wr_id, std::span<ibv_sge const> sges, operation op) {
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
        q.records.push_back({user_wr_id, static_cast<std::uint32_t>(n), op});
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
