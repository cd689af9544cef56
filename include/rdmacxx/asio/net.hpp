#pragma once
/// @file
/// Which Asio the adapter is built on: standalone Asio (`<asio/…>`, namespace `::asio`; 1.22 or
/// later), or Boost.Asio (`<boost/asio/…>`, namespace `boost::asio`; Boost 1.81 or later) when
/// `RDMACXX_ASIO_BOOST` is defined to 1 before any rdmacxx/asio header is included (Meson: the
/// `boost_asio` option builds rdmacxx's own tests both ways). The adapter names it `io::net`
/// everywhere. The completion signatures name `io::error_code`, Asio's own error code type
/// (`boost::system::error_code` with Boost, which converts to and from `std::error_code`: a
/// handler that takes `std::error_code` works with either). A program uses one of the two: its
/// translation units must agree on `RDMACXX_ASIO_BOOST` (the adapter's classes have one name).

#ifndef RDMACXX_ASIO_BOOST
#define RDMACXX_ASIO_BOOST 0
#endif

#if RDMACXX_ASIO_BOOST
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/version.hpp>
#if BOOST_ASIO_VERSION < 102600
#error "rdmacxx's Asio adapter needs Boost.Asio 1.26 (Boost 1.81) or later"
#endif
/// The namespace of the Asio the adapter uses (for specializations at global scope).
#define RDMACXX_ASIO_NS boost::asio
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#define RDMACXX_ASIO_HAS_CO_AWAIT 1
#endif
#else
#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/associator.hpp>
#include <asio/async_result.hpp>
#include <asio/bind_allocator.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/compose.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/version.hpp>
#if ASIO_VERSION < 102200
#error "rdmacxx's Asio adapter needs standalone Asio 1.22 or later"
#endif
/// The namespace of the Asio the adapter uses (for specializations at global scope).
#define RDMACXX_ASIO_NS asio
#if defined(ASIO_HAS_CO_AWAIT) // Asio 1.22 sees coroutines under g++; under clang define it (docs/asio.md)
#define RDMACXX_ASIO_HAS_CO_AWAIT 1
#endif
#endif

#include <system_error>

namespace rdmacxx {
inline namespace v0 {
namespace io {
/// The Asio the adapter is built on: `::asio`, or `boost::asio` under `RDMACXX_ASIO_BOOST`.
namespace net = ::RDMACXX_ASIO_NS;

namespace detail {
#if RDMACXX_ASIO_BOOST
/// The error code type Asio's own functions take (`boost::system::error_code`).
using net_error_code = ::boost::system::error_code;
#else
/// The error code type Asio's own functions take (`std::error_code`).
using net_error_code = std::error_code;
#endif

/// `net::error::operation_aborted`, Asio's own code for an aborted operation, in Asio's own
/// error code type.
[[nodiscard]] inline net_error_code operation_aborted() noexcept {
    return net::error::make_error_code(net::error::operation_aborted);
}
} // namespace detail

/// The error code of the adapter's completion signatures, `void(error_code, T)`: Asio's own —
/// `std::error_code` with standalone Asio, `boost::system::error_code` with Boost.Asio, so that
/// `redirect_error`, `as_tuple` and `use_future` work as with Asio's own operations. It holds
/// rdmacxx's categories (`wc_category()`, `cm::reject_category()`, …) either way, and converts
/// to `std::error_code`. An aborted operation completes with Asio's own
/// `net::error::operation_aborted` (compare `ec == asio::error::operation_aborted`, or
/// `boost::asio::error::operation_aborted`; a handler under Boost that takes `std::error_code`
/// compares with `std::errc::operation_canceled`).
using error_code = detail::net_error_code;
} // namespace io
} // namespace v0
} // namespace rdmacxx
