#pragma once
/// @file
/// The RDMA CM handshake, written once: one state machine (`detail::handshake`) per connection
/// being made — resolve the address, resolve the route, take the QP from its source, connect or
/// accept, established — advanced by the events of its id on a `cm::engine` and bounded by each
/// step's deadline. Here too is the active side's one connect (the QP from a `cm::qp_source`, see
/// cm/resources.hpp), with two drivers: `cm::connect(engine&, …)` (the engine's owner drives it) and
/// `cm::connect(…)` (blocking: the same machine on an engine of its own). The passive side's
/// accept is in cm/listener.hpp; the Asio driver in asio/cm_engine.hpp.

#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/cm/engine.hpp"

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// The default `before_accept` of `connect_request::accept`: does nothing.
struct no_preparation {
    /// Does nothing with the connection.
    template <class Connection>
    void operator()(Connection&) const noexcept {}
};

namespace detail {

/// Refuses a QP source the handshake could not use, before anything is sent: one that names
/// both shared resources and a QP of the user's, or, for a post policy other than
/// `legacy_post` (the CM makes legacy QPs only), one without a QP of the user's.
/// @throws argument_error.
template <transport Transport, completion_strategy Completion, post_policy Post>
void check_source(cm::qp_source<Transport, Completion, Post> const& src) {
    bool const user = src.user.erased() != nullptr;
    if (src.shared && user) [[unlikely]]
        rdmacxx::detail::throw_argument("a QP source names both shared resources and a queue pair of yours; nothing "
                                        "was sent");
    if constexpr (!std::is_same_v<Post, legacy_post>) {
        if (!user) [[unlikely]]
            rdmacxx::detail::throw_argument("a connection of a post policy other than legacy_post takes its queue "
                                            "pair from you (cm::user_qp): the CM makes legacy_post QPs only; nothing "
                                            "was sent");
    }
}

/// Hands the QP source to `c` (its id resolved or accepted): makes or borrows the resources and
/// makes the QP on the id, or adopts the user's QP and moves it to INIT with the CM's attributes.
/// `adopted` is set once a user's QP belongs to the connection (a QP refused by `adopt` — in use,
/// or on another device — is left as it is).
template <transport Transport, completion_strategy Completion, post_policy Post>
void take_qp(connection<Transport, Completion, Post>& c, cm::qp_source<Transport, Completion, Post> const& src,
             connection_options const& opt, bool& adopted) {
    if (queue_pair<Transport, Completion, Post>* const qp = src.user.get_if()) {
        c.adopt(*qp);
        adopted = true;
        c.cm_id().modify_qp(qp->native_handle(), IBV_QPS_INIT, opt.settings);
        return;
    }
    if (src.user.erased()) [[unlikely]]
        rdmacxx::detail::throw_orphaned("connection", "queue pair");
    if constexpr (std::is_same_v<Post, legacy_post>) {
        if (src.shared)
            c.borrow(*src.shared);
        else
            c.make_own(opt.cq_entries);
        c.create_qp(opt.caps);
    }
}

/// One connection being made, on either side: the state machine of the CM handshake. `Done` is
/// called once with `(std::exception_ptr, std::optional<connection>)`: the connection,
/// established, or the error that ended the handshake (the id and whatever the handshake made
/// are then destroyed; a QP of the user's is in ERR). `BeforeAccept` runs on the passive side
/// once the QP exists and before the accept is sent; bytes it returns (a vector, an array, a
/// span of `std::byte`) are the accept's private data, in place of the options'.
template <transport Transport, completion_strategy Completion, post_policy Post, class Done,
          class BeforeAccept = no_preparation>
class handshake final : public pending {
public:
    using connection_type = connection<Transport, Completion, Post>;

    /// Active side: makes the id on `eng`'s channel and starts resolving `destination`.
    /// @throws argument_error for private data over the limit; sys_error, address_error when
    ///         the id cannot be made or rdma_resolve_addr(3) refuses (nothing was sent).
    handshake(engine& eng, address const& destination, qp_source<Transport, Completion, Post> src,
              connection_options opt, Done done)
        : engine_(&eng), src_(std::move(src)), opt_(std::move(opt)), done_(std::move(done)),
          what_(destination.to_string()) {
        check_source(src_);
        check_private_data(opt_.private_data, private_data_message::connect, port_space_for<Transport>);
        cm::id cm_id{eng.channel(), port_space_for<Transport>};
        if (opt_.type_of_service) cm_id.set_type_of_service(*opt_.type_of_service);
        if (opt_.reuse_address) cm_id.set_reuse_address(true);
        c_.emplace(eng.shared_channel(), std::move(cm_id), opt_.deadlines.of(step::disconnect));
        key_ = c_->cm_id().native_handle();
        auto const timeout = opt_.deadlines.of(step::resolve_address);
        c_->cm_id().resolve_address(destination, timeout, opt_.source ? &*opt_.source : nullptr);
        next(step::resolve_address, rdmacxx::detail::saturating_add(timeout, std::chrono::milliseconds{1000}));
    }

