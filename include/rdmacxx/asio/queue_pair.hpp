#pragma once
/// @file
/// `io::basic_queue_pair`: a QP (or what owns one, a CM connection) as an Asio I/O object on an
/// `io::completion_queue`, with `get_executor()` and its operations as members
/// (`qp.async_post(rx::send{…}, token)`, `qp.async_recv(rx::recv{…}, token)`). `io::queue_pair` is
/// the one over a `rdmacxx::queue_pair`; `io::connection` (cm_engine.hpp) the one over a
/// `cm::connection`.

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/completion_queue.hpp"
#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/operations.hpp"
#include "rdmacxx/asio/service.hpp"
#include "rdmacxx/asio/shared_receive_queue.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/post_policy.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"

#include <concepts>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace io {

namespace detail {
/// The QP of `o`: `o` itself, or the QP of what owns one (`o.qp()`, a CM connection's).
template <class Object>
decltype(auto) qp_of(Object& o) {
    if constexpr (requires { o.qp(); })
        return (o.qp());
    else
        return (o);
}
} // namespace detail

/// A queue pair served by an Asio execution context: `Object` (a `rdmacxx::queue_pair<T,
/// Completion, P>`, or a `cm::connection<T, Completion, P>` that owns one) whose send and
/// receive queues complete on one `io::completion_queue`, with that CQ's executor and its
/// operations as members. Made, it is registered with the CQ's dispatcher (a QP with operations
/// pending in another dispatcher is refused); destroyed (or replaced by a move assignment), its
/// QP tells the dispatcher, and every operation still pending completes with
/// `asio::error::operation_aborted` once the QP is gone (posted: the requests' memory is the
/// caller's again when the handler runs). Nothing to `forget`. Movable: the dispatcher follows the
/// QP. `operator->` and `operator*` reach the object (to connect a QP, to disconnect a
/// connection).
///
/// Lifetime: the CQ's dispatcher must outlive the operations (it lives as long as the
/// execution context); the CQ itself must outlive the QP, as with verbs.
/// Thread-safety: as the dispatcher's (the context's own thread; docs/asio.md, "Threads").
/// @see ibv_post_send(3), ibv_post_recv(3), io::async_post, io::async_recv
template <class Object>
class basic_queue_pair {
public:
    /// The dispatcher's executor.
    using executor_type = completion_dispatcher::executor_type;
    /// What it holds: a QP or a connection.
    using object_type = Object;
    /// Its QP's type.
    using qp_type = std::remove_reference_t<decltype(detail::qp_of(std::declval<Object&>()))>;
    /// The QP's transport.
    using transport_type = typename qp_type::transport_type;
    /// The QP's completion strategy.
    using completion_type = typename qp_type::completion_type;

    /// Holds `object`, whose QP completes both its queues on `cq`, and registers the QP with
    /// `cq`'s dispatcher.
    /// @throws argument_error when `object` holds no QP (moved from), when its send or receive
    ///         queue completes on another CQ, or when the QP has operations pending in another
    ///         dispatcher; orphaned_error when `cq`'s dispatcher is gone; `object` is then
    ///         destroyed with the exception.
    basic_queue_pair(io::completion_queue<completion_type>& cq, Object&& object)
        : object_(std::move(object)), dispatcher_(cq.dispatcher().anchor_cell()), ex_(cq.get_executor()) {
        register_with(cq);
    }

    /// Makes a `rdmacxx::queue_pair` in `pd` with both queues on `cq`, sized by `caps`, and
    /// registers it with `cq`'s dispatcher (connect it through `->`).
    /// @throws sys_error when ibv_create_qp(3) fails; as the constructor above.
    basic_queue_pair(protection_domain& pd, io::completion_queue<completion_type>& cq,
                     qp_capabilities const& caps = {}) requires std::constructible_from < Object,
        protection_domain&, rdmacxx::completion_queue<completion_type>
    &, rdmacxx::completion_queue<completion_type>&, qp_capabilities const& > : object_(pd, cq.cq(), cq.cq(), caps),
        dispatcher_(cq.dispatcher().anchor_cell()), ex_(cq.get_executor()) {
        register_with(cq);
    }

    /// Makes a `rdmacxx::queue_pair` in `pd` whose send queue completes on `cq` and whose
    /// receives come from `srq` (post them there: `srq.async_recv`), which must serve `cq`.
    /// @throws argument_error when `srq` serves another CQ; as the constructor above.
    basic_queue_pair(protection_domain& pd, io::completion_queue<completion_type>& cq,
                     io::shared_receive_queue<completion_type>& srq,
                     qp_capabilities const& caps = {}) requires std::constructible_from < Object,
        protection_domain&, rdmacxx::completion_queue<completion_type>
    &, rdmacxx::completion_queue<completion_type>&, rdmacxx::shared_receive_queue&,
        qp_capabilities const& > : object_(pd, cq.cq(), checked_srq_cq(cq, srq), srq.srq(), caps),
        dispatcher_(cq.dispatcher().anchor_cell()), ex_(cq.get_executor()) {
        register_with(cq);
    }

