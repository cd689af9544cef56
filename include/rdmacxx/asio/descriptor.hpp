#pragma once
/// @file
/// The Asio adapter's descriptors: a duplicate of one of rdmacxx's file descriptors (a
/// completion channel's, a CM event channel's, a context's async event descriptor) put in an
/// `asio::posix::stream_descriptor`, closed again when Asio refuses it.

#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/error.hpp"

#include <unistd.h>

#include <string>
#include <system_error>

namespace rdmacxx {
inline namespace v0 {
namespace io::detail {

/// Puts a duplicate of `fd` (dup(2)) in `descriptor`, which then owns it. When `assign` fails
/// (the reactor refuses the descriptor, or `descriptor` is open already) the duplicate is closed
/// and the failure thrown as `rdmacxx::error` with Asio's code, with either Asio (Boost.Asio's
/// own exception is no `std::system_error`): no descriptor leaks. `what` names the descriptor.
/// @throws sys_error when dup(2) fails; rdmacxx::error when Asio refuses the descriptor.
inline void assign_duplicate(net::posix::stream_descriptor& descriptor, int fd, char const* what) {
    int const copy = ::dup(fd);
    if (copy < 0) [[unlikely]]
        rdmacxx::detail::throw_errno("dup", what);
    detail::net_error_code ec;
    descriptor.assign(copy, ec);
    if (ec) [[unlikely]] {
        ::close(copy);
        throw rdmacxx::error(std::error_code{ec}, std::string{"asio::posix::stream_descriptor::assign "} + what);
    }
}

} // namespace io::detail
} // namespace v0
} // namespace rdmacxx
