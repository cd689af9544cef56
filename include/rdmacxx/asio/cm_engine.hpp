#pragma once
/// @file
/// `io::cm_engine`: the Asio driver of a `cm::engine` — one CM event channel for every connection
/// an executor makes and accepts, advanced by the reactor (a wait on the channel's descriptor and
/// a timer for the next deadline), with no thread per connection; and the operations on it:
/// `async_connect(engine, …)`, `async_accept(acceptor, …)`. Any completion token (none:
/// `default_token_t`); the completion signature is
/// `void(io::error_code, std::optional<cm::connection<T, C, Post>>)` whatever the token, and
/// `co_await` with `asio::use_awaitable` throws the library's exception (`cm::timeout_error`,
/// `cm::rejected_error`, …; completion.hpp).

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/descriptor.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/thread_rule.hpp"
#include "rdmacxx/cm/listener.hpp"
#include "rdmacxx/detail/callback.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// A `cm::engine` driven by an Asio executor: while the engine has work (handshakes pending,
/// listeners or connections on it) a wait on its descriptor is outstanding, and every wake-up
/// calls `process()`. The connections made on it have no thread: their dead peers are seen by
/// the reactor. While it has work it also wakes every `idle_check` (200 ms) or at the next CM
/// deadline, whichever comes first, so that it stops waiting (and `io_context::run()` can return)
/// once nothing is left on it; `stop()` stops at once.
///
/// Lifetime: it must outlive the operations started on it; connections made on it may outlive
/// it (see `cm::engine`). Not movable.
/// Thread-safety: not thread-safe; use it from one thread at a time (a single-threaded
/// `io_context`): with the thread check (thread_rule.hpp, on unless `NDEBUG`), a thread that
/// runs its handler or starts an operation on it while another thread is inside it is refused
/// with `io::thread_error`.
/// @see cm::engine
class cm_engine {
public:
    /// How often an engine with work but no event looks whether it still has work.
    static constexpr std::chrono::milliseconds idle_check{200};

    /// An engine on `ex`, with its own CM event channel.
    /// @throws sys_error when the channel or its duplicate descriptor cannot be made.
    explicit cm_engine(net::any_io_executor const& ex) : descriptor_(ex), timer_(ex) {
        detail::assign_duplicate(descriptor_, engine_.fd(), "for a CM engine's event channel");
    }
    cm_engine(cm_engine const&) = delete;
    cm_engine& operator=(cm_engine const&) = delete;
    /// Stops (waits that complete afterwards touch nothing of it), then destroys the engine.
    ~cm_engine() {
        *alive_ = false;
        stop();
    }

    /// The engine (to make listeners on, or to start work on directly; call `arm()` after).
    [[nodiscard]] cm::engine& engine() noexcept { return engine_; }
    /// The executor.
    [[nodiscard]] net::any_io_executor get_executor() noexcept { return descriptor_.get_executor(); }

    /// Starts waiting if it is not, and brings the timer forward to the engine's next deadline if
    /// that comes sooner: the operations call it.
    void arm() {
        auto const inside = enter();
        if (armed_) {
            if (auto const t = engine_.timeout(); t && std::chrono::steady_clock::now() + *t < timer_.expiry())
                arm_timer(); // a handshake started meanwhile has an earlier deadline
            return;
        }
        armed_ = true;
        ++generation_;
        descriptor_.async_wait(net::posix::stream_descriptor::wait_read, on_wake());
        arm_timer();
    }

    /// @cond
    // This thread is inside the engine until the scope goes (thread_rule.hpp): each operation's
    // initiation holds one from its start.
    [[nodiscard]] detail::thread_rule::scope enter() { return thread_.enter(who); }
    /// @endcond

    /// Cancels the waits: nothing is processed until the next operation starts (a wait that had
    /// completed already is ignored).
    void stop() noexcept {
        armed_ = false;
        ++generation_;
        detail::net_error_code ignored;
        descriptor_.cancel(ignored);
        timer_.cancel();
    }

private:
    void arm_timer() {
        auto wait = idle_check;
        if (auto const t = engine_.timeout()) wait = std::min(wait, *t);
        timer_.expires_after(wait); // cancels a wait still pending: it completes aborted
        timer_.async_wait(on_wake());
    }

