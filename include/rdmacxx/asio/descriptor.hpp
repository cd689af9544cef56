#pragma once
/// @file
/// The Asio adapter's descriptors: a duplicate of one of rdmacxx's file descriptors (a
/// completion channel's, a CM event channel's, a context's async event descriptor) put in an
/// `asio::posix::stream_descriptor`, closed again when Asio refuses it.

#include "rdmacxx/error.hpp"

#include <asio/posix/stream_descriptor.hpp>
#include <unistd.h>

namespace rdmacxx {
inline namespace v0 {
namespace io::detail {

/// Puts a duplicate of `fd` (dup(2)) in `descriptor`, which then owns it. When `assign` throws
/// (the reactor refuses the descriptor, or `descriptor` is open already) the duplicate is closed
/// and the exception passes on: no descriptor leaks. `what` names the descriptor in the error.
/// @throws sys_error when dup(2) fails; what `asio::posix::stream_descriptor::assign` throws.
inline void assign_duplicate(::asio::posix::stream_descriptor& descriptor, int fd, char const* what) {
    int const copy = ::dup(fd);
    if (copy < 0) [[unlikely]]
        rdmacxx::detail::throw_errno("dup", what);
    try {
        descriptor.assign(copy);
    } catch (...) {
        ::close(copy);
        throw;
    }
}

} // namespace io::detail
} // namespace v0
} // namespace rdmacxx
