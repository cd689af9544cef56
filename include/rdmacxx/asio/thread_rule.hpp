#pragma once
/// @file
/// The Asio adapter's thread rule: a completion dispatcher (with the operations, receive pools
/// and CQs it serves) and a CM engine are used from one thread at a time. In builds with the
/// check (`RDMACXX_ASIO_THREAD_CHECK`, on unless `NDEBUG` is defined) a second thread that
/// runs one of their handlers, or starts one of their operations, while the first still has
/// operations pending is refused with `io::thread_error`; without it such a use is undefined.

#include "rdmacxx/error.hpp"

#include <atomic>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>

#ifndef RDMACXX_ASIO_THREAD_CHECK
#ifdef NDEBUG
#define RDMACXX_ASIO_THREAD_CHECK 0
#else
#define RDMACXX_ASIO_THREAD_CHECK 1
#endif
#endif

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// A dispatcher or CM engine used from a second thread while a first thread has operations
/// pending on it: two threads in one `io_context::run()`, a thread pool, a strand over several
/// threads, or an operation started from another thread. Thrown out of the refused handler
/// (so out of that thread's `run()`) or out of the refused initiation, before it touched any
/// state. Its code is `std::errc::operation_not_permitted`. Only in builds with the check
/// (`RDMACXX_ASIO_THREAD_CHECK`, the default unless `NDEBUG` is defined).
class thread_error : public rdmacxx::error {
public:
    /// @param message which object, what was refused and on which threads
    explicit thread_error(std::string message)
        : error(std::make_error_code(std::errc::operation_not_permitted), std::move(message)) {}
};

namespace detail {

/// The owner of a dispatcher or engine: the thread that ran its first handler since it last
/// had nothing pending. `enter` (a handler) takes ownership when there is none; `check` (an
/// initiation) only compares; `release` (nothing pending) lets the next thread take it. Empty
/// and free without the check.
class thread_rule {
public:
#if RDMACXX_ASIO_THREAD_CHECK
    thread_rule() = default;
    /// Takes `other`'s owner (the object it guards moved); `other` has none.
    thread_rule(thread_rule&& other) noexcept
        : owner_(other.owner_.exchange(std::thread::id{}, std::memory_order_acq_rel)) {}
    thread_rule& operator=(thread_rule&& other) noexcept {
        owner_.store(other.owner_.exchange(std::thread::id{}, std::memory_order_acq_rel), std::memory_order_release);
        return *this;
    }
    ~thread_rule() = default;
    thread_rule(thread_rule const&) = delete;
    thread_rule& operator=(thread_rule const&) = delete;

    /// A handler of `what` starts on this thread: it becomes the owner, or must be the owner.
    /// @throws thread_error when another thread owns it
    void enter(char const* what) {
        std::thread::id const me = std::this_thread::get_id();
        std::thread::id expected{};
        if (owner_.compare_exchange_strong(expected, me, std::memory_order_acq_rel) || expected == me) return;
        refuse(what, "ran a handler", expected, me);
    }
    /// An operation of `what` starts on this thread: no other thread may own it.
    /// @throws thread_error when another thread owns it
    void check(char const* what) const {
        std::thread::id const owner = owner_.load(std::memory_order_acquire);
        std::thread::id const me = std::this_thread::get_id();
        if (owner == std::thread::id{} || owner == me) return;
        refuse(what, "started an operation", owner, me);
    }
    /// Nothing is pending any more: the next thread to run a handler owns it.
    void release() noexcept { owner_.store(std::thread::id{}, std::memory_order_release); }

private:
    [[noreturn]] static void refuse(char const* what, char const* did, std::thread::id owner, std::thread::id me) {
        std::ostringstream text;
        text << "thread " << me << ' ' << did << " of " << what << " while thread " << owner
             << " has operations pending on it: it is used from one thread at a time (a single-threaded "
                "io_context; see docs/asio.md, \"Threads\")";
        throw thread_error(text.str());
    }

    std::atomic<std::thread::id> owner_{};
#else
    void enter(char const* /*what*/) noexcept {}
    void check(char const* /*what*/) const noexcept {}
    void release() noexcept {}
#endif
};

} // namespace detail
} // namespace io
} // namespace v0
} // namespace rdmacxx