    // The handler of both waits: wakes the engine unless it was stopped, destroyed or re-armed
    // since (a wait that completed before its cancel still runs its handler).
    struct waker {
        cm_engine* self;
        std::shared_ptr<bool> alive;
        std::uint64_t generation;
        void operator()(detail::net_error_code ec) const {
            if (!*alive || ec == io::detail::operation_aborted() || generation != self->generation_) return;
            self->wake();
        }
    };
    [[nodiscard]] waker on_wake() { return {this, alive_, generation_}; }

    // The descriptor or the timer fired: process, then wait again while there is work — also
    // when a completion or callback threw out of process() (the exception then leaves run()).
    void wake() {
        auto const inside = enter();
        stop();
        struct rearm {
            cm_engine& self;
            ~rearm() {
                if (self.engine_.pending() != 0 || self.engine_.registered() != 0) self.arm();
            }
        } const again{*this};
        (void)engine_.process();
    }

    cm::engine engine_;
    net::posix::stream_descriptor descriptor_;
    net::steady_timer timer_;
    bool armed_ = false;
    std::uint64_t generation_ = 0; // of the current waits: older ones are ignored
    // Read by the handlers of waits that complete after the destructor ran.
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
    detail::thread_rule thread_; // who may use it now
    static constexpr char const* who = "a CM engine";

public:
    /// @cond
    cm_engine(cm_engine&&) = delete;
    /// @endcond
};

/// The CM engine of an execution context (`cm_engine_for`): made on first use and destroyed with
/// the context, before the context's handlers (`shutdown()`); connections made on it may outlive
/// it. Thread-safety: the context's own thread only, as the engine's.
/// @see asio::use_service, asio::execution_context::service
class cm_engine_service final : public net::execution_context::service {
public:
    /// The service's identity in its context (Asio's `use_service`).
    static inline net::execution_context::id id; // NOLINT(readability-identifier-naming): Asio's name

    /// The service of `ctx` (made by `use_service`).
    explicit cm_engine_service(net::execution_context& ctx) : net::execution_context::service(ctx) {}

    /// The engine of this context: the one made before, or a new one on `ex`.
    /// @throws as `cm_engine`'s constructor; std::bad_alloc
    cm_engine& engine_for(net::any_io_executor const& ex) {
        if (!engine_) engine_ = std::make_unique<cm_engine>(ex);
        return *engine_;
    }

private:
    void shutdown() override { engine_.reset(); }
    std::unique_ptr<cm_engine> engine_;
};

/// The CM engine of `ex`'s execution context (`cm_engine_service`): one CM event channel for
/// every connection and listener of the context, made on first use and owned by the context.
/// `rxa::cm_acceptor<rc> listener{io.get_executor(), local};` and `async_connect(cm_engine_for(ex),
/// …)` use it.
/// @throws as `cm_engine`'s constructor; std::bad_alloc
template <class Executor>
cm_engine& cm_engine_for(Executor const& ex) {
    net::execution_context& ctx = net::query(ex, net::execution::context);
    return net::use_service<cm_engine_service>(ctx).engine_for(net::any_io_executor{ex});
}

template <class Object>
class basic_queue_pair; // queue_pair.hpp

/// A `cm::connection` as an Asio I/O object on an `io::completion_queue` (queue_pair.hpp):
/// `io::connection<rc> c{cq, std::move(*made)}` after an `async_connect` or `async_accept` on
/// `cm::shared_qp<rc>(cq.resources(pd))`; `c.async_post(…)`, `c->disconnect()`.
template <transport Transport, completion_strategy Completion = event_driven, post_policy Post = legacy_post>
using connection = basic_queue_pair<cm::connection<Transport, Completion, Post>>;

namespace detail {
/// `co_await` on a connect or accept throws the library's exception (completion.hpp).
template <transport Transport, completion_strategy Completion, post_policy Post>
inline constexpr bool is_operation_value_v<std::optional<cm::connection<Transport, Completion, Post>>> = true;

/// The `done` of a handshake on an Asio engine: posts the handler with the outcome to the
/// handler's associated executor (the engine's by default), never calling it inline: the code of
/// the handshake's exception, or for an `as_exception` handler the exception itself.
/// The handler is kept here, not in the handshake, so that a start that throws (bad input,
/// an address that does not resolve) still has it to complete with the error.
template <class Connection, class Handler>
struct post_outcome {
    // The handler's associated executor (any kind: an io_context's, a strand, use_future's),
    // with outstanding work tracked.
    using executor_type = std::decay_t<decltype(net::prefer(
        net::get_associated_executor(std::declval<Handler&>(), std::declval<net::any_io_executor const&>()),
        net::execution::outstanding_work.tracked))>;

