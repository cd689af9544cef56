#pragma once
/// @file
/// `cm::engine`: one RDMA CM event channel and everything waiting on it — the connections being
/// made (each a state machine advanced by its events and bounded by its step's deadline), the
/// listeners, and the connections made, whose dead peers it notices. It never blocks and starts
/// no thread: a blocking call, a user's epoll (poll, io_uring) loop or an Asio reactor drives it
/// by waiting on `fd()` for at most `timeout()` and calling `process()`. The flows that start
/// work on it are in cm/handshake.hpp (`cm::connect(engine&, …)`, `cm::accept(engine&, …)`).

#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/detail/wait.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

namespace detail {

/// Whether `e` is the event a step of `what` waits for: true when it is of type `want` and
/// succeeded. Otherwise throws: `timeout_error` naming `s` when the CM reports that the step timed
/// out (status -ETIMEDOUT), the matching `cm_error` for another failure event, `cm_error`
/// (EPROTO) for another unexpected one. Every wait of a CM step reads its events through it.
inline void check_event(event const& e, event_type want, step s, std::string const& what) {
    if (e.type() == want && e.status() == 0) return;
    if (e.status() == -ETIMEDOUT && e.type() != event_type::rejected) [[unlikely]]
        throw timeout_error(s, "the CM reported " + e.to_string() + " while " + what);
    e.throw_if_failed(what);
    throw cm_error(e.type(), e.status(), "arrived while waiting for " + std::string{to_string(want)} + " " + what,
                   e.private_data_copy(), EPROTO);
}

/// Takes events from `channel` until one of type `want` comes and returns it; throws
/// `timeout_error` naming `s` when nothing came within `timeout` (`milliseconds::max()`: for
/// ever), else as `check_event`. For the flows that own their channel (`listener::get_request`,
/// the multicast group).
inline event expect(event_channel& channel, event_type want, std::chrono::milliseconds timeout, std::string const& what,
                    step s = step::other) {
    auto e = channel.get(timeout); // saturates: max() waits for ever
    if (!e) [[unlikely]]
        throw timeout_error(s, "no " + std::string{to_string(want)} + " event within " +
                                   std::to_string(timeout.count()) + " ms while " + what);
    check_event(*e, want, s, what);
    return *e;
}

/// Whatever takes the events of one id on an engine's channel: a listener (its connect requests),
/// or a connection made on the engine (its `disconnected`, `device_removal`, …).
class event_target {
public:
    /// Takes `e`, an event of the id it was registered for. May destroy the target itself (a
    /// user's callback dropping the connection): the engine touches nothing of it afterwards.
    /// @throws what the user's callback throws.
    virtual void take(event const& e) = 0;

protected:
    event_target() = default;
    event_target(event_target const&) = default;
    event_target& operator=(event_target const&) = default;
    ~event_target() = default;
};

/// One connection being made on an engine (cm/handshake.hpp): advanced by the events of its id
/// until it finishes, or failed when its step's deadline passes. Owned by the engine until then.
class pending {
public:
    pending() = default;
    pending(pending const&) = delete;
    pending& operator=(pending const&) = delete;
    virtual ~pending() = default;

    /// Advances with `e` (an event of `key()`); true when the handshake is over (connected or
    /// failed: `finish()` then reports it). Never throws: a failure is kept for `finish()`.
    virtual bool take(event const& e) noexcept = 0;
    /// The step's deadline passed: the handshake fails with `timeout_error` naming the step.
    virtual void expire() noexcept = 0;
    /// Reports the outcome to the caller's completion (after the engine let go of the handshake:
    /// the completion may start new work on the engine, or destroy what it is handed).
    /// @throws what the completion throws.
    virtual void finish() = 0;
    /// The id whose events advance it (stable while it is pending).
    [[nodiscard]] virtual rdma_cm_id* key() const noexcept = 0;
    /// When the current step fails.
    [[nodiscard]] std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }

protected:
    std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
};

} // namespace detail

