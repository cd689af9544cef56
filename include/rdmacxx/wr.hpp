#pragma once
/// @file
/// Typed work requests: `send`, `send_imm`, `write`, `write_imm`, `read`, `compare_swap`,
/// `fetch_add` for the send queue and `recv` for the receive queue. Each is a small value that
/// builds exactly the `ibv_send_wr` / `ibv_recv_wr` a careful C programmer would write; which
/// transport may post which is decided at compile time (`postable_on`).
/// @see ibv_post_send(3), ibv_post_recv(3)

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
    /// remote SRQ number (rxe copies both into its WQE for every opcode). `next` is the caller's.
    void fill_common(ibv_send_wr& wr, ibv_wr_opcode opcode) const noexcept {
        wr.wr_id = wr_id_;
        wr.sg_list = const_cast<ibv_sge*>(sg_.entries.data()); // the provider only reads it
        wr.num_sge = static_cast<int>(Sges);
        wr.opcode = opcode;
        wr.send_flags = flags_;
        wr.imm_data = 0;
        wr.qp_type.xrc.remote_srqn = 0;
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
    // the same 16 bytes zeroed, since rxe reads `wr.rdma.remote_addr` (which overlays `wr.ud.ah`)
    // into its WQE for every opcode.
    template <class Transport>
    void fill_destination(ibv_send_wr& wr) const noexcept {
        if constexpr (Transport::qp_type == IBV_QPT_UD) {
            wr.wr.ud.ah = dest_.ah;
            wr.wr.ud.remote_qpn = dest_.remote_qpn;
            wr.wr.ud.remote_qkey = dest_.remote_qkey;
        } else {
            wr.wr.rdma.remote_addr = 0;
            wr.wr.rdma.rkey = 0;
        }
    }

private:
    ud_destination dest_;
};

} // namespace detail

/// SEND: the payload lands in the receive buffer the peer posted. Legal on RC, UC, UD (UD:
/// addressed with `.to(ah, qpn, qkey)`, at most one path MTU).
template <std::size_t Sges = 1>
class send : public detail::two_sided_base<send<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_SEND;
    static constexpr char const* name = "SEND";
    /// A send of one span.
    template <class T>
    constexpr explicit send(local_span<T> payload) noexcept requires(Sges == 1)
        : detail::two_sided_base<send, Sges>(detail::as_sg_list(payload)) {}
    /// A send gathered from several spans.
    template <bool W>
    constexpr explicit send(sg_list<Sges, W> const& payload) noexcept
        : detail::two_sided_base<send, Sges>(detail::as_sg_list(payload)) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    explicit send(M const&) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// Fills `wr` for transport `Transport`: every field a provider reads for this operation
    /// (`wr_id`, `sg_list`, `num_sge`, `opcode`, `send_flags`, `imm_data`, the `wr` union's
    /// members of the operation, `qp_type`), not `next` (the caller's) and not the memory-window
    /// and TSO members no request of this library uses. `wr` need not be zeroed first.
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->template fill_destination<Transport>(wr);
    }
};
template <class T>
send(local_span<T>) -> send<1>;
template <std::size_t N, bool W>
send(sg_list<N, W>) -> send<N>;
template <detail::unregistered_memory M>
send(M const&) -> send<1>;

/// SEND with 32-bit immediate data, delivered in the receiver's completion (host order on both
/// sides). Legal on RC, UC, UD.
template <std::size_t Sges = 1>
class send_imm : public detail::two_sided_base<send_imm<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_SEND_WITH_IMM;
    static constexpr char const* name = "SEND with immediate";
    /// A send of one span with immediate data `imm` (host order).
    template <class T>
    constexpr send_imm(local_span<T> payload, std::uint32_t imm) noexcept requires(Sges == 1)
        : detail::two_sided_base<send_imm, Sges>(detail::as_sg_list(payload)), imm_(imm) {}
    /// A gathered send with immediate data `imm` (host order).
    template <bool W>
    constexpr send_imm(sg_list<Sges, W> const& payload, std::uint32_t imm) noexcept
        : detail::two_sided_base<send_imm, Sges>(detail::as_sg_list(payload)), imm_(imm) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    send_imm(M const&, std::uint32_t) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The immediate data, host order.
    [[nodiscard]] constexpr std::uint32_t imm() const noexcept { return imm_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        wr.imm_data = htonl(imm_);
        this->template fill_destination<Transport>(wr);
    }