    post_outcome(Handler h, net::any_io_executor const& fallback)
        : handler(std::move(h)), work(std::in_place, net::prefer(net::get_associated_executor(handler, fallback),
                                                                 net::execution::outstanding_work.tracked)) {}
    Handler handler;
    // The handler's executor, kept busy until the completion is posted to it (its run() does not
    // return meanwhile, even when it is another context than the engine's); released then.
    std::optional<executor_type> work;
    void operator()(std::exception_ptr error, std::optional<Connection> c) {
        error_code const ec = code_of(error); // before the exception is moved on
        complete(ec, std::move(error), std::move(c));
    }
    /// Completes with Asio's own `operation_aborted` (the acceptor went while the accept waited).
    void abort() {
        complete(operation_aborted(),
                 std::make_exception_ptr(
                     rdmacxx::error(std::error_code{operation_aborted()}, "accepting: the acceptor was destroyed")),
                 std::nullopt);
    }

private:
    void complete(error_code ec, std::exception_ptr error, std::optional<Connection> c) {
        if (!work) return; // completed already
        executor_type ex = std::move(*work);
        work.reset();
        using outcome = outcome_for<Handler>;
        auto first = outcome::first(ec, c, [&] { return error; });
        net::post(ex, [h = outcome::unwrap(handler), first = std::move(first), c = std::move(c)]() mutable {
            std::move(h)(std::move(first), std::move(c));
        });
    }
};

/// The shared outcome of an operation for `handler`: what the handshake's `done` and an abort
/// both report to (whichever comes first, once).
template <class Connection, class Handler>
[[nodiscard]] std::shared_ptr<post_outcome<Connection, Handler>> make_outcome(cm_engine& eng, Handler handler) {
    return std::make_shared<post_outcome<Connection, Handler>>(std::move(handler), eng.get_executor());
}

/// Starts `start(done)` on `eng`, its outcome reported to `outcome`; what `start` throws
/// completes it with that error (nothing was started).
template <class Connection, class Outcome, class Start>
void start_on(cm_engine& eng, std::shared_ptr<Outcome> const& outcome, Start start) {
    auto const inside = eng.enter(); // thread_rule.hpp: before anything is started
    try {
        start([outcome](std::exception_ptr error, std::optional<Connection> c) {
            (*outcome)(std::move(error), std::move(c));
        });
    } catch (...) {
        (*outcome)(std::current_exception(), std::nullopt);
        return;
    }
    eng.arm();
}

/// Starts `start(done)` on `eng` for `handler`: the outcome is posted to the handler's executor;
/// what `start` throws completes the handler with it.
template <class Connection, class Handler, class Start>
void initiate(cm_engine& eng, Handler handler, Start start) {
    start_on<Connection>(eng, make_outcome<Connection>(eng, std::move(handler)), std::move(start));
}

/// What completes a waiting accept whose acceptor is destroyed: `asio::error::operation_aborted`
/// (an `rdmacxx::error` with that code), posted.
template <class Connection, class Outcome>
[[nodiscard]] auto aborter(std::shared_ptr<Outcome> const& outcome) {
    return [outcome] { outcome->abort(); };
}

/// Completes `handler` with the `argument_error` of private data over the accept's limit (posted,
/// nothing sent) and returns true; false when the data fits. Bad input fails at initiation,
/// not on the next client's request.
template <class Connection, transport Transport, class Handler>
bool refused(cm_engine& eng, Handler& handler, cm::connection_options const& opt) {
    try {
        cm::check_private_data(opt.private_data, cm::private_data_message::accept, cm::port_space_for<Transport>);
        return false;
    } catch (...) {
        initiate<Connection>(eng, std::move(handler),
                             [e = std::current_exception()](auto) { std::rethrow_exception(e); });
        return true;
    }
}

/// The initiation of `async_connect`.
template <transport Transport, completion_strategy Completion, post_policy Post>
class initiate_connect {
public:
    using executor_type = net::any_io_executor;
    initiate_connect(cm_engine& eng, cm::address const& destination) : eng_(&eng), destination_(destination) {}
    /// The engine's executor.
    [[nodiscard]] executor_type get_executor() const noexcept { return eng_->get_executor(); }
    template <class Handler>
    void operator()(Handler handler, cm::connection_options o, cm::qp_source<Transport, Completion, Post> src) const {
        using connection = cm::connection<Transport, Completion, Post>;
        initiate<connection>(*eng_, std::move(handler), [&](auto done) {
            cm::connect<Transport, Completion, Post>(eng_->engine(), destination_, std::move(o), std::move(src),
                                                     std::move(done));
        });
    }

private:
    cm_engine* eng_;
    cm::address destination_;
};
} // namespace detail

