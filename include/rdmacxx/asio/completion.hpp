#pragma once
/// @file
/// The completion signature of every operation of the Asio adapter, `void(error_code, T)`
/// whatever the token, and what makes the library's own exception reach the code that wants it:
///
/// - `io::as_exception(token)`, a token adapter that hands the handler `(std::exception_ptr, T)`
///   with the library's exception (`wc_error`, `argument_error`, `cm::rejected_error`, …) in
///   place of its code;
/// - `asio::use_awaitable` on an operation of the adapter behaves as
///   `io::as_exception(asio::use_awaitable)`: `co_await` throws the library's exception, while
///   `as_tuple`, `redirect_error` and every other token see the code (the same code the
///   exception carries in its `code()`);
/// - `io::default_token_t`, the token an operation takes when it is given none.

#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/work_completion.hpp"

#include "rdmacxx/asio/net.hpp"

#include <exception>
#include <new>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// The token an operation of the adapter uses when it is given none: the executor's default
/// completion token (`asio::default_completion_token_t`) where Asio names one, else
/// `asio::experimental::deferred` (Asio 1.22 names none; later versions name `deferred`): the
/// operation is returned unstarted, to be launched with a token or `co_await`-ed.
using default_token_t =
    std::conditional_t<std::is_void_v<net::default_completion_token_t<net::any_io_executor>>,
                       net::experimental::deferred_t, net::default_completion_token_t<net::any_io_executor>>;

/// A completion token that adapts `Token`: an operation of the adapter whose signature is
/// `void(error_code, T)` completes `Token`'s handler with `(std::exception_ptr, T)`, the
/// pointer null on success and otherwise holding the library's exception for the failure
/// (`wc_error` with the work completion, `argument_error` or `wr_error` for a refused post,
/// `cm::…` for a CM step, `rdmacxx::error` with the code for the rest). Made by `as_exception`.
template <class Token>
struct as_exception_t {
    /// The adapted token.
    Token token;
};

/// Adapts `token` as `as_exception_t` says: `io::as_exception([](std::exception_ptr e, auto c) {…})`,
/// `io::as_exception(asio::use_future)` (its `get()` throws the library's exception).
template <class Token>
[[nodiscard]] constexpr as_exception_t<std::decay_t<Token>> as_exception(Token&& token) {
    return {std::forward<Token>(token)};
}

namespace detail {

/// The library's exception for a failure known only by its code and the operation's value:
/// `wc_error` for a failed work completion, `rdmacxx::error` with the code otherwise.
template <class T>
[[nodiscard]] std::exception_ptr exception_of(std::error_code ec, T const& value) {
    if constexpr (std::is_same_v<T, work_completion>)
        if (ec.category() == wc_category())
            return std::make_exception_ptr(rdmacxx::detail::failed_completion_error(value.native()));
    return std::make_exception_ptr(rdmacxx::error(ec, "an RDMA operation"));
}

/// The code an exception carries: a `std::system_error`'s (every exception of the library is
/// one), ENOMEM for `std::bad_alloc`, EIO for anything else; empty for no exception.
[[nodiscard]] inline std::error_code code_of(std::exception_ptr const& e) noexcept {
    if (!e) return {};
    try {
        std::rethrow_exception(e);
    } catch (std::system_error const& x) {
        return x.code();
    } catch (std::bad_alloc const&) {
        return std::make_error_code(std::errc::not_enough_memory);
    } catch (...) {
        return std::make_error_code(std::errc::io_error);
    }
}

/// The handler an `as_exception_t` token makes of its token's handler. The adapter's own
/// completions hand `inner` the exception they hold (see `complete`); anything else that calls
/// it with `(io::error_code, T)` gets the exception `exception_of` makes.
template <class Handler>
struct exception_handler {
    /// The adapted token's handler: takes `(std::exception_ptr, T)`.
    Handler inner;
    template <class T>
    void operator()(error_code ec, T value) {
        std::exception_ptr e = ec ? exception_of(std::error_code{ec}, value) : nullptr;
        std::move(inner)(std::move(e), std::move(value));
    }
};

template <class Handler>
inline constexpr bool is_exception_handler_v = false;
template <class Handler>
inline constexpr bool is_exception_handler_v<exception_handler<Handler>> = true;

/// What a handler of the adapter is called with: `(code, value)`, or, for an `as_exception_t`
/// handler, `(exception, value)` given to its inner handler. `Make` makes the exception on demand
/// (only on failure, only for such a handler). Used by every completion of the adapter so that a
/// handler is called one way.
template <class Handler>
struct outcome_for {
    using handler_type = Handler;  ///< what is called
    using first_type = error_code; ///< its first argument (Asio's error code)
    static Handler&& unwrap(Handler& h) noexcept { return std::move(h); }
    template <class T, class Make>
    static first_type first(error_code ec, T const&, Make&&) {
        return ec;
    }
};
template <class Inner>
struct outcome_for<exception_handler<Inner>> {
    using handler_type = Inner;
    using first_type = std::exception_ptr;
    static Inner&& unwrap(exception_handler<Inner>& h) noexcept { return std::move(h.inner); }
    template <class T, class Make>
    static first_type first(error_code ec, T const& value, Make&& make) {
        if (!ec) return nullptr;
        if (std::exception_ptr e = std::forward<Make>(make)()) return e;
        return exception_of(std::error_code{ec}, value);
    }
};

/// The initiation of an `as_exception_t` token: the operation's own, given the wrapped handler.
template <class Initiation>
struct exception_initiation {
    Initiation initiation;
    template <class Handler, class... Args>
    void operator()(Handler&& handler, Args&&... args) && {
        std::move(initiation)(exception_handler<std::decay_t<Handler>>{std::forward<Handler>(handler)},
                              std::forward<Args>(args)...);
    }
};

/// The values the adapter's operations complete with: `asio::use_awaitable` on them throws the
/// library's exception (the `async_result` specialization below).
template <class T>
inline constexpr bool is_operation_value_v = std::is_same_v<T, work_completion>;

} // namespace detail
} // namespace io
} // namespace v0
} // namespace rdmacxx

