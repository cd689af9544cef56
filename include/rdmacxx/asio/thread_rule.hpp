#pragma once
/// @file
/// The Asio adapter's thread rule: a completion dispatcher (with the operations, receive pools
/// and CQs it serves) and a CM engine are used from one thread at a time. In builds with the
/// check (`RDMACXX_ASIO_THREAD_CHECK`, on unless `NDEBUG` is defined; define it alike in every
/// translation unit, as `NDEBUG`) a thread that enters one of them (runs one of their handlers,
/// starts one of their operations) while another thread is inside it is refused with
/// `io::thread_error`; without the check such a use is undefined.

#include "rdmacxx/error.hpp"

#include <atomic>
#include <memory>
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

/// A dispatcher or CM engine entered by a thread while another thread was inside it: two
/// threads in one `io_context::run()`, a thread pool, a strand over several threads, or an
/// operation started from another thread while the loop runs. Thrown out of the refused handler
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

/// Who is inside a dispatcher or engine now: each entry point (a handler of its, an operation
/// starting, `add`, `forget`, …) holds a `scope` while it runs. A scope on a thread while a
/// scope of another thread is open is refused (with the check); nested scopes on one thread
/// are fine, and so is a use from another thread once the first has left (handing it over,
/// e.g. `run()` on one thread and, after a join, on another). Without the check a scope does
/// nothing; the layout is the same either way, so that translation units built with and without
/// `NDEBUG` agree on the size of every class that holds one.
class thread_rule {
public:
    /// Marks this thread inside the guarded object until it goes.
    class scope {
    public:
        /// @throws thread_error when another thread is inside (with the check)
        scope([[maybe_unused]] thread_rule& rule, [[maybe_unused]] char const* what) {
#if RDMACXX_ASIO_THREAD_CHECK
            if (!rule.inside_) return; // a moved-from object: nothing to guard
            std::thread::id const me = std::this_thread::get_id();
            // Nested (the common case: an operation started by a handler the dispatcher runs): only
            // this thread sets its own id and only its outer scope clears it, so a plain load says so.
            if (rule.inside_->load(std::memory_order_relaxed) == me) return;
            std::thread::id inside{};
            if (rule.inside_->compare_exchange_strong(inside, me, std::memory_order_acq_rel)) {
                held_ = rule.inside_;
                return;
            }
            if (inside != me) refuse(what, inside, me); // else nested: the outer scope leaves
#endif
        }
        scope(scope const&) = delete;
        scope& operator=(scope const&) = delete;
        ~scope() {
            if (held_) held_->store(std::thread::id{}, std::memory_order_release);
        }

    private:
        // The outer scope's hold on the state: shared, so that a handler run inside the scope may
        // destroy the guarded object (the state goes with the last holder).
        std::shared_ptr<std::atomic<std::thread::id>> held_;
    };

    /// Nobody inside. With the check, allocates the state (it outlives the rule while a scope holds it).
    thread_rule() {
#if RDMACXX_ASIO_THREAD_CHECK
        inside_ = std::make_shared<std::atomic<std::thread::id>>();
#endif
    }
    /// Takes over `other`'s state (a thread inside it is inside this; a move is not made from
    /// inside it by another thread); `other` then guards nothing.
    thread_rule(thread_rule&& other) noexcept : inside_(std::move(other.inside_)) {}
    thread_rule& operator=(thread_rule&& other) noexcept {
        inside_ = std::move(other.inside_);
        return *this;
    }
    ~thread_rule() = default;
    thread_rule(thread_rule const&) = delete;
    thread_rule& operator=(thread_rule const&) = delete;

    /// This thread enters `what`; it leaves when the scope goes.
    /// @throws thread_error when another thread is inside (with the check)
    [[nodiscard]] scope enter(char const* what) { return scope{*this, what}; }

private:
    [[noreturn]] static void refuse(char const* what, std::thread::id inside, std::thread::id me) {
        std::ostringstream text;
        text << "thread " << me << " entered " << what << " while thread " << inside
             << " was inside it: it is used from one thread at a time (a single-threaded io_context; see "
                "docs/asio.md, \"Threads\")";
        throw thread_error(text.str());
    }

    std::shared_ptr<std::atomic<std::thread::id>> inside_; // null without the check, or moved from
};

} // namespace detail
} // namespace io
} // namespace v0
} // namespace rdmacxx
