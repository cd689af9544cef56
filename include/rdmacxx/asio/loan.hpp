#pragma once
/// @file
/// `io::loan`: memory lent to the peer of an RC queue pair through a type 2 memory window, and
/// the wait for the peer's notice that revokes the window by itself when it ends without one (a
/// timer through `||`, a cancellation, a failed receive): its handler runs only once the LOCAL
/// INVALIDATE has completed, so that the memory is the caller's again when it runs and the peer's
/// late RDMA WRITE or READ through the span it was lent fails at the peer with a remote access
/// error.

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/operations.hpp"
#include "rdmacxx/asio/queue_pair.hpp"
#include "rdmacxx/asio/receive_pool.hpp"
#include "rdmacxx/detail/quirks.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/memory_window.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/work_completion.hpp"

#include <cstddef>
#include <cstdint>
#include <system_error>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace io {

template <class QP>
class loan;

namespace detail {

/// What a loan's step posts: a bind, a revocation asked for, or the revocation a failed wait makes.
enum class loan_kind { bind, revoke, wait_revoke };

/// The handler of a loan's bind or revocation: notes the outcome in the loan, then completes
/// the caller's handler with it. Its associated executor and allocator are the handler's, and so
/// is its cancellation slot but for a wait's revocation: that one no cancellation may stop.
template <class Loan, class Handler, loan_kind Kind>
struct loan_step {
    Loan* owner;
    Handler handler;
    error_code reason{}; // a wait's revocation: what the wait failed with
    void operator()(error_code ec, work_completion wc) {
        owner->note(Kind != loan_kind::bind, ec);
        if constexpr (Kind == loan_kind::wait_revoke)
            // The wait's own failure once the window is revoked; the revocation's when it is not
            // (the peer may still reach the memory: loan::async_wait_return).
            std::move(handler)(ec ? ec : reason, received_message{});
        else
            std::move(handler)(ec, wc);
    }
};

/// The handler of a loan's wait on a receive pool: a message is handed on (a SEND with
/// invalidate of the window ends the loan); a wait that ends without one revokes the window
/// first when it is lent. Its associated executor, allocator and cancellation slot are the
/// handler's.
template <class Loan, class Handler>
struct loan_wait {
    Loan* owner;
    Handler handler;
    void operator()(error_code ec, received_message m) {
        if (!ec) {
            owner->returned(m.completion());
            std::move(handler)(ec, std::move(m));
            return;
        }
        if (!owner->lent()) {
            std::move(handler)(ec, std::move(m));
            return;
        }
        owner->revoke_for(std::move(handler), ec);
    }
};

} // namespace detail

/// Memory of a region lent to the peer of an RC QP through a type 2 memory window, revoked
/// before it is reused. `async_lend` binds the window over `length` bytes of a region (BIND MW on
/// the QP); `remote()` is the span to send the peer (address, length, rkey);
/// `async_wait_return(pool)` waits for the peer's notice on a receive pool of the QP; a wait that
/// ends without it revokes the window (LOCAL INVALIDATE) and completes only once the invalidate's
/// completion is reaped, so that when its handler runs the peer's late WRITE or READ through
/// `remote()` fails at the peer with IBV_WC_REM_ACCESS_ERR and the memory is the caller's again:
///
/// ```cpp
/// rxa::loan lent{qp, window};                       // an io::queue_pair<rc> or io::connection<rc>
/// co_await lent.async_lend(mr, offset, bytes, rx::access::remote_write, asio::use_awaitable);
/// send_to_peer(lent.remote());
/// auto r = co_await (lent.async_wait_return(pool, asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
/// // either way the memory may be reused now: on a timeout the window was revoked first
/// ```
///
/// A notice sent as SEND with invalidate naming the window (`rx::send_inv{note, lent_span}`)
/// revokes it at the peer's side: the loan ends with the message, nothing to post. After a plain
/// notice the window stays bound (the peer promised, the device does not know): `async_revoke`
/// ends the loan. A window takes 256 binds (`memory_window::binds_left`): then lend through a new
/// window and keep the old one allocated.
///
/// Ownership: the QP (and the dispatcher that routes it), the window and the loan must outlive
/// its operations; the loan is neither copied nor moved. Thread-safety: the dispatcher's (one
/// thread at a time, docs/asio.md "Threads").
/// @see ibv_post_send(3) (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV), ibv_alloc_mw(3)
template <class QP>
class loan {
public:
    /// The dispatcher's executor.
    using executor_type = completion_dispatcher::executor_type;

