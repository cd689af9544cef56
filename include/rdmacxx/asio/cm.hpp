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
#include <poll.h>
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

/// True when an event waits on `channel` (checked once more when the timer won the race).
inline bool channel_ready(cm::event_channel& channel) {
    pollfd pfd{channel.fd(), POLLIN, 0};
    return ::poll(&pfd, 1, 0) > 0;
}

/// The asynchronous twin of `cm::detail::expect`: the next event of type `want` on `channel`
/// (read when `descriptor` is readable), within `timeout`.
/// @throws timeout_error naming `s`; the matching `cm_error` for a failure event; `cm_error`
///         for another unexpected one.
inline ::asio::awaitable<cm::event> expect(cm::event_channel& channel, ::asio::posix::stream_descriptor& descriptor,
                                           cm::event_type want, std::optional<std::chrono::milliseconds> timeout,
                                           std::string const& what, cm::step s = cm::step::other) {
    using namespace ::asio::experimental::awaitable_operators;
    auto const deadline = rdmacxx::detail::deadline_after(timeout.value_or(std::chrono::milliseconds{0}));
    for (;;) {
        std::optional<cm::event> e = channel.try_get();
        if (!e && !timeout) { // no bound: the caller cancels
            co_await descriptor.async_wait(::asio::posix::stream_descriptor::wait_read, ::asio::use_awaitable);
            continue;
        }
        if (!e) {
            ::asio::steady_timer timer{descriptor.get_executor(), deadline};
            auto const which =
                co_await (descriptor.async_wait(::asio::posix::stream_descriptor::wait_read, ::asio::use_awaitable) ||
                          timer.async_wait(::asio::use_awaitable));
            if (which.index() == 1 && !channel_ready(channel)) [[unlikely]]
                throw cm::timeout_error(s, "no " + std::string{cm::to_string(want)} + " event within " +
                                               std::to_string(timeout->count()) + " ms while " + what);
            continue;
        }
        if (e->type() == want && e->status() == 0) co_return *e;
        if (e->status() == -ETIMEDOUT && e->type() != cm::event_type::rejected) [[unlikely]]
            throw cm::timeout_error(s, "the CM reported " + e->to_string() + " while " + what);
        e->throw_if_failed(what);
        throw cm::cm_error(e->type(), e->status(),
                           "arrived while waiting for " + std::string{cm::to_string(want)} + " " + what,
                           e->private_data_copy(), EPROTO);
    }
}

template <transport Transport, completion_strategy Completion>
::asio::awaitable<std::optional<cm::connection<Transport, Completion>>>
connect(cm::address destination, cm::connection_options opt, std::optional<cm::resources<Completion>> shared) {
    auto const ex = co_await ::asio::this_coro::executor;
    cm::check_private_data(opt.private_data, cm::private_data_message::connect, cm::port_space_for<Transport>);
    auto channel = std::make_unique<cm::event_channel>();
    cm::id cm_id{*channel, cm::port_space_for<Transport>};
    if (opt.type_of_service) cm_id.set_type_of_service(*opt.type_of_service);
    if (opt.reuse_address) cm_id.set_reuse_address(true);
    auto descriptor = watch(ex, *channel);
    auto const addr_timeout = opt.deadlines.of(cm::step::resolve_address);
    cm_id.resolve_address(destination, addr_timeout, opt.source ? &*opt.source : nullptr);
    (void)co_await expect(*channel, descriptor, cm::event_type::addr_resolved,
                          rdmacxx::detail::saturating_add(addr_timeout, std::chrono::milliseconds{1000}),
                          "resolving the address of " + destination.to_string(), cm::step::resolve_address);
    auto const route_timeout = opt.deadlines.of(cm::step::resolve_route);
    cm_id.resolve_route(route_timeout);
    (void)co_await expect(*channel, descriptor, cm::event_type::route_resolved,
                          rdmacxx::detail::saturating_add(route_timeout, std::chrono::milliseconds{1000}),
                          "resolving the route to " + destination.to_string(), cm::step::resolve_route);
    cm_id.check_settings(opt.settings, Transport::qp_type, "; nothing was sent");
    cm::event_channel& ch = *channel;
    std::optional<cm::connection<Transport, Completion>> c{std::in_place, std::move(channel), std::move(cm_id),
                                                           opt.deadlines.of(cm::step::disconnect)};
    if (shared)
        c->borrow(*shared);
    else
        c->make_own(opt.cq_entries);
    c->create_qp(opt.caps);
    c->cm_id().connect(opt.settings, opt.private_data);
    cm::event e = co_await expect(
        ch, descriptor, Transport::connected ? cm::event_type::connect_response : cm::event_type::established,
        opt.deadlines.of(cm::step::connect), "connecting to " + c->peer_name(), cm::step::connect);
    if constexpr (Transport::connected) c->cm_id().establish(opt.settings);
    c->set_peer(e.private_data_copy(), e.conn());
    if constexpr (!Transport::connected) c->set_peer_ud(e.ud());
    descriptor.close(); // before the monitor thread takes the channel's events
    c->established();
    co_return c;
}

template <transport Transport, completion_strategy Completion, class BeforeAccept>
::asio::awaitable<std::optional<cm::connection<Transport, Completion>>>
accept(cm::listener<Transport>& listener, cm::connection_options opt, std::optional<cm::resources<Completion>> shared,
       BeforeAccept before_accept) {
    auto const ex = co_await ::asio::this_coro::executor;
    cm::check_private_data(opt.private_data, cm::private_data_message::accept, cm::port_space_for<Transport>);
    std::optional<cm::connect_request> req;
    {
        auto listening = watch(ex, listener.channel());
        cm::event e = co_await expect(listener.channel(), listening, cm::event_type::connect_request, std::nullopt,
                                      "listening on " + listener.cm_id().local_address().to_string());
        req.emplace(e);
    }
    req->cm_id().check_settings(opt.settings, Transport::qp_type, "; nothing was sent");
    auto channel = std::make_unique<cm::event_channel>();
    req->cm_id().migrate(*channel);
    cm::event_channel& ch = *channel;
    std::vector<std::byte> const peer_data{req->private_data().begin(), req->private_data().end()};
    std::optional<cm::connection<Transport, Completion>> c{std::in_place, std::move(channel), std::move(req->cm_id()),
                                                           opt.deadlines.of(cm::step::disconnect)};
    c->set_peer(peer_data, req->parameters());
    if (shared)
        c->borrow(*shared);
    else
        c->make_own(opt.cq_entries);
    c->create_qp(opt.caps);
    before_accept(*c);
    auto descriptor = watch(ex, ch);
    c->cm_id().accept(opt.settings, opt.private_data);
    if constexpr (Transport::connected)
        (void)co_await expect(ch, descriptor, cm::event_type::established, opt.deadlines.of(cm::step::accept),
                              "accepting " + c->peer_name(), cm::step::accept);
    descriptor.close();
    c->established();
    co_return c;
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