private:
    std::uint32_t imm_ = 0;
};
template <class T>
send_imm(local_span<T>, std::uint32_t) -> send_imm<1>;
template <std::size_t N, bool W>
send_imm(sg_list<N, W>, std::uint32_t) -> send_imm<N>;
template <detail::unregistered_memory M>
send_imm(M const&, std::uint32_t) -> send_imm<1>;

namespace detail {
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
} // namespace detail

/// RDMA WRITE: copies local memory into the peer's registered memory, with no receive consumed.
/// Legal on RC and UC.
template <std::size_t Sges = 1>
class write : public detail::one_sided_base<write<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
    static constexpr char const* name = "RDMA WRITE";
    static constexpr bool needs_write = true;
    /// Writes `source` to the start of `target`.
    /// @throws argument_error when `source` is longer than `target`.
    template <class T, class U>
    write(local_span<T> source, remote_span<U> target) requires(Sges == 1)
        : detail::one_sided_base<write, Sges>(detail::as_sg_list(source), target, name) {}
    /// Writes the gathered `source` to the start of `target`.
    /// @throws argument_error when `source` is longer than `target`.
    template <bool W, class U>
    write(sg_list<Sges, W> const& source, remote_span<U> target)
        : detail::one_sided_base<write, Sges>(detail::as_sg_list(source), target, name) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M, class U>
    write(M const&, remote_span<U>) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->fill_rdma(wr);
    }
};
template <class T, class U>
write(local_span<T>, remote_span<U>) -> write<1>;
template <std::size_t N, bool W, class U>
write(sg_list<N, W>, remote_span<U>) -> write<N>;
template <detail::unregistered_memory M, class U>
write(M const&, remote_span<U>) -> write<1>;

/// RDMA WRITE with immediate: a write that also consumes a receive at the peer and completes
/// there with the immediate data (host order). Legal on RC and UC.
template <std::size_t Sges = 1>
class write_imm : public detail::one_sided_base<write_imm<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    static constexpr char const* name = "RDMA WRITE with immediate";
    static constexpr bool needs_write = true;
    /// @throws argument_error when `source` is longer than `target`.
    template <class T, class U>
    write_imm(local_span<T> source, remote_span<U> target, std::uint32_t imm) requires(Sges == 1)
        : detail::one_sided_base<write_imm, Sges>(detail::as_sg_list(source), target, name), imm_(imm) {}
    /// @throws argument_error when `source` is longer than `target`.
    template <bool W, class U>
    write_imm(sg_list<Sges, W> const& source, remote_span<U> target, std::uint32_t imm)
        : detail::one_sided_base<write_imm, Sges>(detail::as_sg_list(source), target, name), imm_(imm) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M, class U>
    write_imm(M const&, remote_span<U>, std::uint32_t) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The immediate data, host order.
    [[nodiscard]] constexpr std::uint32_t imm() const noexcept { return imm_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->fill_rdma(wr);
        wr.imm_data = htonl(imm_);
    }

private:
    std::uint32_t imm_ = 0;
};
template <class T, class U>
write_imm(local_span<T>, remote_span<U>, std::uint32_t) -> write_imm<1>;
template <std::size_t N, bool W, class U>
write_imm(sg_list<N, W>, remote_span<U>, std::uint32_t) -> write_imm<N>;
template <detail::unregistered_memory M, class U>
write_imm(M const&, remote_span<U>, std::uint32_t) -> write_imm<1>;

