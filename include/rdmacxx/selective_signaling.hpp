#pragma once
/// @file
/// `selective_signaling`: a stream of send-queue requests over a queue pair that asks for a
/// completion on every n-th only and accounts for the rest.

#include "rdmacxx/cq.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

/// Selective signaling over a queue pair: asks for a completion on every `every`-th send-queue
/// request only, and accounts for the unsignaled ones, so that a long stream never overruns the
/// send queue (it waits for a signaled completion, retiring the whole batch before it, when
/// the queue is full) nor the CQ (one entry per batch).
///
/// It finds its QP and CQ wherever they have moved to (through their cells; see
/// docs/ownership.md), so any of the three may move while the stream runs; used after its QP or
/// CQ was destroyed, it throws `orphaned_error`. `QueuePair` is a `queue_pair` (any transport,
/// strategy and post policy, `checked` or not).
///
/// The QP's send CQ must serve this stream alone while it runs. A failed request completes even
/// when unsignaled: waiting then throws `wc_error`. The last request of a stream must be
/// signaled (`post(wr, true)`) or fall on a batch boundary before `finish()`.
/// Thread-safety: one thread at a time.
template <class QueuePair>
class selective_signaling {
public:
    using completion_type = typename QueuePair::completion_type;

    /// A stream over `qp` whose send completions arrive on `send_cq`, signaling every `every`-th
    /// request (1 ≤ every ≤ the QP's max_send_wr).
    /// @throws argument_error for `every` out of range.
    selective_signaling(QueuePair& qp, completion_queue<completion_type>& send_cq, std::uint32_t every)
        : qp_(qp.anchor_cell()), cq_(send_cq.anchor_cell()), every_(every), depth_(qp.capabilities().max_send_wr),
          batches_(depth_ + 1) {
        if (every == 0 || every > depth_) [[unlikely]]
            detail::throw_argument("selective signaling every " + std::to_string(every) +
                                   " requests does not fit a send queue of " + std::to_string(depth_));
    }

    /// Posts `wr`, signaled when it completes a batch of `every` or when `last` is true; first
    /// waits for the oldest batch when the send queue is full.
    /// @throws as `queue_pair::post`, and wc_error when a retired batch failed.
    template <class W>
    void post(W wr, bool last = false) {
        while (outstanding_ + 1 > depth_)
            retire_one();
        bool const signal = last || since_signal_ + 1 == every_;
        wr.signaled(signal);
        qp_.get("selective signaling stream", "queue pair").post(wr);
        ++outstanding_;
        ++posted_;
        ++since_signal_;
        if (signal) {
            batches_[tail_] = since_signal_;
            tail_ = (tail_ + 1) % batches_.size();
            since_signal_ = 0;
        }
    }

    /// Waits until every signaled batch has completed.
    /// @throws argument_error when unsignaled requests trail the last signaled one (their end
    ///         cannot be observed); wc_error when a batch failed.
    void finish() {
        if (since_signal_ != 0) [[unlikely]]
            detail::throw_argument(std::to_string(since_signal_) +
                                   " unsignaled requests trail the stream: post the last one with last = true");
        while (outstanding_ != 0)
            retire_one();
    }

    /// Requests posted so far.
    [[nodiscard]] std::uint64_t posted() const noexcept { return posted_; }
    /// Requests posted and not yet known to be complete.
    [[nodiscard]] std::uint32_t outstanding() const noexcept { return outstanding_; }

private:
    void retire_one() {
        if (head_ == tail_) [[unlikely]]
            detail::throw_argument("the send queue is full of unsignaled requests: signal more often");
        cq_.get("selective signaling stream", "CQ").wait_one().throw_if_error();
        outstanding_ -= batches_[head_];
        head_ = (head_ + 1) % batches_.size();
    }

    detail::link<QueuePair> qp_;                         // the QP's stable cell: valid when the QP moves
    detail::link<completion_queue<completion_type>> cq_; // the CQ's stable cell: valid when the CQ moves
    std::uint32_t every_;
    std::uint32_t depth_;
    std::vector<std::uint32_t> batches_; // sizes of the signaled batches in flight, a ring
    std::size_t head_ = 0, tail_ = 0;
    std::uint32_t since_signal_ = 0;
    std::uint32_t outstanding_ = 0;
    std::uint64_t posted_ = 0;
};

} // namespace v0
} // namespace rdmacxx