/// Connects to `destination` on `eng` as `cm::connect(engine&, destination, opt, source, done)`
/// does: the same handshake, the QP from `source` (see `cm::qp_source`; `{}`: the connection's
/// own), each step within its deadline (`opt.deadlines`), advanced by the reactor; the
/// connection stays on the engine (no thread). `opt` is copied at initiation. Completes with
/// `(io::error_code, std::optional<cm::connection<Transport, Completion, Post>>)` for every
/// token, posted to the handler's associated executor: the connection (engaged) and no code, or
/// the code of the failure (ETIMEDOUT for a step's deadline, a reject reason in
/// `cm::reject_category()`, EINVAL for bad input, nothing sent) and nothing. `co_await` with
/// `asio::use_awaitable`, and any token under `io::as_exception`, throws or hands over the
/// library's exception instead (`cm::timeout_error` naming the step, `cm::rejected_error` with
/// the peer's private data, `argument_error`, …). Spelled
/// `io::async_connect<rc, busy_poll>(eng, to, opt, {}, token)`; no token: `default_token_t`.
/// @see rdma_resolve_addr(3), rdma_connect(3)
template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post,
          class Token = default_token_t>
auto async_connect(cm_engine& eng, cm::address const& destination, cm::connection_options opt,
                   cm::qp_source<Transport, Completion, Post> source, Token&& token = default_token_t{}) {
    using connection = cm::connection<Transport, Completion, Post>;
    return net::async_initiate<Token, void(error_code, std::optional<connection>)>(
        detail::initiate_connect<Transport, Completion, Post>{eng, destination}, token, std::move(opt),
        std::move(source));
}

/// A listener on a `cm_engine`: its connect requests wait here until an `async_accept` takes
/// them (in order; several `async_accept`s may wait). Destroying it closes the port; requests
/// not taken are dropped (their peers see a reject) and waiting accepts complete with
/// `operation_aborted`.
/// Not movable.
/// Thread-safety: as its engine's.
template <transport Transport>
class cm_acceptor {
public:
    /// Listens on `local` (see `cm::listener`) on `eng`'s channel.
    /// @throws as `cm::listener`'s constructor.
    cm_acceptor(cm_engine& eng, cm::address const& local, cm::listener_options const& opt = {})
        : engine_(&eng), listener_(std::in_place, eng.engine(), local, opt, [this](cm::connect_request r) {
              requests_.push_back(std::move(r));
              serve();
          }) {}
    /// Listens on `local` on the CM engine of `ex`'s execution context (`cm_engine_for`).
    /// @throws as `cm::listener`'s constructor, and as `cm_engine_for`.
    cm_acceptor(net::any_io_executor const& ex, cm::address const& local, cm::listener_options const& opt = {})
        : cm_acceptor(cm_engine_for(ex), local, opt) {}
    cm_acceptor(cm_acceptor const&) = delete;
    cm_acceptor& operator=(cm_acceptor const&) = delete;
    /// Closes the port (requests not taken are dropped: their peers see a reject), then
    /// completes every `async_accept` still waiting with `asio::error::operation_aborted`,
    /// posted.
    ~cm_acceptor() {
        listener_.reset();
        requests_.clear();
        for (auto& w : waiters_)
            w.abort();
    }

    /// The port listened on (host order).
    [[nodiscard]] std::uint16_t port() const noexcept { return listener_->port(); }
    /// The listener (its `cm_id().context()` is the device to make shared resources on).
    [[nodiscard]] cm::listener<Transport>& listener() noexcept { return *listener_; }
    /// The engine.
    [[nodiscard]] cm_engine& engine() noexcept { return *engine_; }
    /// The engine's executor: accepts complete on it by default.
    [[nodiscard]] net::any_io_executor get_executor() const noexcept { return engine_->get_executor(); }

