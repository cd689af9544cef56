#pragma once
/// @file
/// `io::shared_receive_queue`: an SRQ as an Asio I/O object on an `io::completion_queue`, with
/// `get_executor()` and `async_recv` as a member. The QPs made on it (`io::queue_pair{pd, cq, srq,
/// caps}`, or a CM connection on `cq.resources(pd, &srq.srq())`) complete their receives on that
/// CQ.

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/completion_queue.hpp"
#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/operations.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/wr.hpp"

#include <cstdint>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// A shared receive queue served by an Asio execution context: a `rdmacxx::shared_receive_queue`
/// whose receives complete on the CQ of the QPs made on it, which must be `cq` (the QPs of an
/// `io::queue_pair` made on it are; a receive whose QP completes elsewhere is never seen by this
/// dispatcher). `async_recv(recv, token)` completes with the completion of the message that lands
/// in the receive, from whichever QP (`qp_num()` says which), as `io::async_recv(d, srq, …)`.
/// Destroyed once no QP uses it (the device refuses before, EBUSY, and keeps it), it tells the
/// dispatcher: its pending receives complete with `asio::error::operation_aborted`, posted.
/// Movable; `->` and `*` reach the SRQ (to arm its limit).
/// Thread-safety: as its dispatcher's (the context's own thread; docs/asio.md, "Threads").
/// @see ibv_create_srq(3), ibv_post_srq_recv(3)
template <completion_strategy Completion = event_driven>
class shared_receive_queue {
public:
    /// The dispatcher's executor.
    using executor_type = completion_dispatcher::executor_type;

    /// Makes an SRQ of at least `max_wr` receives of `max_sge` entries each in `pd`, for QPs
    /// whose receives complete on `cq`.
    /// @throws sys_error when ibv_create_srq(3) fails; orphaned_error when `cq`'s dispatcher is
    ///         gone.
    shared_receive_queue(protection_domain& pd, io::completion_queue<Completion>& cq, std::uint32_t max_wr,
                         std::uint32_t max_sge = 1)
        : srq_(pd, max_wr, max_sge), cq_(cq.cq().anchor_cell()), dispatcher_(cq.dispatcher().anchor_cell()),
          ex_(cq.get_executor()) {}

    /// The executor its receives complete on by default (its CQ's dispatcher's).
    [[nodiscard]] executor_type const& get_executor() const noexcept { return ex_; }
    /// The dispatcher that routes its completions.
    /// @throws orphaned_error when it was destroyed (its context shut down).
    [[nodiscard]] completion_dispatcher& dispatcher() const {
        return dispatcher_.get("io::shared_receive_queue", "completion dispatcher");
    }
    /// The CQ its QPs complete their receives on.
    /// @throws orphaned_error when it was destroyed.
    [[nodiscard]] rdmacxx::completion_queue<Completion>& cq() const {
        return cq_.get("io::shared_receive_queue", "completion queue");
    }
    /// The SRQ.
    [[nodiscard]] rdmacxx::shared_receive_queue& srq() noexcept { return srq_; }
    /// The SRQ.
    [[nodiscard]] rdmacxx::shared_receive_queue& operator*() noexcept { return srq_; }
    /// The SRQ.
    [[nodiscard]] rdmacxx::shared_receive_queue* operator->() noexcept { return &srq_; }

    /// Posts receive `r` to the SRQ; completes as `io::async_recv(d, srq, r, token)`
    /// (`void(error_code, work_completion)`).
    /// @throws orphaned_error when the dispatcher is gone (nothing posted).
    /// @see ibv_post_srq_recv(3)
    template <recv_work_request Recv, class Token = default_token_t>
    auto async_recv(Recv const& r, Token&& token = default_token_t{}) {
        return io::async_recv(dispatcher(), srq_, r, std::forward<Token>(token));
    }

private:
    rdmacxx::shared_receive_queue srq_;
    rdmacxx::detail::link<rdmacxx::completion_queue<Completion>> cq_;
    rdmacxx::detail::link<completion_dispatcher> dispatcher_;
    executor_type ex_;
};

} // namespace io
} // namespace v0
} // namespace rdmacxx
