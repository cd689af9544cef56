#pragma once
/// @file
/// The C boundary of the MAD layer: the only header that includes libibumad. Everything in
/// rdmacxx/mad/ that talks to the kernel includes this one, never <infiniband/umad.h> directly.

#include "rdmacxx/detail/verbs.hpp"

#include <infiniband/umad.h>

#include <cerrno>
#include <cstddef>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The errno of a libibumad call that returned `rc` < 0: its functions return `-errno`, except
/// the registrations, which return -EPERM whatever the kernel said and leave the kernel's errno
/// in `errno` (umad_register(3)); `errno` wins when it is set. Never 0.
[[nodiscard]] inline int umad_errno(int rc, int saved_errno) noexcept {
    if (saved_errno != 0) return saved_errno;
    return rc < 0 ? -rc : EIO;
}

/// One open umad port file descriptor (umad_open_port(3)), closed on destruction
/// (umad_close_port(3)). Move-only; -1 when empty.
class umad_fd {
public:
    /// Empty.
    umad_fd() noexcept = default;
    /// Takes `fd`, as umad_open_port(3) returned it.
    explicit umad_fd(int fd) noexcept : fd_(fd) {}
    umad_fd(umad_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    umad_fd& operator=(umad_fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    umad_fd(umad_fd const&) = delete;
    umad_fd& operator=(umad_fd const&) = delete;
    ~umad_fd() { reset(); }

    /// The descriptor, or -1.
    [[nodiscard]] int get() const noexcept { return fd_; }

private:
    void reset() noexcept {
        if (fd_ >= 0) (void)::umad_close_port(std::exchange(fd_, -1));
    }
    int fd_ = -1;
};

/// The 16-byte method mask of an agent registration: bit `m` set for each method `m` the agent
/// is sent unsolicited (umad_register(3)); the array type libibumad takes.
struct umad_method_mask {
    long words[16 / sizeof(long)] = {}; ///< the bits, as libibumad reads them
    /// Sets method `m`'s bit (0 … 127).
    void set(unsigned m) noexcept {
        constexpr unsigned bits = 8 * sizeof(long);
        words[m / bits] = static_cast<long>(static_cast<unsigned long>(words[m / bits]) | (1UL << (m % bits)));
    }
};

} // namespace detail
} // namespace v0
} // namespace rdmacxx