/// RDMA READ: copies the peer's registered memory into local memory (which needs local write
/// access). Legal on RC only.
template <std::size_t Sges = 1>
class read : public detail::one_sided_base<read<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_RDMA_READ;
    static constexpr char const* name = "RDMA READ";
    static constexpr bool needs_read = true;
    /// Reads the start of `source` into `destination`, which must be writable: a
    /// `local_span<T const>` does not compile.
    /// @throws argument_error when `destination` is longer than `source`.
    template <class T, class U>
    read(local_span<T> destination, remote_span<U> source) requires(Sges == 1)
        : detail::one_sided_base<read, Sges>(detail::as_sg_list(destination), source, name) {
        static_assert(!std::is_const_v<T>, RDMACXX_READ_INTO_CONST);
    }
    /// Reads the start of `source`, scattered into `destination`.
    /// @throws argument_error when `destination` is longer than `source`.
    template <class U>
    read(sg_list<Sges> const& destination, remote_span<U> source)
        : detail::one_sided_base<read, Sges>(destination, source, name) {}
    /// A gathered list with a span of const: does not compile, with the reason.
    template <class U>
    read(sg_list<Sges, false> const& destination, remote_span<U> source)
        : detail::one_sided_base<read, Sges>(detail::as_sg_list(destination), source, name) {
        static_assert(detail::dependent_false<U>, RDMACXX_READ_INTO_CONST);
    }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M, class U>
    read(M const&, remote_span<U>) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->fill_rdma(wr);
    }
};
template <class T, class U>
read(local_span<T>, remote_span<U>) -> read<1>;
template <std::size_t N, bool W, class U>
read(sg_list<N, W>, remote_span<U>) -> read<N>;
template <detail::unregistered_memory M, class U>
read(M const&, remote_span<U>) -> read<1>;

namespace detail {
/// Base of the 64-bit atomics: one 8-byte local result, one 8-byte-aligned remote target.
template <class Derived>
class atomic_base : public send_wr_base<Derived, 1> {
public:
    static constexpr bool needs_atomic = true;
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

/// 64-bit atomic compare-and-swap on the peer: if `*target == compare` then `*target = swap`;
/// the old value lands in `result[0]`. Legal on RC only.
class compare_swap : public detail::atomic_base<compare_swap> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    static constexpr char const* name = "atomic compare-and-swap";
    /// @throws argument_error when either span is empty or `target` is not 8-byte aligned.
    compare_swap(local_span<std::uint64_t> result, remote_span<std::uint64_t> target, std::uint64_t compare,
                 std::uint64_t swap)
        : atomic_base(result, target), compare_(compare), swap_(swap) {}
    /// A result span of const: does not compile, with the reason.
    template <class T>
        requires std::is_const_v<T> compare_swap(local_span<T>, remote_span<std::uint64_t>, std::uint64_t,
                                                 std::uint64_t) {
            static_assert(detail::dependent_false<T>, RDMACXX_ATOMIC_RESULT_CONST);
        }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    compare_swap(M const&, remote_span<std::uint64_t>, std::uint64_t, std::uint64_t) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The value the target is compared with.
    [[nodiscard]] constexpr std::uint64_t compare() const noexcept { return compare_; }
    /// The value stored when the comparison holds.
    [[nodiscard]] constexpr std::uint64_t swap() const noexcept { return swap_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        fill_common(wr, opcode);
        fill_atomic(wr, compare_, swap_);
    }

private:
    std::uint64_t compare_ = 0;
    std::uint64_t swap_ = 0;
};

/// 64-bit atomic fetch-and-add on the peer: `*target += add`; the old value lands in
/// `result[0]`. Legal on RC only.
class fetch_add : public detail::atomic_base<fetch_add> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    static constexpr char const* name = "atomic fetch-and-add";
    /// @throws argument_error when either span is empty or `target` is not 8-byte aligned.
    fetch_add(local_span<std::uint64_t> result, remote_span<std::uint64_t> target, std::uint64_t add)
        : atomic_base(result, target), add_(add) {}
    /// A result span of const: does not compile, with the reason.
    template <class T>
        requires std::is_const_v<T> fetch_add(local_span<T>, remote_span<std::uint64_t>, std::uint64_t) {
            static_assert(detail::dependent_false<T>, RDMACXX_ATOMIC_RESULT_CONST);
        }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    fetch_add(M const&, remote_span<std::uint64_t>, std::uint64_t) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The value added to the target.
    [[nodiscard]] constexpr std::uint64_t add() const noexcept { return add_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        fill_common(wr, opcode);
        fill_atomic(wr, add_, 0);
    }

private:
    std::uint64_t add_ = 0;
};

