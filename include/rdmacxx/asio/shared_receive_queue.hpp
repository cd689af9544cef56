#pragma once
/// @file
/// `io::shared_receive_queue`: an SRQ as an Asio I/O object on an `io::completion_queue`, with
/// `get_executor()` and `async_recv` as a member. The QPs made on it (`io::queue_pair{pd, cq, srq,
/// caps}`, or a CM connection on `srq.resources(pd)`) complete their receives on that CQ.

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/completion_queue.hpp"
#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/operations.hpp"
#include "rdmacxx/cm/resources.hpp"
#include "rdmacxx/cq.hpp"
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
/// whose receives complete on the CQ of the QPs made on it, which must be `cq`: make them with
/// `io::queue_pair{pd, cq, srq, caps}` or on `srq.resources(pd)`, which see to it (a QP made
/// otherwise would deliver the completions of these receives to another dispatcher).
/// `async_recv(recv, token)` completes with the completion of the message that lands in the
/// receive, from whichever QP (`qp_num()` says which), as `io::async_recv(d, srq, …)`.
/// Destroy it after its QPs. Destroyed once no QP uses it, it tells the dispatcher: its pending
/// receives complete with `asio::error::operation_aborted`, posted. Before, the device refuses
/// (EBUSY): the SRQ is then left allocated, untold, and its receives stay pending until messages
/// complete them — after its last QP goes, never, and `run()` does not return.
/// Movable; `->` and `*` reach the SRQ (to arm its limit).
/// Thread-safety: as its dispatcher's (the context's own thread; docs/asio.md, "Threads"),
/// destruction included (on another thread while one is inside the dispatcher: the thread rule's
/// refusal, which ends the process from a destructor).
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
        : srq_(pd, max_wr, max_sge), cq_(cq.cq().anchor_cell()), channel_(cq.channel().anchor_cell()),
          dispatcher_(cq.dispatcher().anchor_cell()), ex_(cq.get_executor()) {}

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

    /// What a CM connection borrows to make its QP in `pd` with both queues on this SRQ's CQ and
    /// its receives from this SRQ: `cm::shared_qp<rc>(srq.resources(pd))`. `pd` must outlive the
    /// connection.
    /// @throws orphaned_error when the CQ or its channel was destroyed.
    [[nodiscard]] cm::resources<Completion> resources(protection_domain& pd) {
        rdmacxx::completion_queue<Completion>& q = cq();
        return {.pd = pd,
                .send_cq = q,
                .recv_cq = q,
                .srq = &srq_,
                .channel = &channel_.get("io::shared_receive_queue", "completion channel")};
    }

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
    rdmacxx::detail::link<completion_channel> channel_;
    rdmacxx::detail::link<completion_dispatcher> dispatcher_;
    executor_type ex_;
};

} // namespace io
} // namespace v0
} // namespace rdmacxx