    /// @cond
    // `take(request)` runs on the next request (now, if one waits); `abort()` instead when the
    // acceptor goes first.
    void wait(rdmacxx::detail::callback<void(cm::connect_request)> take, rdmacxx::detail::callback<void()> abort) {
        auto const inside = engine_->enter(); // thread_rule.hpp: before anything is touched
        waiters_.push_back({std::move(take), std::move(abort)});
        serve();
        engine_->arm();
    }
    /// @endcond

private:
    void serve() {
        while (!requests_.empty() && !waiters_.empty()) {
            auto w = std::move(waiters_.front());
            waiters_.pop_front();
            cm::connect_request r = std::move(requests_.front());
            requests_.pop_front();
            w.take(std::move(r));
        }
    }

    cm_engine* engine_;
    std::deque<cm::connect_request> requests_;
    struct waiter {
        rdmacxx::detail::callback<void(cm::connect_request)> take;
        rdmacxx::detail::callback<void()> abort;
    };
    std::deque<waiter> waiters_;
    std::optional<cm::listener<Transport>> listener_; // closed first by the destructor
};

namespace detail {
/// The initiation of `async_accept`.
template <transport Transport, completion_strategy Completion, post_policy Post, class BeforeAccept>
class initiate_accept {
public:
    using executor_type = net::any_io_executor;
    explicit initiate_accept(cm_acceptor<Transport>& acceptor) noexcept : acceptor_(&acceptor) {}
    /// The engine's executor.
    [[nodiscard]] executor_type get_executor() const noexcept { return acceptor_->engine().get_executor(); }
    template <class Handler>
    void operator()(Handler handler, cm::connection_options o, cm::qp_source<Transport, Completion, Post> src,
                    BeforeAccept ba) const {
        using connection = cm::connection<Transport, Completion, Post>;
        cm_engine& eng = acceptor_->engine();
        if (refused<connection, Transport>(eng, handler, o)) return;
        auto const outcome = make_outcome<connection>(eng, std::move(handler));
        acceptor_->wait(
            [&eng, outcome, o = std::move(o), src = std::move(src),
             ba = std::move(ba)](cm::connect_request req) mutable {
                start_on<connection>(eng, outcome, [&](auto done) {
                    cm::accept<Transport, Completion, Post>(eng.engine(), std::move(req), std::move(o), std::move(src),
                                                            std::move(ba), std::move(done));
                });
            },
            aborter<connection>(outcome));
    }

private:
    cm_acceptor<Transport>* acceptor_;
};
} // namespace detail

/// Accepts the next connect request of `acceptor` (waiting for one without a bound; not
/// cancellable yet: an Asio `||` with a timer waits for it too) as `cm::accept(engine, request,
/// opt, source, before_accept, done)` does: the QP from `source` (`{}`: the connection's own),
/// `before_accept(connection&)` called before the accept is sent (post receives there, or note
/// the QP: a client may send before the completion runs; `{}`: nothing), `established` awaited
/// within `opt.deadlines.accept` by the reactor. The connection stays on the engine (no
/// thread). Completes as `async_connect`, with `(io::error_code, std::optional<connection>)`;
/// an acceptor destroyed while the accept waits completes it with
/// `asio::error::operation_aborted`. Spelled `io::async_accept<busy_poll>(acceptor, opt, {}, {},
/// token)`; no token: `default_token_t`.
/// @see rdma_accept(3)
template <completion_strategy Completion, post_policy Post = legacy_post, transport Transport,
          class BeforeAccept = cm::no_preparation, class Token = default_token_t>
auto async_accept(cm_acceptor<Transport>& acceptor, cm::connection_options opt,
                  cm::qp_source<Transport, Completion, Post> source, BeforeAccept before_accept,
                  Token&& token = default_token_t{}) {
    using connection = cm::connection<Transport, Completion, Post>;
    return net::async_initiate<Token, void(error_code, std::optional<connection>)>(
        detail::initiate_accept<Transport, Completion, Post, BeforeAccept>{acceptor}, token, std::move(opt),
        std::move(source), std::move(before_accept));
}

} // namespace io
} // namespace v0
} // namespace rdmacxx