/// RECV: a receive buffer for one incoming SEND or WRITE with immediate. On UD the first 40
/// bytes receive the GRH.
template <std::size_t Sges = 1>
class recv {
public:
    static constexpr std::size_t sge_count = Sges;
    static constexpr bool is_send_wr = false;
    /// A receive into one span, which must be writable: a `local_span<T const>` does not compile.
    template <class T>
    constexpr explicit recv(local_span<T> buffer) noexcept requires(Sges == 1) : sg_(detail::as_sg_list(buffer)) {
        static_assert(!std::is_const_v<T>, RDMACXX_RECV_INTO_CONST);
    }
    /// A receive scattered into several spans.
    constexpr explicit recv(sg_list<Sges> const& buffer) noexcept : sg_(buffer) {}
    /// A gathered list with a span of const: does not compile, with the reason.
    template <bool W>
        requires(!W)
    explicit recv(sg_list<Sges, W> const& buffer) : sg_(detail::as_sg_list(buffer)) {
        static_assert(W, RDMACXX_RECV_INTO_CONST);
    }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    explicit recv(M const&) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// Sets the `wr_id` its completion will carry.
    constexpr recv& id(std::uint64_t wr_id) noexcept {
        wr_id_ = wr_id;
        return *this;
    }
    [[nodiscard]] constexpr std::uint64_t wr_id() const noexcept { return wr_id_; }
    [[nodiscard]] constexpr std::span<ibv_sge const, Sges> sges() const noexcept { return sg_.entries; }
    [[nodiscard]] constexpr std::uint64_t bytes() const noexcept { return sg_.bytes; }
    /// Fills `wr`'s `wr_id`, `sg_list` and `num_sge` (every field but `next`, the caller's);
    /// `wr` need not be zeroed first.
    void build(ibv_recv_wr& wr) const noexcept {
        wr.wr_id = wr_id_;
        wr.sg_list = const_cast<ibv_sge*>(sg_.entries.data()); // the provider only reads it
        wr.num_sge = static_cast<int>(Sges);
    }

private:
    sg_list<Sges> sg_;
    std::uint64_t wr_id_ = 0;
};
template <class T>
recv(local_span<T>) -> recv<1>;
template <std::size_t N, bool W>
recv(sg_list<N, W>) -> recv<N>;
template <detail::unregistered_memory M>
recv(M const&) -> recv<1>;

/// A send-queue work request type.
template <class W>
concept send_work_request = W::is_send_wr && requires(W const& w, ibv_send_wr& raw) {
    { W::opcode } -> std::convertible_to<ibv_wr_opcode>;
    w.template build<rc>(raw);
};

/// A receive work request type.
template <class W>
concept recv_work_request = (!W::is_send_wr) && requires(W const& w, ibv_recv_wr& raw) {
    w.build(raw);
};

namespace detail {
template <class W>
concept needs_write_ = requires {
    requires W::needs_write;
};
template <class W>
concept needs_read_ = requires {
    requires W::needs_read;
};
template <class W>
concept needs_atomic_ = requires {
    requires W::needs_atomic;
};
} // namespace detail

/// True when transport `Transport` can carry work request `W`: RC everything; UC sends and
/// writes; UD sends only.
template <class W, class Transport>
concept postable_on = send_work_request<W> && transport<Transport> &&
                      (!detail::needs_write_<W> || Transport::allows_write) &&
                      (!detail::needs_read_<W> || Transport::allows_read) &&
                      (!detail::needs_atomic_<W> || Transport::allows_atomic);

} // namespace v0
} // namespace rdmacxx