    /// Passive side: the id of a connect request (moved to `eng`'s channel when on another),
    /// its QP taken from `src`, `before_accept` called, the accept sent. UD is then connected
    /// (`connected()`); RC and UC wait for `established`. A call the device or the CM refuses
    /// on this request (a `sys_error`: e.g. the client left before its QP was made, and the
    /// kernel refuses rdma_init_qp_attr(3) on its id with EINVAL) is this request's failure:
    /// kept (`failed()`) for `done`, not thrown.
    /// @throws argument_error for private data over the limit, settings the device refuses, a
    ///         QP on another device or not in RESET (nothing sent); what `before_accept` throws
    ///         other than a sys_error. A QP of the user's is in ERR when an error leaves.
    handshake(engine& eng, cm::id&& request_id, std::vector<std::byte> peer_data, connection_data const& peer,
              qp_source<Transport, Completion, Post> src, connection_options opt, BeforeAccept before_accept, Done done)
        : engine_(&eng), src_(std::move(src)), opt_(std::move(opt)), done_(std::move(done)),
          what_(request_id.peer_address().to_string()) {
        check_source(src_);
        check_private_data(opt_.private_data, private_data_message::accept, port_space_for<Transport>);
        request_id.check_settings(opt_.settings, Transport::qp_type,
                                  "; nothing was sent (reject the request yourself)");
        if (request_id.native_handle()->channel != eng.channel().native_handle()) request_id.migrate(eng.channel());
        c_.emplace(eng.shared_channel(), std::move(request_id), opt_.deadlines.of(step::disconnect));
        key_ = c_->cm_id().native_handle();
        c_->set_peer(std::move(peer_data), peer);
        try {
            take_qp(*c_, src_, opt_, adopted_);
            prepare(before_accept);
            if (auto* const qp = src_.user.get_if()) {
                c_->cm_id().modify_qp(qp->native_handle(), IBV_QPS_RTR, opt_.settings);
                c_->cm_id().modify_qp(qp->native_handle(), IBV_QPS_RTS, opt_.settings);
                c_->cm_id().accept(opt_.settings, opt_.private_data, qp->qp_num(), qp->native_handle()->srq != nullptr);
            } else {
                c_->cm_id().accept(opt_.settings, opt_.private_data);
            }
        } catch (sys_error const&) { // this request's failure, not the server's
            fail_user_qp();
            error_ = std::current_exception();
            return;
        } catch (...) {
            fail_user_qp();
            throw;
        }
        if constexpr (Transport::connected)
            next(step::accept, opt_.deadlines.of(step::accept));
        else
            connected_ = true;
    }

    /// A handshake abandoned before it finished (its engine destroyed, or the blocking driver's
    /// wait failing) leaves a user's QP in ERR, as a failed one does.
    ~handshake() override {
        if (!finished_) fail_user_qp();
    }
    handshake(handshake const&) = delete;
    handshake& operator=(handshake const&) = delete;

    /// True when the handshake connected without waiting (a UD accept): `finish()` reports it.
    [[nodiscard]] bool connected() const noexcept { return connected_; }
    /// True when the handshake failed as it started (a passive one's refused call): `finish()`
    /// reports it.
    [[nodiscard]] bool failed() const noexcept { return error_ != nullptr; }

    [[nodiscard]] rdma_cm_id* key() const noexcept override { return key_; }

    bool take(event const& e) noexcept override {
        try {
            switch (step_) {
            case step::resolve_address: {
                check_event(e, awaited(), step_, doing() + what_);
                auto const timeout = opt_.deadlines.of(step::resolve_route);
                c_->cm_id().resolve_route(timeout);
                next(step::resolve_route, rdmacxx::detail::saturating_add(timeout, std::chrono::milliseconds{1000}));
                return false;
            }
            case step::resolve_route:
                check_event(e, awaited(), step_, doing() + what_);
                send_connect();
                return false;
            case step::connect:
                check_event(e, awaited(), step_, doing() + what_);
                establish(e);
                return true;
            case step::accept:
                check_event(e, awaited(), step_, doing() + what_);
                connected_ = true;
                return true;
            default:
                return false;
            }
        } catch (...) {
            fail(std::current_exception());
            return true;
        }
    }

    void expire() noexcept override {
        try {
            throw timeout_error(step_, "no " + std::string{to_string(awaited())} + " event within " +
                                           std::to_string(limit_.count()) + " ms while " + doing() + what_);
        } catch (...) {
            fail(std::current_exception());
        }
    }