/// @cond
// The handler of as_exception has its inner handler's associated executor, allocator and
// cancellation slot.
template <template <class, class> class Associator, class Handler, class Default>
struct RDMACXX_ASIO_NS::associator<Associator, rdmacxx::io::detail::exception_handler<Handler>, Default>
    : Associator<Handler, Default> {
    static typename Associator<Handler, Default>::type get(rdmacxx::io::detail::exception_handler<Handler> const& h,
                                                           Default const& c = Default()) noexcept {
        return Associator<Handler, Default>::get(h.inner, c);
    }
};

// as_exception(token): an operation of signature void(error_code, T) is started for `token`
// as one of signature void(std::exception_ptr, T).
template <class Token, class T>
struct RDMACXX_ASIO_NS::async_result<rdmacxx::io::as_exception_t<Token>, void(rdmacxx::io::error_code, T)> {
    template <class Initiation, class AdaptedToken, class... Args>
    static auto initiate(Initiation&& initiation, AdaptedToken&& token, Args&&... args) {
        return rdmacxx::io::net::async_initiate<Token, void(std::exception_ptr, T)>(
            rdmacxx::io::detail::exception_initiation<std::decay_t<Initiation>>{std::forward<Initiation>(initiation)},
            token.token, std::forward<Args>(args)...);
    }
};

#if defined(RDMACXX_ASIO_HAS_CO_AWAIT)
// co_await on an operation of the adapter throws the library's exception: use_awaitable is
// as_exception(use_awaitable) for the values the adapter's operations complete with.
template <class Executor, class T>
    requires rdmacxx::io::detail::is_operation_value_v<T>
struct RDMACXX_ASIO_NS::async_result<rdmacxx::io::net::use_awaitable_t<Executor>, void(rdmacxx::io::error_code, T)> {
    using return_type = typename rdmacxx::io::net::async_result<rdmacxx::io::net::use_awaitable_t<Executor>,
                                                                void(std::exception_ptr, T)>::return_type;
    template <class Initiation, class... Args>
    static return_type initiate(Initiation&& initiation, rdmacxx::io::net::use_awaitable_t<Executor> token,
                                Args&&... args) {
        return rdmacxx::io::net::
            async_result<rdmacxx::io::net::use_awaitable_t<Executor>, void(std::exception_ptr, T)>::initiate(
                rdmacxx::io::detail::exception_initiation<std::decay_t<Initiation>>{
                    std::forward<Initiation>(initiation)},
                token, std::forward<Args>(args)...);
    }
};
#endif
/// @endcond