    /// A loan of `window` (type 2, of `qp`'s domain) over `qp`, an RC QP routed by `d`; nothing lent yet.
    /// @throws sys_error when ibv_query_device(3) fails (the device's vendor names its
    ///         SEND-with-invalidate flag, detail/quirks.hpp)
    loan(completion_dispatcher& d, QP& qp, memory_window<2>& window)
        : d_(&d), qp_(&qp), window_(&window),
          with_inv_(rdmacxx::detail::quirks::with_inv_flags(qp.pd().context().query_device().orig_attr.vendor_id)) {
        static_assert(std::is_same_v<typename QP::transport_type, rc>, "a loan lends memory over an RC queue pair");
    }
    /// A loan of `window` over the QP of `qp`, an `io::queue_pair` or `io::connection` of RC.
    template <class Object>
    loan(basic_queue_pair<Object>& qp, memory_window<2>& window) : loan(qp.dispatcher(), qp.qp(), window) {}
    loan(loan const&) = delete;
    loan& operator=(loan const&) = delete;
    ~loan() = default;

    /// The dispatcher's executor.
    [[nodiscard]] executor_type get_executor() const noexcept { return d_->get_executor(); }
    /// Whether the peer may reach the memory now: from the moment a bind is posted until a
    /// revocation completes (by `async_revoke`, a failed wait, or the peer's SEND with invalidate).
    /// A bind that failed lends nothing.
    [[nodiscard]] bool lent() const noexcept { return lent_; }
    /// The span the peer reaches (address, length, rkey): the window's last bind.
    [[nodiscard]] remote_span<std::byte> remote() const noexcept { return window_->remote(); }
    /// The window.
    [[nodiscard]] memory_window<2>& window() const noexcept { return *window_; }
    /// Revocations completed so far (by `async_revoke`, a failed wait, or the peer).
    [[nodiscard]] std::uint64_t revocations() const noexcept { return revoked_; }

    /// Binds the window over `length` bytes at `offset` of `mr`, granting `rights` (remote read,
    /// write, atomic) to the QP's peer, and completes with the bind's completion,
    /// `(io::error_code, work_completion)`, as `io::async_post`. Send `remote()` to the peer once
    /// it has completed without error. No token: `default_token_t`.
    /// @throws argument_error (nothing posted) when the loan is lent already (revoke it first),
    ///         and for what `bind_mw` refuses: bytes beyond the region, a region without
    ///         `access::mw_bind`, rights a window cannot grant, a window with no `binds_left()`.
    /// @see ibv_post_send(3) (IBV_WR_BIND_MW)
    template <class Token = default_token_t>
    auto async_lend(memory_region const& mr, std::size_t offset, std::size_t length, access rights,
                    Token&& token = default_token_t{}) {
        if (lent_) [[unlikely]]
            rdmacxx::detail::throw_argument("io::loan: the window is lent already (async_revoke it first)");
        bind_mw const wr{*window_, mr, offset, length, rights}; // refuses bad input before anything is posted
        return net::async_initiate<Token, void(error_code, work_completion)>(
            [this, wr](auto handler) {
                using step = detail::loan_step<loan, std::decay_t<decltype(handler)>, detail::loan_kind::bind>;
                lent_ = true; // from the post: a peer may hold the rkey as soon as the bind is done
                io::async_post(*d_, *qp_, wr, step{this, std::move(handler)});
            },
            token);
    }

    /// Waits for the next message of `pool` (a receive pool of the QP or of its SRQ: the peer's
    /// notice) and completes with it, `(io::error_code, received_message)`, as
    /// `pool.async_receive`. A SEND with invalidate naming the window ends the loan. When the
    /// wait ends without a message (cancelled: `co_await (lent.async_wait_return(pool) ||
    /// timer)` on a timeout; a failed receive, its QP in ERR) while the window is lent, the window
    /// is revoked first (LOCAL INVALIDATE on the QP, which no cancellation stops) and the handler
    /// runs once its completion is reaped, with the wait's own error (`operation_aborted` when
    /// cancelled) and an empty message: the memory is the caller's again. When the invalidate
    /// fails too (its QP in ERR: `IBV_WC_WR_FLUSH_ERR`), the handler gets that failure and
    /// `lent()` stays true: the peer cannot reach the memory through the QP in ERR, but it may once
    /// the QP is connected again; destroy the QP (or its connection) before reusing the memory.
    /// No token: `default_token_t`.
    /// @see io::receive_pool::async_receive, ibv_post_send(3) (IBV_WR_LOCAL_INV)
    template <class Target, class Token = default_token_t>
    auto async_wait_return(receive_pool<Target>& pool, Token&& token = default_token_t{}) {
        return net::async_initiate<Token, void(error_code, received_message)>(
            [this, &pool](auto handler) {
                pool.async_receive(detail::loan_wait<loan, std::decay_t<decltype(handler)>>{this, std::move(handler)});
            },
            token);
    }

    /// Revokes the window (LOCAL INVALIDATE on the QP) and completes with the invalidate's
    /// completion, `(io::error_code, work_completion)`; once it has completed without error the
    /// peer's access through `remote()` fails with a remote access error. Nothing lent: completes
    /// at once (posted) without error and an empty completion. No token: `default_token_t`.
    /// @see ibv_post_send(3) (IBV_WR_LOCAL_INV)
    template <class Token = default_token_t>
    auto async_revoke(Token&& token = default_token_t{}) {
        return net::async_initiate<Token, void(error_code, work_completion)>(
            [this](auto handler) {
                using handler_type = std::decay_t<decltype(handler)>;
                if (!lent_) {
                    net::post(get_executor(), detail::bound_handler<handler_type, error_code, work_completion>{
                                                  std::move(handler), error_code{}, work_completion{}});
                    return;
                }
                using step = detail::loan_step<loan, handler_type, detail::loan_kind::revoke>;
                io::async_post(*d_, *qp_, local_invalidate{*window_}, step{this, std::move(handler)});
            },
            token);
    }