    void finish() override {
        finished_ = true;
        if (error_) {                     // (take() and expire() end in an error or connected_)
            c_.reset();                   // the id and what the handshake made, before the completion runs
            done_(error_, std::move(c_)); // empty
            return;
        }
        c_->monitor().established();
        try {
            c_->monitor().join(*engine_);
        } catch (...) { // no room to register it: the connection is torn down with the handshake
            done_(std::current_exception(), std::optional<connection_type>{});
            return;
        }
        done_(nullptr, std::move(c_));
    }

private:
    // The event the current step waits for, and what it is doing (for messages).
    [[nodiscard]] event_type awaited() const noexcept {
        switch (step_) {
        case step::resolve_address:
            return event_type::addr_resolved;
        case step::resolve_route:
            return event_type::route_resolved;
        case step::connect:
            return Transport::connected ? event_type::connect_response : event_type::established;
        default:
            return event_type::established;
        }
    }
    [[nodiscard]] char const* doing() const noexcept {
        switch (step_) {
        case step::resolve_address:
            return "resolving the address of ";
        case step::resolve_route:
            return "resolving the route to ";
        case step::connect:
            return "connecting to ";
        default:
            return "accepting ";
        }
    }

    void next(step s, std::chrono::milliseconds limit) noexcept {
        step_ = s;
        limit_ = limit;
        deadline_ = rdmacxx::detail::deadline_after(limit);
    }

    // Calls `before_accept(connection&)`; what it returns, if anything (bytes: a vector, an array,
    // a span), is the accept's private data in place of the options'.
    template <class Fn>
    void prepare(Fn& before_accept) {
        if constexpr (std::is_void_v<decltype(before_accept(*c_))>) {
            before_accept(*c_);
        } else {
            auto const data = before_accept(*c_);
            std::span<std::byte const> const bytes{data};
            check_private_data(bytes, private_data_message::accept, port_space_for<Transport>);
            opt_.private_data.assign(bytes.begin(), bytes.end());
        }
    }

    // Route resolved: the QP from its source, then the connect request.
    void send_connect() {
        c_->cm_id().check_settings(opt_.settings, Transport::qp_type, "; nothing was sent");
        take_qp(*c_, src_, opt_, adopted_);
        if (auto* const qp = src_.user.get_if())
            c_->cm_id().connect(opt_.settings, opt_.private_data, qp->qp_num(), qp->native_handle()->srq != nullptr);
        else
            c_->cm_id().connect(opt_.settings, opt_.private_data);
        next(step::connect, opt_.deadlines.of(step::connect));
    }

    // The connect response (RC, UC: the QP to RTR and RTS under the settings, then the RTU) or
    // UD's `established`.
    void establish(event const& e) {
        if constexpr (Transport::connected) {
            if (auto* const qp = src_.user.get_if()) {
                try {
                    c_->cm_id().modify_qp(qp->native_handle(), IBV_QPS_RTR, opt_.settings);
                    c_->cm_id().modify_qp(qp->native_handle(), IBV_QPS_RTS, opt_.settings);
                } catch (...) {
                    (void)::rdma_reject(c_->cm_id().native_handle(), nullptr, 0);
                    throw;
                }
                c_->cm_id().establish();
            } else {
                c_->cm_id().establish(opt_.settings);
            }
        }
        c_->set_peer(e.private_data_copy(), e.conn());
        if constexpr (!Transport::connected) c_->set_peer_ud(e.ud());
        connected_ = true;
    }

    void fail(std::exception_ptr error) noexcept {
        error_ = std::move(error);
        fail_user_qp();
    }

    // A user's QP whose connection failed: to ERR, so what was posted completes flushed (only
    // once the connection took it: a QP refused by `adopt` is someone else's).
    void fail_user_qp() noexcept {
        if (!adopted_) return;
        if (auto* const qp = src_.user.get_if()) fail_qp(*qp);
    }

    engine* engine_;
    qp_source<Transport, Completion, Post> src_;
    connection_options opt_;
    Done done_;
    std::string what_;
    std::optional<connection_type> c_;
    rdma_cm_id* key_ = nullptr;
    step step_ = step::other;
    std::chrono::milliseconds limit_{0};
    std::exception_ptr error_;
    bool connected_ = false;
    bool adopted_ = false;
    bool finished_ = false;
};

/// Starts `h` on `eng` (or, connected or failed at once, reports it).
template <class Handshake>
void launch(engine& eng, std::unique_ptr<Handshake> h) {
    if (h->connected() || h->failed())
        h->finish();
    else
        eng.start(std::move(h));
}

/// Where a driver that runs one handshake on an engine of its own (blocking, or one Asio
/// operation) keeps its outcome: `handler()` is the handshake's `done`; once `finished`,
/// `take()` returns the connection alone on its channel, its monitor thread watching it (RC,
/// UC), or throws the handshake's error.
template <class Connection>
struct outcome {
    std::exception_ptr error;
    std::optional<Connection> result;
    bool finished = false;

