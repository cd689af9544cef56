#pragma once
// The Asio that the adapter's device tests are built on: standalone Asio, or Boost.Asio when
// RDMACXX_ASIO_BOOST is 1 (the asio_tests_boost program). Either way the tests write `asio::`
// (under Boost, a namespace alias for boost::asio), test::net_system_error is what
// use_future's get() throws and test::aborted(ec) says whether ec is an abort.
#include "rdmacxx/asio/net.hpp"

#if RDMACXX_ASIO_BOOST
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>
namespace asio = boost::asio;
namespace test {
using net_system_error = boost::system::system_error;
// An aborted operation: Asio's own code, or that code after a conversion to std::error_code.
inline bool aborted(boost::system::error_code const& ec) { return ec == boost::asio::error::operation_aborted; }
inline bool aborted(std::error_code const& ec) { return ec == std::errc::operation_canceled; }
} // namespace test
#else
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <system_error>
namespace test {
using net_system_error = std::system_error;
// An aborted operation: Asio's own code.
inline bool aborted(std::error_code const& ec) { return ec == asio::error::operation_aborted; }
} // namespace test
#endif
