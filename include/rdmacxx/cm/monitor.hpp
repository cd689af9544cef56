#pragma once
/// @file
/// `cm::connection_state` and the monitor behind a `cm::connection`: what turns the CM's
/// `disconnected` (a peer that left, or died and had its id destroyed by its kernel) into a
/// queue pair in the ERR state, so that every WR in flight completes with
/// `IBV_WC_WR_FLUSH_ERR` and every waiter on the CQ wakes. Whoever reads the connection's event
/// channel feeds it: the engine the connection was made on (`cm::engine::process`, no thread), or
/// for a connection with a channel of its own, the one thread of that channel (`watch`).

#include "rdmacxx/cm/engine.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/cm/event_type.hpp"
#include "rdmacxx/detail/callback.hpp"
#include "rdmacxx/detail/wait.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// Where a connection is in its life.
enum class connection_state {
    connecting,   ///< accepted on a shared channel, `established` not seen yet
    established,  ///< data may flow
    disconnected, ///< `disconnected` (or `device_removal`) seen, or `disconnect` called; the QP is in ERR
    failed,       ///< a failure event (`connect_error`, `unreachable`, `rejected`) ended it; the QP is in ERR
};

namespace detail {

/// The shared state of one connection, on the heap so that a moved connection keeps it: its
/// state, the QP to move to ERR when the peer goes, and what feeds it the id's events: the engine
/// it joined (`join`), or, for a connection with its own event channel, a thread that takes the
/// channel's events once the connection is established (`watch`).
/// Thread-safety: every member may be called from any thread, but `join`, `leave` and `take`
/// only from the thread driving the engine.
class connection_monitor final : public event_target {
public:
    /// Monitors the connection of `id`; its QP is named later (`set_qp`).
    explicit connection_monitor(rdma_cm_id* id) noexcept : id_(id) {}
    connection_monitor(connection_monitor const&) = delete;
    connection_monitor& operator=(connection_monitor const&) = delete;
    ~connection_monitor() {
        stop();
        leave();
    }

    /// Takes the id's events from `eng` from now on (`take`), until `leave()`.
    void join(engine& eng) {
        eng.add(id_, this);
        engine_ = eng.cell();
    }
    /// Stops taking events from the engine joined (if it still exists).
    void leave() noexcept {
        if (engine* const eng = engine_.get_if()) eng->remove(id_);
        engine_ = {};
    }

    /// Calls `fn(state)` once, from the thread that applies the event ending the connection
    /// (`disconnected`, `device_removal`) — the engine's `process()` or the monitor thread — after
    /// the QP went to ERR. `fn` may destroy the connection. What it throws leaves `process()`
    /// (on the monitor thread: dropped). Replaces an earlier one.
    void on_end(rdmacxx::detail::callback<void(connection_state)> fn) {
        std::lock_guard lock{mutex_};
        on_end_ = std::move(fn);
    }

    /// An event of the id, from the engine: applied (`apply`), then the end callback if it ended
    /// the connection. Nothing of `*this` is touched after the callback, which may destroy it.
    /// @throws what the end callback throws.
    void take(event const& e) override {
        connection_state const before = state();
        (void)apply(e.type());
        notify_end(before);
    }

    /// The QP to move to ERR when the connection ends (null: none).
    void set_qp(ibv_qp* qp) noexcept {
        std::lock_guard lock{mutex_};
        qp_ = qp;
    }

    /// The state.
    [[nodiscard]] connection_state state() const noexcept { return state_.load(std::memory_order_acquire); }

    /// Marks the connection established.
    void established() noexcept {
        std::lock_guard lock{mutex_};
        if (state_.load(std::memory_order_relaxed) == connection_state::connecting)
            state_.store(connection_state::established, std::memory_order_release);
    }

    /// Starts a thread that takes the events of `channel` (the connection's own) and applies
    /// them (`apply`) until `stop()`.
    /// @throws sys_error when eventfd(2) fails; std::system_error when the thread cannot start.
    void watch(event_channel& channel) {
        stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (stop_fd_ < 0) [[unlikely]]
            rdmacxx::detail::throw_errno("eventfd", "for the CM connection monitor");
        try {
            thread_ = std::thread{[this, &channel] { run(channel); }};
        } catch (...) {
            ::close(stop_fd_);
            stop_fd_ = -1;
            throw;
        }
    }

    /// Stops the thread of `watch` (if any) and waits for it; no event is taken afterwards.
    void stop() noexcept {
        if (thread_.joinable()) {
            std::uint64_t const one = 1;
            (void)!::write(stop_fd_, &one, sizeof one);
            thread_.join();
        }
        if (stop_fd_ >= 0) {
            ::close(stop_fd_);
            stop_fd_ = -1;
        }
    }

    /// True when `watch` runs a thread.
    [[nodiscard]] bool watching() const noexcept { return thread_.joinable(); }

