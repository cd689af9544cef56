#pragma once
/// @file
/// What every typed work request is built from: `sg_list` and `gather`, and the bases that hold
/// the scatter-gather entries, `wr_id` and flags (`send_wr_base`), a UD destination
/// (`two_sided_base`), a remote target (`one_sided_base`) and an atomic's operands
/// (`atomic_base`). Each base fills its part of the two encodings an operation has: the
/// `ibv_send_wr` of ibv_post_send(3) and the `ibv_wr_*` calls of ibv_wr_post(3). The operations
/// themselves are in wr.hpp (and memory_window.hpp); see docs/adding-an-operation.md.
/// @see ibv_post_send(3), ibv_wr_post(3)

#include "rdmacxx/detail/quirks.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/transport.hpp"

#include <arpa/inet.h>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>

namespace rdmacxx {
inline namespace v0 {

/// A scatter-gather list of `N` local spans, for a work request that gathers from (or
/// scatters into) several places. Made by `gather(spans…)`. `Writable` is false when one of the
/// spans is a `local_span<T const>` (memory the HCA may only read): such a list serves sends and
/// RDMA WRITEs, and an RDMA READ or a receive into it does not compile.
template <std::size_t N, bool Writable = true>
struct sg_list {
    std::array<ibv_sge, N> entries{}; ///< one entry per span, in order
    std::uint64_t bytes = 0;          ///< total length in bytes
};

/// The scatter-gather list of `spans`, in order; writable when none of them is a span of const.
template <class... T>
[[nodiscard]] constexpr sg_list<sizeof...(T), !(std::is_const_v<T> || ...)> gather(local_span<T>... spans) noexcept {
    return {{spans.sge()...}, (std::uint64_t{0} + ... + spans.size_bytes())};
}

namespace detail {

template <class>
inline constexpr bool dependent_false = false;

template <class>
inline constexpr bool is_local_span = false;
template <class T>
inline constexpr bool is_local_span<local_span<T>> = true;

/// Memory that a work request cannot take because it carries no lkey: a `std::span`, an array,
/// a container — anything contiguous that is not a `local_span`.
template <class M>
concept unregistered_memory =
    std::ranges::contiguous_range<std::remove_cvref_t<M>> && !is_local_span<std::remove_cvref_t<M>>;

/// The one-line explanation for an RDMA READ into a span of const.
#define RDMACXX_READ_INTO_CONST                                                                                        \
    "rdmacxx: an RDMA READ writes into its local span: it needs a local_span<T> of memory registered with "            \
    "local_write, not a local_span<T const>"

/// The one-line explanation for a receive into a span of const.
#define RDMACXX_RECV_INTO_CONST                                                                                        \
    "rdmacxx: a receive writes into its buffer: it needs a local_span<T> of memory registered with local_write, "      \
    "not a local_span<T const>"

/// The one-line explanation for an atomic's result span of const.
#define RDMACXX_ATOMIC_RESULT_CONST                                                                                    \
    "rdmacxx: an atomic writes the old value into its result span: it needs a local_span<std::uint64_t> of memory "    \
    "registered with local_write, not a local_span<std::uint64_t const>"

/// The one-line explanation for `unregistered_memory` passed to a work request.
#define RDMACXX_NEEDS_LOCAL_SPAN                                                                                       \
    "rdmacxx: a work request needs a local_span (registered memory that carries its lkey), not a plain std::span "     \
    "or container: take it from the memory_region, e.g. mr.span() or mr.span_of(std::span{buffer})"

template <std::size_t N>
[[nodiscard]] inline sg_list<N> const& as_sg_list(sg_list<N> const& l) noexcept {
    return l;
}
template <std::size_t N>
[[nodiscard]] inline sg_list<N> as_sg_list(sg_list<N, false> const& l) noexcept {
    return {l.entries, l.bytes};
}
template <class T>
[[nodiscard]] inline sg_list<1> as_sg_list(local_span<T> s) noexcept {
    return {{s.sge()}, s.size_bytes()};
}

[[noreturn]] RDMACXX_COLD inline void throw_remote_too_small(char const* what, std::uint64_t local_bytes,
                                                             std::size_t remote_bytes) {
    throw_argument(std::string{what} + " of " + std::to_string(local_bytes) + " bytes does not fit a remote span of " +
                   std::to_string(remote_bytes) + " bytes");
}

[[noreturn]] RDMACXX_COLD inline void throw_atomic_target(std::uint64_t address, std::size_t local,
                                                          std::size_t remote) {
    if (local == 0 || remote == 0)
        throw_argument("an atomic operation needs one 8-byte element on each side (local " + std::to_string(local) +
                       ", remote " + std::to_string(remote) + ")");
    throw_argument("atomic target address 0x" + hex(address) + " is not 8-byte aligned");
}

/// What every send-queue work request holds: its scatter-gather entries, `wr_id` and flags.
/// Setters return the derived request, so they chain: `send{msg}.id(7).unsignaled()`.
template <class Derived, std::size_t Sges>
class send_wr_base {
public:
    /// Number of scatter-gather entries.
    static constexpr std::size_t sge_count = Sges;
    /// True: it goes to the send queue.
    static constexpr bool is_send_wr = true;

    /// Sets the `wr_id` its completion will carry.
    constexpr Derived& id(std::uint64_t wr_id) noexcept {
        wr_id_ = wr_id;
        return self();
    }
    /// Asks for a completion (the default) or not (IBV_SEND_SIGNALED).
    constexpr Derived& signaled(bool on = true) noexcept { return flag(IBV_SEND_SIGNALED, on); }
    /// Asks for no completion on success; a failure still completes.
    constexpr Derived& unsignaled() noexcept { return flag(IBV_SEND_SIGNALED, false); }
    /// Sets the solicited-event bit (IBV_SEND_SOLICITED): wakes a receiver armed for solicited events.
    constexpr Derived& solicited(bool on = true) noexcept { return flag(IBV_SEND_SOLICITED, on); }
    /// Waits for earlier RDMA READs and atomics to finish first (IBV_SEND_FENCE).
    constexpr Derived& fence(bool on = true) noexcept { return flag(IBV_SEND_FENCE, on); }
    /// Copies the payload into the WQE (IBV_SEND_INLINE): the buffer is free again on return
    /// and needs no lkey. Posting checks the length against the QP's `max_inline_data`.
    constexpr Derived& inlined(bool on = true) noexcept { return flag(IBV_SEND_INLINE, on); }

    /// The `wr_id`.
    [[nodiscard]] constexpr std::uint64_t wr_id() const noexcept { return wr_id_; }
    /// The `ibv_send_flags` word.
    [[nodiscard]] constexpr unsigned flags() const noexcept { return flags_; }
    /// The scatter-gather entries.
    [[nodiscard]] constexpr std::span<ibv_sge const, Sges> sges() const noexcept { return sg_.entries; }
    /// Total local bytes.
    [[nodiscard]] constexpr std::uint64_t bytes() const noexcept { return sg_.bytes; }

protected:
    constexpr explicit send_wr_base(sg_list<Sges> const& sg) noexcept : sg_(sg) {}
    constexpr send_wr_base() noexcept = default; // for the overloads that only explain misuse

    /// Fills the fields every send-queue request has, and those a provider reads whatever the
    /// operation: the immediate data (0 here; the `_imm` requests overwrite it) and the XRC
    /// remote SRQ number. `next` is the caller's.
    void fill_common(ibv_send_wr& wr, ibv_wr_opcode opcode) const noexcept {
        wr.wr_id = wr_id_;
        wr.sg_list = const_cast<ibv_sge*>(sg_.entries.data()); // the provider only reads it
        wr.num_sge = static_cast<int>(Sges);
        wr.opcode = opcode;
        wr.send_flags = flags_;
        detail::quirks::zero_copied_fields(wr); // rxe copies them whatever the opcode: detail/quirks.hpp
    }

    /// Writes the payload with the extended API, after the operation's `ibv_wr_*` call: for one
    /// span the single-entry calls (cheaper, and right on every provider), for several the list
    /// calls, for none (a local operation) nothing.
    void set_payload(ibv_qp_ex* qpx) const noexcept {
        auto const& sges = sg_.entries;
        bool const inlined = (flags_ & IBV_SEND_INLINE) != 0;
        if constexpr (Sges == 1) {
            if (inlined)
                ::ibv_wr_set_inline_data(qpx, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sges[0].addr)),
                                         sges[0].length);
            else
                ::ibv_wr_set_sge(qpx, sges[0].lkey, sges[0].addr, sges[0].length);
        } else if constexpr (Sges > 1) {
            if (inlined) {
                std::array<ibv_data_buf, Sges> bufs;
                for (std::size_t i = 0; i < Sges; ++i)
                    bufs[i] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(sges[i].addr)), sges[i].length};
                ::ibv_wr_set_inline_data_list(qpx, Sges, bufs.data());
            } else {
                ::ibv_wr_set_sge_list(qpx, Sges, sges.data());
            }
        }
    }

