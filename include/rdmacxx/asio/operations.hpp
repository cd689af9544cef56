#pragma once
/// @file
/// The Asio adapter's data-path operations on a `completion_dispatcher`: `async_post` (one typed
/// send-queue request, or a `chain` of them), `async_recv` (on a QP or an SRQ) and `async_wait`
/// (a batch of completions of a CQ). Each takes any Asio completion token (none: `default_token_t`)
/// and completes with `void(error_code, T)` whatever the token (completion.hpp).

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/wr.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// Send-queue requests posted together by `async_post` as one chain, one doorbell: the
/// operation completes with the completion of the last one, which is signaled; the others are
/// posted unsignaled (a failure of one of them completes the operation with its error).
/// `chain{rx::write{a, pa}, rx::write{b, pb}, rx::send{c}}`.
template <class... Wrs>
struct chain {
    static_assert(sizeof...(Wrs) > 0, "a chain holds at least one work request");
    /// The requests, in posting order.
    std::tuple<Wrs...> wrs;
    /// Holds copies of `w`.
    explicit chain(Wrs const&... w) : wrs(w...) {}
};

namespace detail {
// Posts copies of `wrs` tagged `tag`, the last signaled and the others not.
template <class QP, class... Wrs, std::size_t... I>
void post_tagged(QP& qp, std::uint64_t tag, std::tuple<Wrs...> const& wrs, std::index_sequence<I...>) {
    constexpr std::size_t last = sizeof...(Wrs) - 1;
    std::tuple<Wrs...> copy = wrs;
    ((void)std::get<I>(copy).id(tag).signaled(I == last), ...);
    qp.post(std::get<I>(copy)...);
}

// Takes a slot for `handler` and runs `post(tag)`; a refused post completes the operation with
// the refusal (argument_error or wr_error, nothing of it in flight: `post` refuses a QP whose CQ
// is not routed by the dispatcher, completion_dispatcher::route_from); no free slot completes it
// with ENOBUFS. `post` throws rdmacxx::error only. `qp` (null for an SRQ) and `cq` (null when
// not known) name where the operation goes, `srq` the SRQ of a receive (completion_dispatcher::forget,
// remove, and what is aborted when the QP or SRQ goes).
template <class Completer, class Handler, class Post>
void start(completion_dispatcher& d, Handler& handler, ibv_qp* qp, ibv_cq* cq, ibv_srq* srq, Post&& post) {
    auto const inside = d.enter(); // thread_rule.hpp: before anything is touched
    std::uint32_t const i = d.acquire<Completer>(handler, false, qp, cq, srq);
    if (i == completion_dispatcher::npos) [[unlikely]] {
        op_result const r{std::make_error_code(std::errc::no_buffer_space), {}, 0, {}};
        net::post(d.get_executor(), Completer::bind(std::move(handler), r));
        return;
    }
    try {
        post(d.tag(i));
    } catch (rdmacxx::error const& e) {
        d.fail(i, e.code(), std::current_exception());
        return;
    }
    d.watch();
}

/// The initiation of `async_post` on a QP of type `QP`.
template <class QP>
class initiate_post {
public:
    using executor_type = completion_dispatcher::executor_type;
    initiate_post(completion_dispatcher& d, QP& qp) noexcept : d_(&d), qp_(&qp) {}
    /// The dispatcher's executor.
    [[nodiscard]] executor_type get_executor() const noexcept { return d_->get_executor(); }
    template <class Handler, class... Wrs>
    void operator()(Handler handler, chain<Wrs...> const& c) const {
        ibv_qp* const native = qp_->native_handle();
        start<completer<false>>(
            *d_, handler, native, native != nullptr ? native->send_cq : nullptr, nullptr, [&](std::uint64_t tag) {
                if (native == nullptr) [[unlikely]]
                    rdmacxx::detail::throw_argument("async_post on a moved-from queue pair (it holds no QP)");
                d_->route_from(*qp_, native->send_cq);
                post_tagged(*qp_, tag, c.wrs, std::index_sequence_for<Wrs...>{});
            });
    }

private:
    completion_dispatcher* d_;
    QP* qp_;
};

/// The initiation of `async_recv` on a QP (`Target` a `queue_pair`) or an SRQ.
template <class Target>
class initiate_recv {
public:
    using executor_type = completion_dispatcher::executor_type;
    initiate_recv(completion_dispatcher& d, Target& target) noexcept : d_(&d), target_(&target) {}
    /// The dispatcher's executor.
    [[nodiscard]] executor_type get_executor() const noexcept { return d_->get_executor(); }
    template <class Handler, class Recv>
    void operator()(Handler handler, Recv const& r) const {
        ibv_qp* qp = nullptr; // an SRQ's receive names no QP and no CQ, but its SRQ
        ibv_cq* cq = nullptr;
        ibv_srq* srq = nullptr;
        if constexpr (!std::is_same_v<Target, rdmacxx::shared_receive_queue>) {
            qp = target_->native_handle();
            cq = qp != nullptr ? qp->recv_cq : nullptr;
        } else {
            srq = target_->native_handle();
        }
        start<completer<false>>(*d_, handler, qp, cq, srq, [&](std::uint64_t tag) {
            if constexpr (!std::is_same_v<Target, rdmacxx::shared_receive_queue>) {
                if (qp == nullptr) [[unlikely]]
                    rdmacxx::detail::throw_argument("async_recv on a moved-from queue pair (it holds no QP)");
                d_->route_from(*target_, cq);
            } else {
                if (srq == nullptr) [[unlikely]]
                    rdmacxx::detail::throw_argument(
                        "async_recv on a moved-from shared receive queue (it holds no SRQ)");
                d_->route_from(*target_);
            }
            Recv copy = r;
            target_->post_recv(copy.id(tag));
        });
    }

private:
    completion_dispatcher* d_;
    Target* target_;
};

/// The initiation of `async_wait` on a batch CQ.
template <class CQ>
class initiate_batch_wait {
public:
    using executor_type = completion_dispatcher::executor_type;
    initiate_batch_wait(completion_dispatcher& d, CQ& cq, std::span<work_completion> out) noexcept
        : d_(&d), cq_(&cq), out_(out) {}
    /// The dispatcher's executor.
    [[nodiscard]] executor_type get_executor() const noexcept { return d_->get_executor(); }
    template <class Handler>
    void operator()(Handler handler) const {
        using completer = detail::completer<true>;
        completion_dispatcher& d = *d_;
        auto const inside = d.enter(); // thread_rule.hpp: before anything is touched
        auto* entry = d.find(cq_->native_handle());
        if (entry == nullptr || entry->waiter != completion_dispatcher::npos) [[unlikely]]
            rdmacxx::detail::throw_argument("async_wait: the CQ already has a wait pending");
        std::size_t n = cq_->poll(out_);
        if (n == 0) {
            cq_->arm();
            n = cq_->poll(out_);
        }
        if (n != 0) {
            net::post(d.get_executor(), completer::bind(std::move(handler), detail::op_result{{}, {}, n, {}}));
            return;
        }
        std::uint32_t const i = d.acquire<completer>(handler, true, nullptr, cq_->native_handle());
        if (i == completion_dispatcher::npos) [[unlikely]] {
            detail::op_result const r{std::make_error_code(std::errc::no_buffer_space), {}, 0, {}};
            net::post(d.get_executor(), completer::bind(std::move(handler), r));
            return;
        }
        entry->waiter = i;
        entry->out = out_;
        d.ensure_reading();
    }

private:
    completion_dispatcher* d_;
    CQ* cq_;
    std::span<work_completion> out_;
};
} // namespace detail