    /// @cond
    // A bind or revocation completed with `ec`.
    void note(bool revoking, error_code ec) noexcept {
        if (revoking) {
            if (!ec) {
                lent_ = false;
                ++revoked_;
            }
        } else if (ec) {
            lent_ = false; // nothing bound
        }
    }
    // A message arrived: a SEND with invalidate of the window ends the loan.
    void returned(work_completion const& wc) noexcept {
        if (lent_ && (wc.native().wc_flags & with_inv_) != 0 && wc.native().invalidated_rkey == window_->rkey()) {
            lent_ = false;
            ++revoked_;
        }
    }
    // The wait ended with `reason` while lent: revoke, then complete `handler` (a wait's).
    template <class Handler>
    void revoke_for(Handler&& handler, error_code reason) {
        using step = detail::loan_step<loan, std::decay_t<Handler>, detail::loan_kind::wait_revoke>;
        try {
            io::async_post(*d_, *qp_, local_invalidate{*window_}, step{this, std::forward<Handler>(handler), reason});
        } catch (rdmacxx::error const& e) { // the dispatcher refused to start it: the memory is still lent
            std::forward<Handler>(handler)(error_code{e.code()}, received_message{});
        }
    }
    /// @endcond

private:
    completion_dispatcher* d_;
    QP* qp_;
    memory_window<2>* window_;
    unsigned with_inv_;
    bool lent_ = false;
    std::uint64_t revoked_ = 0;
};

/// The loan of a window over an `io::queue_pair` or `io::connection`'s QP.
template <class Object>
loan(basic_queue_pair<Object>&, memory_window<2>&) -> loan<typename basic_queue_pair<Object>::qp_type>;

} // namespace io
} // namespace v0
} // namespace rdmacxx

/// @cond
// A loan's steps have their handler's associated executor, allocator and cancellation slot, but
// for the revocation a failed wait makes, which has no cancellation slot: nothing may stop it.
template <template <class, class> class Associator, class Loan, class Handler, class Default>
struct RDMACXX_ASIO_NS::associator<Associator, rdmacxx::io::detail::loan_wait<Loan, Handler>, Default>
    : Associator<Handler, Default> {
    static typename Associator<Handler, Default>::type get(rdmacxx::io::detail::loan_wait<Loan, Handler> const& h,
                                                           Default const& c = Default()) noexcept {
        return Associator<Handler, Default>::get(h.handler, c);
    }
};
template <template <class, class> class Associator, class Loan, class Handler, rdmacxx::io::detail::loan_kind Kind,
          class Default>
    requires(Kind != rdmacxx::io::detail::loan_kind::wait_revoke)
struct RDMACXX_ASIO_NS::associator<Associator, rdmacxx::io::detail::loan_step<Loan, Handler, Kind>, Default>
    : Associator<Handler, Default> {
    static typename Associator<Handler, Default>::type get(rdmacxx::io::detail::loan_step<Loan, Handler, Kind> const& h,
                                                           Default const& c = Default()) noexcept {
        return Associator<Handler, Default>::get(h.handler, c);
    }
};
template <class Loan, class Handler, class Executor>
struct RDMACXX_ASIO_NS::associated_executor<
    rdmacxx::io::detail::loan_step<Loan, Handler, rdmacxx::io::detail::loan_kind::wait_revoke>, Executor>
    : RDMACXX_ASIO_NS::associated_executor<Handler, Executor> {
    static typename RDMACXX_ASIO_NS::associated_executor<Handler, Executor>::type
    get(rdmacxx::io::detail::loan_step<Loan, Handler, rdmacxx::io::detail::loan_kind::wait_revoke> const& h,
        Executor const& ex = Executor()) noexcept {
        return RDMACXX_ASIO_NS::associated_executor<Handler, Executor>::get(h.handler, ex);
    }
};
template <class Loan, class Handler, class Allocator>
struct RDMACXX_ASIO_NS::associated_allocator<
    rdmacxx::io::detail::loan_step<Loan, Handler, rdmacxx::io::detail::loan_kind::wait_revoke>, Allocator>
    : RDMACXX_ASIO_NS::associated_allocator<Handler, Allocator> {
    static typename RDMACXX_ASIO_NS::associated_allocator<Handler, Allocator>::type
    get(rdmacxx::io::detail::loan_step<Loan, Handler, rdmacxx::io::detail::loan_kind::wait_revoke> const& h,
        Allocator const& a = Allocator()) noexcept {
        return RDMACXX_ASIO_NS::associated_allocator<Handler, Allocator>::get(h.handler, a);
    }
};
/// @endcond
