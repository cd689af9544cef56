#pragma once
/// @file
/// The Asio adapter's RDMA CM operations: `async_connect` (resolve the address and the route,
/// connect), `async_accept` (a listener's next request, accepted) and `async_disconnect`, each
/// step within its `cm::connection_options` timeout. The CM event channel's descriptor is waited
/// on as an `asio::posix::stream_descriptor`. Needs C++20 coroutines in Asio (ASIO_HAS_CO_AWAIT:
/// set by Asio under g++; define it under clang, see docs/asio.md); without them this header
/// declares nothing.

#include "rdmacxx/asio/descriptor.hpp"
#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/cm/listener.hpp"
#include "rdmacxx/detail/wait.hpp"

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if defined(ASIO_HAS_CO_AWAIT)
#include <asio/experimental/awaitable_operators.hpp>

namespace rdmacxx {
inline namespace v0 {
namespace io {

namespace detail {

/// A duplicate of `channel`'s descriptor on `ex`, closed with it (the channel stays open).
[[nodiscard]] inline ::asio::posix::stream_descriptor watch(::asio::any_io_executor const& ex,
                                                            cm::event_channel& channel) {
    ::asio::posix::stream_descriptor descriptor{ex};
    assign_duplicate(descriptor, channel.fd(), "for a CM event channel's descriptor");
    return descriptor;
}

/// The asynchronous twin of `cm::detail::expect`: the next event of type `want` on `channel`
/// (read when `descriptor` is readable), without a bound (the caller cancels).
/// @throws as `cm::detail::check_event`.
inline ::asio::awaitable<cm::event> expect(cm::event_channel& channel, ::asio::posix::stream_descriptor& descriptor,
                                           cm::event_type want, std::string const& what) {
    for (;;) {
        if (std::optional<cm::event> e = channel.try_get()) {
            cm::detail::check_event(*e, want, cm::step::other, what);
            co_return *e;
        }
        co_await descriptor.async_wait(::asio::posix::stream_descriptor::wait_read, ::asio::use_awaitable);
    }
}

/// The Asio driver of a `cm::engine` of the operation's own: waits on its descriptor, or for its
/// next deadline, and calls `process()` until `finished` (set by the handshake's completion).
inline ::asio::awaitable<void> drive(cm::engine& eng, ::asio::posix::stream_descriptor& descriptor,
                                     bool const& finished) {
    using namespace ::asio::experimental::awaitable_operators;
    ::asio::steady_timer timer{descriptor.get_executor()};
    while (!finished) {
        if (auto const t = eng.timeout()) {
            timer.expires_after(*t);
            (void)co_await (descriptor.async_wait(::asio::posix::stream_descriptor::wait_read, ::asio::use_awaitable) ||
                            timer.async_wait(::asio::use_awaitable));
        } else {
            co_await descriptor.async_wait(::asio::posix::stream_descriptor::wait_read, ::asio::use_awaitable);
        }
        (void)eng.process();
    }
}

/// Runs what `start(engine&, done)` begins on an engine of its own, driven by the executor, and
/// returns the connection alone on its channel (with its monitor thread, RC and UC), or throws
/// the handshake's error.
template <class Connection, class Start>
::asio::awaitable<std::optional<Connection>> run(Start start) {
    cm::engine eng;
    auto descriptor = watch(co_await ::asio::this_coro::executor, eng.channel());
    cm::detail::outcome<Connection> out;
    start(eng, out.handler());
    co_await drive(eng, descriptor, out.finished);
    if (!out.error) descriptor.close(); // before the monitor thread takes the channel's events
    co_return out.take();
}

template <transport Transport, completion_strategy Completion>
::asio::awaitable<std::optional<cm::connection<Transport, Completion>>>
connect(cm::address destination, cm::connection_options opt, std::optional<cm::resources<Completion>> shared) {
    co_return co_await run<cm::connection<Transport, Completion>>([&](cm::engine& eng, auto done) {
        if (shared)
            cm::connect<Transport, Completion>(eng, destination, *shared, std::move(opt), std::move(done));
        else
            cm::connect<Transport, Completion>(eng, destination, std::move(opt), std::move(done));
    });
}

template <transport Transport, completion_strategy Completion, class BeforeAccept>
::asio::awaitable<std::optional<cm::connection<Transport, Completion>>>
accept(cm::listener<Transport>& listener, cm::connection_options opt, std::optional<cm::resources<Completion>> shared,
       BeforeAccept before_accept) {
    cm::check_private_data(opt.private_data, cm::private_data_message::accept, cm::port_space_for<Transport>);
    std::optional<cm::connect_request> req;
    {
        auto listening = watch(co_await ::asio::this_coro::executor, listener.channel());
        req.emplace(co_await expect(listener.channel(), listening, cm::event_type::connect_request,
                                    "listening on " + listener.cm_id().local_address().to_string()));
    }
    co_return co_await run<cm::connection<Transport, Completion>>([&](cm::engine& eng, auto done) {
        if (shared)
            cm::accept<Transport, Completion>(eng, std::move(*req), *shared, std::move(opt), std::move(done),
                                              std::move(before_accept));
        else
            cm::accept<Transport, Completion>(eng, std::move(*req), std::move(opt), std::move(done),
                                              std::move(before_accept));
    });
}

template <transport Transport, completion_strategy Completion, post_policy Post>
::asio::awaitable<void> disconnect(cm::connection<Transport, Completion, Post>& c, std::chrono::milliseconds timeout) {
    if (c.state() != cm::connection_state::established) co_return;
    if (int err = c.monitor().disconnect(); err != 0) [[unlikely]]
        rdmacxx::detail::throw_sys(err, "rdma_disconnect", "from " + c.peer_name());
    if (!c.monitor().watching()) co_return; // a shared channel's loop sees the rest
    // The monitor thread owns the connection's channel: look at what it saw after 1 ms, then
    // at doubling intervals of at most 32 ms (a few dozen wake-ups per disconnect, not one per ms).
    auto const deadline = rdmacxx::detail::deadline_after(timeout);
    ::asio::steady_timer tick{co_await ::asio::this_coro::executor};
    std::chrono::milliseconds interval{1};
    while (!c.monitor().wait_ended(std::chrono::milliseconds{0}, false)) {
        if (std::chrono::steady_clock::now() >= deadline) [[unlikely]]
            throw cm::timeout_error(cm::step::disconnect, "no disconnected event within " +
                                                              std::to_string(timeout.count()) +
                                                              " ms while disconnecting from " + c.peer_name());
        tick.expires_after(interval);
        co_await tick.async_wait(::asio::use_awaitable);
        interval = std::min(interval * 2, std::chrono::milliseconds{32});
    }
}

} // namespace detail

/// Connects to `destination` as `cm::connect<Transport, Completion>(destination, opt)` does —
/// resolves the address and the route, makes a self-contained connection (PD, CQ, QP, its own
/// event channel and monitor), connects with `opt.settings` and `opt.private_data` and waits
/// for the connection — with every wait an Asio wait on the CM event channel's descriptor,
/// bounded by its step's deadline (`opt.deadlines`).
/// Completes with `(std::exception_ptr, std::optional<cm::connection<Transport, Completion>>)`:
/// the connection (engaged), or the error `cm::connect` would have thrown (`timeout_error`
/// naming the step, `rejected_error`, `address_error`, …) and nothing; `co_await` with
/// `asio::use_awaitable` throws it. Runs on `ex`.
/// Thread-safety: the connection is then used as any `cm::connection`.
/// @see rdma_resolve_addr(3), rdma_resolve_route(3), rdma_connect(3)
template <transport Transport, completion_strategy Completion, class Token>
auto async_connect(::asio::any_io_executor ex, cm::address const& destination, cm::connection_options const& opt,
                   Token&& token) {
    return ::asio::co_spawn(std::move(ex), detail::connect<Transport, Completion>(destination, opt, std::nullopt),
                            std::forward<Token>(token));
}

/// As `async_connect(ex, destination, opt, token)`, the QP made on `shared` (PD, CQs, SRQ,
/// channel; the aggregate is copied, the objects it names must outlive the connection) (see `cm::connect(destination,
/// resources, opt)`).
template <transport Transport, completion_strategy Completion, class Token>
auto async_connect(::asio::any_io_executor ex, cm::address const& destination, cm::resources<Completion> const& shared,
                   cm::connection_options const& opt, Token&& token) {
    return ::asio::co_spawn(std::move(ex), detail::connect<Transport, Completion>(destination, opt, shared),
                            std::forward<Token>(token));
}

/// Waits (without bound: cancel it, or race it with a timer, to stop) for the next connect
/// request on `listener` and accepts it as `connect_request::accept(opt)` does: the id moves to
/// its own event channel (with a monitor once established), the connection makes its PD, CQ
/// and QP, and `established` is awaited within the accept timeout. Completes with
/// `(std::exception_ptr, std::optional<cm::connection<Transport, Completion>>)` as
/// `async_connect`. One `async_accept` per listener at a time; the listener must outlive it.
/// @see rdma_get_cm_event(3), rdma_migrate_id(3), rdma_accept(3)
template <completion_strategy Completion, transport Transport, class Token>
auto async_accept(::asio::any_io_executor ex, cm::listener<Transport>& listener, cm::connection_options const& opt,
                  Token&& token) {
    return ::asio::co_spawn(std::move(ex),
                            detail::accept<Transport, Completion>(listener, opt, std::nullopt, cm::no_preparation{}),
                            std::forward<Token>(token));
}

/// As `async_accept(ex, listener, opt, token)`, the QP made on `shared` (a server's one PD, CQ,
/// SRQ and channel), which must outlive the connection.
template <completion_strategy Completion, transport Transport, class Token>
auto async_accept(::asio::any_io_executor ex, cm::listener<Transport>& listener,
                  cm::resources<Completion> const& shared, cm::connection_options const& opt, Token&& token) {
    return ::asio::co_spawn(std::move(ex),
                            detail::accept<Transport, Completion>(listener, opt, shared, cm::no_preparation{}),
                            std::forward<Token>(token));
}

/// Disconnects `c` as `connection::disconnect(timeout)` does (rdma_disconnect(3): a DREQ to
/// the peer, the QP to ERR — every operation pending on it completes with
/// `IBV_WC_WR_FLUSH_ERR`) and, for a connection with its own channel, waits without blocking
/// the executor until the CM reports `disconnected` (looked at every millisecond: the
/// connection's monitor thread owns the channel), at most `timeout` — pass
/// `opt.deadlines.of(cm::step::disconnect)`. Completes with `(std::exception_ptr)`: `timeout_error`
/// naming `step::disconnect` when `disconnected` did not come in time (we are disconnected all
/// the same), `sys_error` when rdma_disconnect(3) failed. Does nothing when not established.
/// `c` must outlive the operation.
/// @see rdma_disconnect(3)
template <transport Transport, completion_strategy Completion, post_policy Post, class Token>
auto async_disconnect(::asio::any_io_executor ex, cm::connection<Transport, Completion, Post>& c,
                      std::chrono::milliseconds timeout, Token&& token) {
    return ::asio::co_spawn(std::move(ex), detail::disconnect(c, timeout), std::forward<Token>(token));
}

/// As `async_accept(ex, listener, shared, opt, token)`, calling `before_accept(connection&)`
/// (a copy of it is kept until then) after the QP is made and before the accept is sent, as
/// `connect_request::accept` does: the place to post receives, or to note the QP (`c.qp()`
/// stays where it is when the connection moves) for messages that may arrive before
/// `established` is seen. What it throws fails the operation.
template <completion_strategy Completion, transport Transport, class BeforeAccept, class Token>
auto async_accept(::asio::any_io_executor ex, cm::listener<Transport>& listener,
                  cm::resources<Completion> const& shared, cm::connection_options const& opt,
                  BeforeAccept before_accept, Token&& token) {
    return ::asio::co_spawn(std::move(ex),
                            detail::accept<Transport, Completion>(listener, opt, shared, std::move(before_accept)),
                            std::forward<Token>(token));
}

} // namespace io
} // namespace v0
} // namespace rdmacxx
#endif // ASIO_HAS_CO_AWAIT
