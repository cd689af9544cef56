#pragma once
/// @file
/// The Asio adapter's device async events: `async_event_stream` wraps a context's async event
/// descriptor in an `asio::posix::stream_descriptor`, and `async_wait` on it completes with the
/// next `async_event` (port state changes, CQ overflow, a QP's fatal error, SRQ limit, …).

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/descriptor.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/async.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/error.hpp"

#include <unistd.h>

#include <optional>
#include <system_error>
#include <utility>

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
