#pragma once
/// @file
/// `access`: memory-region and QP access rights as a type-safe flag set.

#include "rdmacxx/detail/verbs.hpp"

#include <cstdint>

namespace rdmacxx {
inline namespace v0 {

/// Access rights of a memory region or of a QP's remote side (`enum ibv_access_flags`).
/// Combine with `|`; test with `&`. Remote write and remote atomic need local write, which
/// ibv_reg_mr(3) enforces with EINVAL.
enum class access : std::uint32_t {
    none = 0,                                       ///< no right beyond local read
    local_write = IBV_ACCESS_LOCAL_WRITE,           ///< the HCA may write (receives, READ results)
    remote_write = IBV_ACCESS_REMOTE_WRITE,         ///< peers may RDMA WRITE into it
    remote_read = IBV_ACCESS_REMOTE_READ,           ///< peers may RDMA READ from it
    remote_atomic = IBV_ACCESS_REMOTE_ATOMIC,       ///< peers may run atomics on it
    mw_bind = IBV_ACCESS_MW_BIND,                   ///< memory windows may be bound to it
    zero_based = IBV_ACCESS_ZERO_BASED,             ///< remote addresses start at 0
    on_demand = IBV_ACCESS_ON_DEMAND,               ///< on-demand paging
    relaxed_ordering = IBV_ACCESS_RELAXED_ORDERING, ///< relaxed PCIe ordering allowed
};

/// Union of two access sets.
[[nodiscard]] constexpr access operator|(access a, access b) noexcept {
    return static_cast<access>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
/// Intersection of two access sets.
[[nodiscard]] constexpr access operator&(access a, access b) noexcept {
    return static_cast<access>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
/// Adds rights to `a`.
constexpr access& operator|=(access& a, access b) noexcept { return a = a | b; }
/// True when every right in `wanted` is in `set`.
[[nodiscard]] constexpr bool has(access set, access wanted) noexcept { return (set & wanted) == wanted; }
/// The verbs `int` flag word.
[[nodiscard]] constexpr int to_native(access a) noexcept { return static_cast<int>(a); }
/// Every right a typical one-sided peer needs: local write, remote read, write and atomic.
inline constexpr access all_remote =
    access::local_write | access::remote_write | access::remote_read | access::remote_atomic;

} // namespace v0
} // namespace rdmacxx