private:
    constexpr Derived& self() noexcept { return static_cast<Derived&>(*this); }
    constexpr Derived& flag(unsigned bit, bool on) noexcept {
        flags_ = on ? (flags_ | bit) : (flags_ & ~bit);
        return self();
    }

    sg_list<Sges> sg_;
    std::uint64_t wr_id_ = 0;
    unsigned flags_ = IBV_SEND_SIGNALED;
};

/// The UD destination of a send: address handle, remote QPN and Q_Key.
struct ud_destination {
    ibv_ah* ah = nullptr;
    std::uint32_t remote_qpn = 0;
    std::uint32_t remote_qkey = 0;
};

/// Base of the two-sided sends, which UD may address with `.to(…)`.
template <class Derived, std::size_t Sges>
class two_sided_base : public send_wr_base<Derived, Sges> {
public:
    /// Addresses a UD send: the address handle of the destination port, the remote QPN and the
    /// remote Q_Key. Ignored by connected transports. `ah` is anything with
    /// `ibv_ah* native_handle()` (an `address_handle`) or a raw `ibv_ah*`.
    template <class AddressHandle>
    constexpr Derived& to(AddressHandle const& ah, std::uint32_t remote_qpn, std::uint32_t remote_qkey) noexcept {
        if constexpr (std::is_convertible_v<AddressHandle, ibv_ah*>)
            dest_.ah = ah;
        else
            dest_.ah = ah.native_handle();
        dest_.remote_qpn = remote_qpn;
        dest_.remote_qkey = remote_qkey;
        return static_cast<Derived&>(*this);
    }
    /// The UD destination (null `ah` when not addressed).
    [[nodiscard]] constexpr ud_destination const& destination() const noexcept { return dest_; }

protected:
    using send_wr_base<Derived, Sges>::send_wr_base;
    // The destination: on UD the address handle, remote QPN and Q_Key; on a connected transport
    // the same 16 bytes zeroed.
    template <class Transport>
    void fill_destination(ibv_send_wr& wr) const noexcept {
        if constexpr (Transport::qp_type == IBV_QPT_UD) {
            wr.wr.ud.ah = dest_.ah;
            wr.wr.ud.remote_qpn = dest_.remote_qpn;
            wr.wr.ud.remote_qkey = dest_.remote_qkey;
        } else {
            detail::quirks::zero_remote_address(wr); // rxe reads them whatever the opcode: detail/quirks.hpp
        }
    }