    /// Applies an event of the connection's id: `established` marks it established;
    /// `disconnected` and `device_removal` end it (`ended`); anything else changes nothing.
    /// Returns true when the event was one of these.
    bool apply(event_type type) noexcept {
        switch (type) {
        case event_type::established:
            established();
            return true;
        case event_type::disconnected:
        case event_type::device_removal:
            ended();
            return true;
        case event_type::connect_error:
        case event_type::unreachable:
        case event_type::rejected:
            failed();
            return false; // the caller reports the failure
        default:
            return false;
        }
    }

    /// The connection failed before or while it was being established (a failure event): the
    /// QP to ERR (what was posted completes flushed), the state `failed`, every waiter woken.
    void failed() noexcept {
        std::lock_guard lock{mutex_};
        if (state_.load(std::memory_order_relaxed) == connection_state::disconnected) return;
        qp_to_error();
        state_.store(connection_state::failed, std::memory_order_release);
        event_seen_ = true;
        changed_.notify_all();
    }

    /// The connection ended (the CM said so): moves the QP to ERR at once (ibv_modify_qp(3)),
    /// so everything in flight completes with IBV_WC_WR_FLUSH_ERR; answers a peer's disconnect
    /// (rdma_disconnect(3) sends the DREP, as rdma_cm(7) has it); wakes `wait_ended`.
    void ended() noexcept {
        std::lock_guard lock{mutex_};
        qp_to_error();
        if (state_.load(std::memory_order_relaxed) == connection_state::established)
            (void)::rdma_disconnect(id_); // EINVAL when the CM already tore it down: fine
        state_.store(connection_state::disconnected, std::memory_order_release);
        event_seen_ = true;
        changed_.notify_all();
    }

    /// Starts our side of the disconnect when established (rdma_disconnect(3): a DREQ to the
    /// peer; the QP to ERR, also one not made on the id, which librdmacm does not know) and marks
    /// the connection disconnected. Returns 0, or the call's errno.
    int disconnect() noexcept {
        std::lock_guard lock{mutex_};
        if (state_.load(std::memory_order_relaxed) != connection_state::established) return 0;
        int const rc = ::rdma_disconnect(id_);
        qp_to_error();
        state_.store(connection_state::disconnected, std::memory_order_release);
        changed_.notify_all();
        return rc == 0 ? 0 : rdmacxx::detail::cm_errno(rc);
    }

    /// Moves the QP (if any) to ERR now, whatever the state: what is posted completes flushed.
    /// The one place a CM connection's QP goes to ERR (the end, a failure, a disconnect and the
    /// connection's teardown all come here).
    void to_error() noexcept {
        std::lock_guard lock{mutex_};
        qp_to_error();
    }

    /// Waits at most `timeout` until the CM reported the end (`disconnected`) — or, with
    /// `or_local`, also until our own `disconnect`. True when it came.
    [[nodiscard]] bool wait_ended(std::chrono::milliseconds timeout, bool or_local) {
        std::unique_lock lock{mutex_};
        // wait_until a saturated deadline: wait_for(milliseconds::max()) would overflow.
        return changed_.wait_until(lock, rdmacxx::detail::deadline_after(timeout), [&] {
            return event_seen_ ||
                   (or_local && state_.load(std::memory_order_relaxed) == connection_state::disconnected);
        });
    }

private:
    // The QP (if any) to ERR: what is posted completes flushed. Called with `mutex_` held.
    void qp_to_error() noexcept {
        if (qp_ == nullptr) return;
        (void)rdmacxx::detail::move_to_error(qp_);
    }

    // Calls the end callback (taken out first: it may destroy `*this`) when the state left
    // `before` for an end.
    void notify_end(connection_state before) {
        connection_state const now = state();
        if (now == before || (now != connection_state::disconnected && now != connection_state::failed)) return;
        rdmacxx::detail::callback<void(connection_state)> fn;
        {
            std::lock_guard lock{mutex_};
            fn = std::move(on_end_);
            on_end_ = {};
        }
        if (fn) fn(now);
    }

    void run(event_channel& channel) noexcept {
        pollfd fds[2] = {{channel.fd(), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
        for (;;) {
            if (::poll(fds, 2, -1) < 0) {
                if (errno == EINTR) continue;
                return;
            }
            if (fds[1].revents != 0) return;
            try {
                while (auto e = channel.try_get()) {
                    connection_state const before = state();
                    (void)apply(e->type());
                    try {
                        notify_end(before);
                    } catch (...) { // NOLINT(bugprone-empty-catch): a callback's failure, on a thread of ours
                    }
                }
            } catch (...) {
                return; // the channel failed: nothing more will come on it
            }
        }
    }

    rdma_cm_id* id_;
    ibv_qp* qp_ = nullptr;
    std::atomic<connection_state> state_{connection_state::connecting};
    bool event_seen_ = false;
    std::mutex mutex_;
    std::condition_variable changed_;
    int stop_fd_ = -1;
    std::thread thread_;
    rdmacxx::detail::link<engine> engine_;
    rdmacxx::detail::callback<void(connection_state)> on_end_;
};

} // namespace detail
} // namespace cm
} // namespace v0
} // namespace rdmacxx