/// One RDMA CM event channel and what waits on it: connections being made (`cm::connect(engine&,
/// …)`, `cm::accept(engine&, …)`), listeners made on it (`listener(engine&, …)`), and the
/// connections those made, for as long as they live. Nothing of it blocks and it starts no
/// thread: its owner's loop waits until `fd()` is readable or `timeout()` passed, then calls
/// `process()`, which takes every waiting event, advances the handshakes it names (each step
/// within its deadline, `cm::deadlines`), hands connect requests to their listener, ends the
/// connections whose peer left or died (the QP to ERR at once, the peer's DREQ answered), and
/// fails the handshakes whose deadline passed. Completions run inside `process()` (and inside
/// the call that started the work when it finishes at once: a UD accept); what a completion or
/// callback throws leaves `process()`, with the engine consistent (what was being reported is
/// done with; events not taken yet wait for the next call).
///
/// One engine serves any number of connections: a server of 1,000 clients is one descriptor in
/// its loop, one thread, no thread per connection. `wait(timeout)` is the blocking driver (what
/// `cm::connect` and `connect_request::accept` run on an engine of their own).
///
/// Lifetime: a connection made on the engine keeps the engine's event channel open (its id lives
/// on it) and leaves the engine when destroyed; when the engine is destroyed first, its
/// connections stay usable but nobody reads their events (a dead peer is then seen only by the
/// traffic, `dead_peer_bound`). Handshakes still pending when it is destroyed are abandoned:
/// their resources freed, their completions destroyed uncalled. Not movable (what is registered
/// refers to it).
/// Thread-safety: not thread-safe; one thread drives it (the one running its loop), and starts,
/// destroys and disconnects the connections on it.
/// @see rdma_create_event_channel(3), rdma_get_cm_event(3)
class engine {
public:
    /// An engine on a new event channel (non-blocking).
    /// @throws sys_error when rdma_create_event_channel(3) fails; std::bad_alloc.
    engine() : channel_(std::make_shared<event_channel>()), anchor_(this) {}
    engine(engine const&) = delete;
    engine& operator=(engine const&) = delete;
    /// Abandons the handshakes still pending (their ids and resources destroyed), then lets go of
    /// the channel (kept open by the connections still on it).
    ~engine() = default;

    /// The event channel's descriptor: readable when `process()` has events to take (for epoll,
    /// poll, io_uring or an Asio descriptor).
    [[nodiscard]] int fd() const noexcept { return channel_->fd(); }
    /// The event channel.
    [[nodiscard]] event_channel& channel() noexcept { return *channel_; }

    /// How long the loop may wait before calling `process()` even if `fd()` stays quiet: until the
    /// earliest deadline of a pending handshake (zero when it passed); empty when nothing is
    /// pending (wait on `fd()` alone).
    [[nodiscard]] std::optional<std::chrono::milliseconds> timeout() const noexcept {
        if (pending_.empty()) return std::nullopt;
        auto earliest = std::chrono::steady_clock::time_point::max();
        for (auto const& [id, p] : pending_)
            earliest = std::min(earliest, p->deadline());
        auto const left = std::chrono::ceil<std::chrono::milliseconds>(earliest - std::chrono::steady_clock::now());
        return std::max(left, std::chrono::milliseconds{0});
    }

    /// `timeout()` as epoll_wait(2) and poll(2) take it: -1 for none, else milliseconds (at most
    /// 2^30).
    [[nodiscard]] int poll_timeout() const noexcept {
        auto const t = timeout();
        if (!t) return -1;
        return static_cast<int>(std::min<std::chrono::milliseconds::rep>(t->count(), 1 << 30));
    }

