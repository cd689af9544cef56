#pragma once
/// @file
/// The Asio adapter's device async events: `async_event_stream` wraps a context's async event
/// descriptor in an `asio::posix::stream_descriptor`, and `async_wait` on it completes with the
/// next `async_event` (port state changes, CQ overflow, a QP's fatal error, SRQ limit, …);
/// `async_events_for(ex, ctx)` is the device context's stream owned by the execution context.

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/descriptor.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/async.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"

#include <unistd.h>

#include <memory>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// A context's async event queue on an Asio executor: a duplicate of the async event
/// descriptor (non-blocking) in an `asio::posix::stream_descriptor`. Wait with
/// `async_wait(stream, token)`. Move-only; the context must outlive it.
/// Thread-safety: one `async_wait` at a time, on its executor.
/// @see ibv_get_async_event(3)
class async_event_stream {
public:
    /// The executor its descriptor runs on.
    using executor_type = net::any_io_executor;

    /// Reads `ctx`'s async events on `ex`.
    /// @throws sys_error when fcntl(2) or dup(2) fails.
    async_event_stream(executor_type const& ex, context& ctx) : queue_(ctx), descriptor_(ex) {
        detail::assign_duplicate(descriptor_, queue_.fd(), "for the async event stream's descriptor");
    }

    /// The queue the events are read from.
    [[nodiscard]] async_event_queue& queue() noexcept { return queue_; }
    /// The descriptor (a duplicate of the context's async event fd).
    [[nodiscard]] net::posix::stream_descriptor& descriptor() noexcept { return descriptor_; }
    /// The executor.
    [[nodiscard]] executor_type get_executor() noexcept { return descriptor_.get_executor(); }

private:
    async_event_queue queue_;
    net::posix::stream_descriptor descriptor_;
};

/// The async event streams of one execution context, one per device context
/// (`async_events_for`): a device's async events have one reader, and this is it. Made on first
/// use, destroyed with the execution context (`shutdown()`); a stream whose device context was
/// closed is dropped at the next lookup. Thread-safety: the context's own thread only.
/// @see asio::use_service, ibv_get_async_event(3)
class async_event_service final : public net::execution_context::service {
public:
    /// The service's identity in its context (Asio's `use_service`).
    static inline net::execution_context::id id; // NOLINT(readability-identifier-naming): Asio's name

    /// The service of `c` (made by `use_service`). (Asio's `service::context()` hides the name
    /// `context` in here: the device context is `rdmacxx::context`.)
    explicit async_event_service(net::execution_context& c) : net::execution_context::service(c) {}

    /// The stream of `ctx`: the one made before, or a new one on `ex`.
    /// @throws as `async_event_stream`'s constructor; std::bad_alloc
    async_event_stream& stream_for(net::any_io_executor const& ex, rdmacxx::context& ctx) {
        std::vector<entry> gone; // out of the list before they are destroyed (their waits abort)
        for (auto it = entries_.begin(); it != entries_.end();) {
            if (follow(it->ctx.get()) == nullptr) {
                gone.push_back(std::move(*it));
                it = entries_.erase(it);
            } else {
                ++it;
            }
        }
        gone.clear();
        for (entry const& e : entries_)
            if (follow(e.ctx.get()) == &ctx) return *e.stream;
        auto stream = std::make_unique<async_event_stream>(ex, ctx);
        entries_.push_back({ctx.anchor_cell().erased(), std::move(stream)});
        return *entries_.back().stream;
    }

private:
    void shutdown() override {
        std::vector<entry> gone = std::move(entries_);
        entries_.clear();
        gone.clear();
    }
    static rdmacxx::context* follow(void const* cell) noexcept {
        return rdmacxx::detail::link<rdmacxx::context>::follow(cell);
    }

    struct entry {
        std::shared_ptr<void const> ctx; // the device context's cell: null once it is closed
        std::unique_ptr<async_event_stream> stream;
    };
    std::vector<entry> entries_;
};

/// The async event stream of `ctx` in `ex`'s execution context (`async_event_service`): made on
/// first use, owned by the context, the same one for every later call with that device context.
/// `co_await rxa::async_wait(rxa::async_events_for(ex, ctx), use_awaitable)`. The device context
/// must outlive the waits on it.
/// @throws as `async_event_service::stream_for`
template <class Executor>
async_event_stream& async_events_for(Executor const& ex, context& ctx) {
    net::execution_context& c = net::query(ex, net::execution::context);
    return net::use_service<async_event_service>(c).stream_for(net::any_io_executor{ex}, ctx);
}

namespace detail {
/// `co_await` on an async event wait throws the library's exception (completion.hpp).
template <>
inline constexpr bool is_operation_value_v<std::optional<async_event>> = true;
} // namespace detail

/// Waits for the next async event of `s`'s context and completes with
/// `(io::error_code, std::optional<async_event>)`: the event (engaged; acknowledge it by letting
/// it go, before destroying the object it names), or an error code and nothing — the errno of a
/// failed ibv_get_async_event(3), or `asio::error::operation_aborted` when the wait is cancelled
/// (cancellation slots, `descriptor().cancel()`). An event already waiting is taken at once (the
/// handler is posted). Bound it with a timer (`asio::steady_timer`, `||`) where it must not wait
/// for ever. The signature is the same for every token; `co_await` with `asio::use_awaitable`
/// throws `rdmacxx::error` with the code. No token: `default_token_t`.
/// Thread-safety: one wait at a time per stream, on its executor.
/// @see ibv_get_async_event(3), ibv_ack_async_event(3)
template <class Token = default_token_t>
auto async_wait(async_event_stream& s, Token&& token = default_token_t{}) {
    return net::async_compose<Token, void(error_code, std::optional<async_event>)>(
        [&s, started = false](auto& self, detail::net_error_code ec = {}) mutable {
            if (ec) {
                self.complete(ec, std::nullopt);
                return;
            }
            std::optional<async_event> e;
            try {
                e = s.queue().try_get();
            } catch (rdmacxx::error const& x) {
                e.reset();
                ec = x.code();
            }
            if (e || ec) {
                if (!started) { // not from inside the initiating function
                    started = true;
                    net::post(s.get_executor(), [self = std::move(self), ev = std::move(e), ec]() mutable {
                        self.complete(ec, std::move(ev));
                    });
                    return;
                }
                self.complete(ec, std::move(e));
                return;
            }
            started = true;
            s.descriptor().async_wait(net::posix::stream_descriptor::wait_read, std::move(self));
        },
        token, s.descriptor());
}

} // namespace io
} // namespace v0
} // namespace rdmacxx