    /// The `done` of the handshake (refers to this outcome, which must outlive the handshake).
    [[nodiscard]] auto handler() {
        return [this](std::exception_ptr e, std::optional<Connection> c) {
            error = std::move(e);
            result = std::move(c);
            finished = true;
        };
    }

    /// The connection, off the engine and watched by its own thread.
    /// @throws the handshake's error; std::system_error when the monitor thread cannot start.
    Connection take() {
        if (error) std::rethrow_exception(error);
        result->monitor().leave();
        result->watch_own_channel();
        return std::move(*result);
    }
};

/// The blocking driver: runs what `start(engine&, done)` begins on an engine of its own until
/// it finishes, and returns the connection with a monitor thread on its channel (RC, UC), or
/// throws the handshake's error. Each step is bounded by its deadline; "forever" waits.
template <class Connection, class Start>
Connection run_blocking(Start&& start) {
    engine eng;
    outcome<Connection> out;
    start(eng, out.handler());
    while (!out.finished)
        (void)eng.wait(std::chrono::milliseconds::max());
    return out.take();
}

} // namespace detail

/// Active side on an engine: starts connecting to `destination` with the QP from `source` and
/// returns at once; the engine's owner drives it (`engine::process`) and
/// `done(std::exception_ptr, std::optional<connection<Transport, Completion, Post>>)` is called
/// once from `process()`: the connection, established, which then stays on the engine (its dead
/// peer seen by `process()`, no thread), or the error `cm::connect` would throw (a user's QP is
/// then in ERR). `opt` is copied (its private data with it): the caller's buffers may change at
/// once. Spelled `cm::connect<rc, busy_poll>(eng, to, opt, {}, done)` for a QP of the
/// connection's own.
/// @throws argument_error for private data over 56 bytes (TCP) or 180 (UDP), sys_error or
///         address_error when resolution cannot start — `done` is then never called.
/// @see rdma_resolve_addr(3), rdma_resolve_route(3), rdma_connect(3), rdma_establish(3)
template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post, class Done>
void connect(engine& eng, address const& destination, connection_options opt,
             qp_source<Transport, Completion, Post> source, Done&& done) {
    using h = detail::handshake<Transport, Completion, Post, std::decay_t<Done>>;
    detail::launch(eng,
                   std::make_unique<h>(eng, destination, std::move(source), std::move(opt), std::forward<Done>(done)));
}

/// Active side, blocking: connects to `destination` and returns an established connection of
/// transport `Transport` (RC or UC over the TCP port space, UD over the UDP port space), its QP
/// from `source` (see `qp_source`: the connection's own by default), on an event channel of its
/// own: resolves the address and the route (each within its step's deadline), takes the QP
/// (checking that what `source` names is on the resolved device), connects with `opt.settings`
/// and `opt.private_data`, and waits up to the connect deadline for the connect response
/// (RC, UC: the QP to RTR and RTS under the settings, then the RTU). The handshake is the one
/// `connect(engine&, …)` runs, on an engine of its own; "forever" deadlines wait forever.
/// Spelled `cm::connect<rc, busy_poll>(to, opt)`, `cm::connect(to, opt, cm::shared_qp<rc>(r))`
/// or `cm::connect(to, opt, cm::user_qp(qp))`.
/// @throws address_error, route_not_found_error, route_error while resolving; rejected_error
///         (with the reject reason and the peer's private data: no listener is reason 8 on
///         RoCE), unreachable_error, connect_error while connecting; timeout_error naming the
///         step whose deadline passed; argument_error for private data over 56 bytes (TCP) or
///         180 (UDP), a PD, CQ or QP on another device, a user's QP not in RESET (nothing sent);
///         orphaned_error for a user's QP destroyed before; sys_error when a verb fails (naming
///         the state for a transition). A user's QP is in ERR when an error leaves.
/// @see rdma_resolve_addr(3), rdma_resolve_route(3), ibv_create_qp(3), rdma_init_qp_attr(3),
///      rdma_connect(3), rdma_establish(3)
template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post>
[[nodiscard]] connection<Transport, Completion, Post>
connect(address const& destination, connection_options const& opt = {},
        qp_source<Transport, Completion, Post> const& source = {}) {
    return detail::run_blocking<connection<Transport, Completion, Post>>([&](engine& eng, auto done) {
        connect<Transport, Completion, Post>(eng, destination, opt, source, std::move(done));
    });
}

} // namespace cm
} // namespace v0
} // namespace rdmacxx
