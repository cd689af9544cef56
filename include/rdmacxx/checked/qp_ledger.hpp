#pragma once
/// @file
/// The requests of one `checked<C>` queue pair (see checked.hpp) that have been posted and not
/// yet completed, and the tags that map their completions back to them. Internals.

#include "rdmacxx/checked/failure_notes.hpp"
#include "rdmacxx/checked/region_ledger.hpp"
#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/error.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

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

} // namespace detail
} // namespace v0
} // namespace rdmacxx