    // The extended API's counterpart: the UD address after the operation's ibv_wr_* call; nothing
    // on a connected transport.
    template <class Transport>
    void set_destination(ibv_qp_ex* qpx) const noexcept {
        if constexpr (Transport::qp_type == IBV_QPT_UD)
            ::ibv_wr_set_ud_addr(qpx, dest_.ah, dest_.remote_qpn, dest_.remote_qkey);
    }

private:
    ud_destination dest_;
};

/// Base of the one-sided operations: a remote target checked against the local length.
template <class Derived, std::size_t Sges>
class one_sided_base : public send_wr_base<Derived, Sges> {
public:
    /// The remote address.
    [[nodiscard]] constexpr std::uint64_t remote_address() const noexcept { return remote_addr_; }
    /// The remote key.
    [[nodiscard]] constexpr std::uint32_t rkey() const noexcept { return rkey_; }

protected:
    constexpr one_sided_base() noexcept = default; // for the overloads that explain misuse
    template <class U>
    one_sided_base(sg_list<Sges> const& local, remote_span<U> remote, char const* what)
        : send_wr_base<Derived, Sges>(local), remote_addr_(remote.address()), rkey_(remote.rkey()) {
        if (local.bytes > remote.size_bytes()) [[unlikely]]
            throw_remote_too_small(what, local.bytes, remote.size_bytes());
    }
    void fill_rdma(ibv_send_wr& wr) const noexcept {
        wr.wr.rdma.remote_addr = remote_addr_;
        wr.wr.rdma.rkey = rkey_;
    }

private:
    std::uint64_t remote_addr_ = 0;
    std::uint32_t rkey_ = 0;
};

/// Base of the 64-bit atomics: one 8-byte local result, one 8-byte-aligned remote target.
template <class Derived>
class atomic_base : public send_wr_base<Derived, 1> {
public:
    [[nodiscard]] constexpr std::uint64_t remote_address() const noexcept { return remote_addr_; }
    [[nodiscard]] constexpr std::uint32_t rkey() const noexcept { return rkey_; }

protected:
    constexpr atomic_base() noexcept = default; // for the overloads that explain misuse
    atomic_base(local_span<std::uint64_t> result, remote_span<std::uint64_t> target)
        : send_wr_base<Derived, 1>(
              sg_list<1>{{ibv_sge{reinterpret_cast<std::uintptr_t>(result.data()), 8, result.lkey()}}, 8}),
          remote_addr_(target.address()), rkey_(target.rkey()) {
        // The entry is always 8 bytes (an empty result throws here, before it is used); the three
        // conditions are tested with one branch.
        if ((static_cast<unsigned>(result.empty()) | static_cast<unsigned>(target.empty()) |
             static_cast<unsigned>(target.address() % 8)) != 0) [[unlikely]]
            throw_atomic_target(target.address(), result.size(), target.size());
    }
    void fill_atomic(ibv_send_wr& wr, std::uint64_t compare_add, std::uint64_t swap) const noexcept {
        wr.wr.atomic.remote_addr = remote_addr_;
        wr.wr.atomic.rkey = rkey_;
        wr.wr.atomic.compare_add = compare_add;
        wr.wr.atomic.swap = swap;
    }

private:
    std::uint64_t remote_addr_ = 0;
    std::uint32_t rkey_ = 0;
};
} // namespace detail
} // namespace v0
} // namespace rdmacxx