/// Posts `c`'s requests to `qp`'s send queue as one chain and completes when the last one's
/// completion is reaped by `d`, with `(io::error_code, work_completion)` for every token: the
/// code in `wc_category()` when the completion failed (e.g. `IBV_WC_REM_ACCESS_ERR` for a bad
/// rkey), `asio::error::operation_aborted` when cancelled and flushed (see `cancel_mode`), the
/// errno of a refused post (EINVAL for bad input, nothing posted) or ENOBUFS when the dispatcher
/// has no free slot. `co_await` with `asio::use_awaitable` (and any token under
/// `io::as_exception`) throws the library's exception instead: `wc_error` for a failed
/// completion, `argument_error` / `wr_error` for a refused post, `rdmacxx::error` for the rest.
/// The requests' `wr_id`s and signaled flags are replaced (the `wr_id` names the operation's
/// slot). The memory they use must stay registered and untouched until the operation completes;
/// a cancelled operation completes only once its request's completion has been reaped
/// (`cancel_mode` says what the cancellation does meanwhile). Requests the transport does not
/// allow do not compile. `qp`'s send CQ must be added to `d`. No token: `default_token_t`.
/// Thread-safety: on `d`'s executor only; from a thread while another is inside `d`:
/// `io::thread_error` (with the thread check, thread_rule.hpp).
/// @see ibv_post_send(3)
template <transport Transport, completion_strategy Completion, post_policy Post, class... Wrs,
          class Token = default_token_t>
    requires(postable_on<Wrs, Transport>&&...)
auto async_post(completion_dispatcher& d, rdmacxx::queue_pair<Transport, Completion, Post>& qp, chain<Wrs...> const& c,
                Token&& token = default_token_t{}) {
    return net::async_initiate<Token, void(error_code, work_completion)>(
        detail::initiate_post<rdmacxx::queue_pair<Transport, Completion, Post>>{d, qp}, token, c);
}