    /// Holds `object`, a CM connection whose CQ has a completion channel (one that made its own
    /// CQ, `event_driven`, or one on shared resources that name their channel), and routes its
    /// CQ by the dispatcher of that channel in `ex`'s execution context (`dispatcher_for`, made
    /// with `opt` when it is new; the CQ is added unless it is already). The connection's own CQ
    /// and channel go with it; their dispatcher stays in the service until the context goes or
    /// the next lookup finds the channel gone.
    /// @throws argument_error when the connection has no completion channel (`cq_channel()` is
    ///         null) or its two queues complete on different CQs; as the first constructor.
    template <class Executor>
        requires requires(Object& o, Executor const& e) {
            o.cq_channel();
            o.cq();
            net::query(e, net::execution::context);
        }
    basic_queue_pair(Executor const& ex, Object&& object, dispatcher_options const& opt = {})
        : object_(std::move(object)) {
        completion_channel* const channel = object_.cq_channel();
        if (channel == nullptr) [[unlikely]]
            rdmacxx::detail::throw_argument("io::connection: the connection's CQ has no completion channel (made "
                                            "on resources without one, or busy_poll): nothing to wait on");
        auto& cq = object_.cq();
        completion_dispatcher& d = dispatcher_for(ex, *channel, opt);
        if (d.find(cq.native_handle()) == nullptr) d.add(cq);
        dispatcher_ = d.anchor_cell();
        ex_ = d.get_executor();
        register_with(cq);
    }

    /// The executor its operations complete on by default (its CQ's dispatcher's).
    [[nodiscard]] executor_type const& get_executor() const noexcept { return ex_; }
    /// The dispatcher that routes its completions.
    /// @throws orphaned_error when it was destroyed (its context shut down).
    [[nodiscard]] completion_dispatcher& dispatcher() const {
        return dispatcher_.get("io::queue_pair", "completion dispatcher");
    }
    /// The object held.
    [[nodiscard]] Object& operator*() noexcept { return object_; }
    /// The object held.
    [[nodiscard]] Object* operator->() noexcept { return &object_; }
    /// Its QP.
    [[nodiscard]] qp_type& qp() { return detail::qp_of(object_); }

    /// Posts `c`'s requests as one chain; completes as `io::async_post(d, qp, c, token)`
    /// (`void(error_code, work_completion)`).
    /// @throws orphaned_error when the dispatcher is gone (nothing posted).
    /// @see ibv_post_send(3)
    template <class... Wrs, class Token = default_token_t>
        requires(postable_on<Wrs, transport_type>&&...)
    auto async_post(chain<Wrs...> const& c, Token&& token = default_token_t{}) {
        return io::async_post(dispatcher(), qp(), c, std::forward<Token>(token));
    }
    /// Posts send-queue request `wr` (what the transport allows; anything else does not compile);
    /// completes as `io::async_post(d, qp, wr, token)` (`void(error_code, work_completion)`).
    /// @throws orphaned_error when the dispatcher is gone (nothing posted).
    /// @see ibv_post_send(3)
    template <class Wr, class Token = default_token_t>
        requires postable_on<Wr, transport_type>
    auto async_post(Wr const& wr, Token&& token = default_token_t{}) {
        return io::async_post(dispatcher(), qp(), wr, std::forward<Token>(token));
    }
    /// Posts receive `r`; completes as `io::async_recv(d, qp, r, token)`
    /// (`void(error_code, work_completion)`).
    /// @throws orphaned_error when the dispatcher is gone (nothing posted).
    /// @see ibv_post_recv(3)
    template <recv_work_request Recv, class Token = default_token_t>
    auto async_recv(Recv const& r, Token&& token = default_token_t{}) {
        return io::async_recv(dispatcher(), qp(), r, std::forward<Token>(token));
    }

private:
    static rdmacxx::completion_queue<completion_type>& checked_srq_cq(io::completion_queue<completion_type>& cq,
                                                                      io::shared_receive_queue<completion_type>& srq) {
        if (&srq.cq() != &cq.cq()) [[unlikely]]
            rdmacxx::detail::throw_argument("io::queue_pair: the shared receive queue serves another CQ than the one "
                                            "given: its receives would complete where nobody waits for them");
        return cq.cq();
    }
    void register_with(io::completion_queue<completion_type>& cq) { register_with(cq.cq()); }
    void register_with(rdmacxx::completion_queue<completion_type>& cq) {
        qp_type& q = qp();
        ibv_qp* const native = q.native_handle();
        if (native == nullptr) [[unlikely]]
            rdmacxx::detail::throw_argument("io::queue_pair: the object holds no QP (moved from)");
        if (native->send_cq != cq.native_handle() || native->recv_cq != cq.native_handle()) [[unlikely]]
            rdmacxx::detail::throw_argument("io::queue_pair: the QP's send and receive queues must complete on the "
                                            "io::completion_queue given (make the QP on cq.cq(), or a connection "
                                            "on cq.resources(pd))");
        completion_dispatcher& d = dispatcher();
        auto const inside = d.enter(); // thread_rule.hpp: before anything is touched
        d.route_from(q, native->send_cq);
    }

    Object object_;
    rdmacxx::detail::link<completion_dispatcher> dispatcher_;
    executor_type ex_;
};

/// A `rdmacxx::queue_pair` as an Asio I/O object: `io::queue_pair<rc> qp{pd, cq, caps};`.
template <transport Transport, completion_strategy Completion = event_driven, post_policy Post = legacy_post>
using queue_pair = basic_queue_pair<rdmacxx::queue_pair<Transport, Completion, Post>>;

} // namespace io
} // namespace v0
} // namespace rdmacxx