    /// Takes every event waiting on the channel and applies it (see the class), then fails the
    /// handshakes whose deadline passed. Never blocks. Returns the number of events taken.
    /// @throws sys_error when rdma_get_cm_event(3) fails other than with EAGAIN (the channel is
    ///         broken: nothing more will come on it); what a completion or callback throws.
    std::size_t process() {
        std::size_t taken = 0;
        while (auto e = channel_->try_get()) {
            ++taken;
            dispatch(*e);
        }
        expire();
        return taken;
    }

    /// The blocking driver: waits until an event arrives, a deadline passes or `timeout` passed
    /// (`milliseconds::max()`: no bound of its own), then `process()`. Returns the events taken.
    /// @throws sys_error when poll(2) or rdma_get_cm_event(3) fails; as `process()`.
    std::size_t wait(std::chrono::milliseconds timeout) {
        int const limit = timeout == std::chrono::milliseconds::max() ? -1 : rdmacxx::detail::clamp_ms(timeout);
        int const own = poll_timeout();
        int const ms = own < 0 ? limit : (limit < 0 ? own : std::min(own, limit));
        pollfd pfd{fd(), POLLIN, 0};
        if (::poll(&pfd, 1, ms) < 0 && errno != EINTR) [[unlikely]]
            rdmacxx::detail::throw_errno("poll", "waiting on a CM engine's event channel");
        return process();
    }

    /// Handshakes in progress.
    [[nodiscard]] std::size_t pending() const noexcept { return pending_.size(); }
    /// Listeners and connections whose events the engine takes.
    [[nodiscard]] std::size_t registered() const noexcept { return targets_.size(); }
    /// Events that named an id the engine does not know (one destroyed meanwhile), dropped (the
    /// new id of a connect request for a listener gone is destroyed).
    [[nodiscard]] std::size_t stray() const noexcept { return stray_; }

    /// @cond
    // What the flows (cm/handshake.hpp, cm/listener.hpp, cm::connection) use.
    [[nodiscard]] std::shared_ptr<event_channel> const& shared_channel() const noexcept { return channel_; }
    [[nodiscard]] rdmacxx::detail::link<engine> cell() const noexcept { return anchor_.cell(); }
    void start(std::unique_ptr<detail::pending> p) { pending_.emplace(p->key(), std::move(p)); }
    void add(rdma_cm_id* id, detail::event_target* t) { targets_[id] = t; }
    void remove(rdma_cm_id* id) noexcept { targets_.erase(id); }
    /// @endcond

private:
    void dispatch(event const& e) {
        // A connect request is the listener's: its own id is new.
        rdma_cm_id* const key = e.type() == event_type::connect_request ? e.listen_id() : e.id();
        if (auto node = pending_.extract(key); !node.empty()) {
            // Out of the map while it runs: its completion may start more work on the engine
            // (or throw: the handshake is then gone with the node).
            if (node.mapped()->take(e))
                node.mapped()->finish();
            else
                pending_.insert(std::move(node));
            return;
        }
        if (auto it = targets_.find(key); it != targets_.end()) {
            it->second->take(e); // may remove itself: nothing of `it` is used afterwards
            return;
        }
        ++stray_;
        // A request nobody listens for any more: its new id is ours to destroy (the peer sees
        // its connect fail), or it would leak.
        if (e.type() == event_type::connect_request) (void)::rdma_destroy_id(e.id());
    }

    void expire() {
        if (pending_.empty()) return;
        auto const now = std::chrono::steady_clock::now();
        for (;;) {
            auto it = std::find_if(pending_.begin(), pending_.end(),
                                   [now](auto const& entry) { return entry.second->deadline() <= now; });
            if (it == pending_.end()) return;
            auto node = pending_.extract(it);
            node.mapped()->expire();
            node.mapped()->finish();
        }
    }

    std::shared_ptr<event_channel> channel_;
    std::map<rdma_cm_id*, std::unique_ptr<detail::pending>> pending_;
    std::map<rdma_cm_id*, detail::event_target*> targets_;
    std::size_t stray_ = 0;
    rdmacxx::detail::anchor<engine> anchor_;
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