/// Posts one send-queue request `wr` (send, send_imm, write, write_imm, read, compare_swap,
/// fetch_add, as the transport allows) and completes with its completion; see
/// `async_post(d, qp, chain, token)`.
/// @see ibv_post_send(3)
template <transport Transport, completion_strategy Completion, post_policy Post, class Wr,
          class Token = default_token_t>
    requires postable_on<Wr, Transport>
auto async_post(completion_dispatcher& d, rdmacxx::queue_pair<Transport, Completion, Post>& qp, Wr const& wr,
                Token&& token = default_token_t{}) {
    return async_post(d, qp, chain<Wr>{wr}, std::forward<Token>(token));
}

/// Posts receive `r` to `qp`'s receive queue and completes with its completion (`byte_len()`,
/// `imm_data()`, …), `(io::error_code, work_completion)`, errors as `async_post`'s (a QP moved
/// to ERR, e.g. by a peer's disconnect, completes it with `IBV_WC_WR_FLUSH_ERR`). `qp`'s receive
/// CQ must be added to `d`. No token: `default_token_t`.
/// Thread-safety: on `d`'s executor only; from a thread while another is inside `d`:
/// `io::thread_error` (with the thread check, thread_rule.hpp).
/// @see ibv_post_recv(3)
template <transport Transport, completion_strategy Completion, post_policy Post, recv_work_request Recv,
          class Token = default_token_t>
auto async_recv(completion_dispatcher& d, rdmacxx::queue_pair<Transport, Completion, Post>& qp, Recv const& r,
                Token&& token = default_token_t{}) {
    return net::async_initiate<Token, void(error_code, work_completion)>(
        detail::initiate_recv<rdmacxx::queue_pair<Transport, Completion, Post>>{d, qp}, token, r);
}

/// Posts receive `r` to `srq` and completes with the completion of the message that lands in
/// it, from whichever QP (`qp_num()` says which), as `async_recv` on a QP. Receives in an SRQ are
/// not flushed when a QP goes: they wait for the next message. Cancelling one waits for that
/// message too, under either `cancel_mode` (an SRQ has no QP to move to ERR). The CQ of the QPs
/// on `srq` must be added to `d`; an SRQ with receives pending in another live dispatcher is
/// refused (`argument_error`, EINVAL). Destroyed once no QP uses it, the SRQ tells `d`: its
/// pending receives complete with `asio::error::operation_aborted`. No token: `default_token_t`.
/// Thread-safety: on `d`'s executor only; from a thread while another is inside `d`:
/// `io::thread_error` (with the thread check, thread_rule.hpp).
/// @see ibv_post_srq_recv(3)
template <recv_work_request Recv, class Token = default_token_t>
auto async_recv(completion_dispatcher& d, rdmacxx::shared_receive_queue& srq, Recv const& r,
                Token&& token = default_token_t{}) {
    return net::async_initiate<Token, void(error_code, work_completion)>(
        detail::initiate_recv<rdmacxx::shared_receive_queue>{d, srq}, token, r);
}

/// Waits for completions of `cq` (added to `d` as `cq_mode::batch`) and completes with how
/// many it took into `out` (1 … `out.size()`): `(io::error_code, std::size_t)` for every token
/// (`use_awaitable` throws Asio's `system_error` with the code: a batch wait fails only with
/// `operation_aborted`, EIO or ENOBUFS, which have nothing more to say). Completions already
/// there are taken at once (the handler is posted); otherwise the CQ is armed, polled once more,
/// and the wait parks until the channel says the CQ has more. Cancellation completes it with
/// `operation_aborted` and takes nothing. `out` must stay valid until it completes. No token:
/// `default_token_t`.
/// @throws argument_error when `cq` is not a batch CQ of `d` or already has a wait pending
///         (nothing started); sys_error when polling or arming fails.
/// Thread-safety: on `d`'s executor only; from a thread while another is inside `d`:
/// `io::thread_error` (with the thread check, thread_rule.hpp).
/// @see ibv_poll_cq(3), ibv_req_notify_cq(3)
template <class Completion, class Token = default_token_t>
auto async_wait(completion_dispatcher& d, rdmacxx::completion_queue<Completion>& cq, std::span<work_completion> out,
                Token&& token = default_token_t{}) {
    auto* e = d.find(cq.native_handle());
    if (e == nullptr || !e->batch) [[unlikely]]
        rdmacxx::detail::throw_argument(
            "async_wait: the CQ is not a batch CQ of this dispatcher (add(cq, cq_mode::batch))");
    if (out.empty()) [[unlikely]]
        rdmacxx::detail::throw_argument("async_wait: the output span is empty");
    return net::async_initiate<Token, void(error_code, std::size_t)>(
        detail::initiate_batch_wait<rdmacxx::completion_queue<Completion>>{d, cq, out}, token);
}

} // namespace io
} // namespace v0
} // namespace rdmacxx
