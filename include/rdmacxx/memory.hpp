#pragma once
/// @file
/// Registered memory: `memory_region`, and the typed spans that carry its keys —
/// `local_span<T>` (address, length, lkey) and `remote_span<T>` (address, length, rkey).

#include "rdmacxx/access.hpp"
#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/detail/wire.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/in_flight.hpp"
#include "rdmacxx/pd.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

namespace detail {
[[noreturn]] RDMACXX_COLD inline void throw_out_of_span(char const* kind, std::size_t offset, std::size_t count,
                                                        std::size_t size) {
    throw_argument(std::string{kind} + ": elements [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                   std::to_string(count) + ") are outside a span of " + std::to_string(size) + " elements");
}

inline constexpr std::size_t max_message_bytes = std::numeric_limits<std::uint32_t>::max();
} // namespace detail

/// Registered local memory as a typed span that carries the region's lkey: what a work request
/// points at. Made only by a `memory_region` (so it always lies inside one) and by narrowing
/// another `local_span`; at most 2^32 - 1 bytes, the most one scatter-gather entry can describe.
///
/// Const-correct for the HCA: a `local_span<T>` is memory the HCA may write (its region has
/// `access::local_write`), what an RDMA READ, a receive or an atomic result needs; a
/// `local_span<T const>` is memory the HCA only reads, for sends and RDMA WRITEs. A region
/// registered without local_write hands out only spans of const (see `memory_region::span`),
/// and a READ, receive or atomic into a span of const does not compile: nothing is checked when
/// posting.
/// Trivially copyable, 24 bytes; narrowing is checked, reading is free.
/// Thread-safety: a value type.
template <class T>
class local_span {
public:
    using element_type = T;
    using size_type = std::size_t;

    /// The empty span (no memory, lkey 0).
    constexpr local_span() noexcept = default;

    /// A `local_span<T>` converts to a `local_span<T const>`.
    template <class U>
        requires(std::is_same_v<T, U const>)
    constexpr local_span(local_span<U> other) noexcept // NOLINT(google-explicit-constructor)
        : data_(other.data()), size_(other.size()), lkey_(other.lkey()) {}

    /// First element.
    [[nodiscard]] constexpr T* data() const noexcept { return data_; }
    /// Number of elements.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
    /// Length in bytes.
    [[nodiscard]] constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
    /// True when it holds no element.
    [[nodiscard]] constexpr bool empty() const noexcept { return size_ == 0; }
    /// The lkey of the region it lies in.
    [[nodiscard]] constexpr std::uint32_t lkey() const noexcept { return lkey_; }
    /// Element `i` (unchecked).
    [[nodiscard]] constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
    [[nodiscard]] constexpr T* begin() const noexcept { return data_; }
    [[nodiscard]] constexpr T* end() const noexcept { return data_ + size_; }
    /// The plain `std::span` over the same elements.
    [[nodiscard]] constexpr std::span<T> span() const noexcept { return {data_, size_}; }

    /// The first `count` elements. @throws argument_error when count > size().
    [[nodiscard]] constexpr local_span first(std::size_t count) const {
        if (count > size_) [[unlikely]]
            detail::throw_out_of_span("local_span::first", 0, count, size_);
        return {data_, count, lkey_};
    }
    /// The last `count` elements. @throws argument_error when count > size().
    [[nodiscard]] constexpr local_span last(std::size_t count) const {
        if (count > size_) [[unlikely]]
            detail::throw_out_of_span("local_span::last", size_ - count, count, size_);
        return {data_ + (size_ - count), count, lkey_};
    }
    /// `count` elements from `offset` (to the end when count is npos).
    /// @throws argument_error when the range leaves the span.
    [[nodiscard]] constexpr local_span subspan(std::size_t offset, std::size_t count = npos) const {
        if (offset > size_) [[unlikely]]
            detail::throw_out_of_span("local_span::subspan", offset, 0, size_);
        if (count == npos) count = size_ - offset;
        if (count > size_ - offset) [[unlikely]]
            detail::throw_out_of_span("local_span::subspan", offset, count, size_);
        return {data_ + offset, count, lkey_};
    }

    /// The same memory viewed as bytes.
    [[nodiscard]] local_span<std::conditional_t<std::is_const_v<T>, std::byte const, std::byte>>
    as_bytes() const noexcept {
        using B = std::conditional_t<std::is_const_v<T>, std::byte const, std::byte>;
        return local_span<B>{reinterpret_cast<B*>(data_), size_bytes(), lkey_};
    }

    /// A span over memory the caller registered by other means (an `ibv_mr` of its own, or a
    /// region of another library), with that registration's lkey. Nothing is checked: the caller
    /// vouches that [data, data + count) lies in the region of `lkey` and is at most 2^32 - 1 bytes.
    [[nodiscard]] static constexpr local_span assume_registered(T* data, std::size_t count,
                                                                std::uint32_t lkey) noexcept {
        return {data, count, lkey};
    }

    /// The scatter-gather entry describing it. @see ibv_post_send(3)
    [[nodiscard]] ibv_sge sge() const noexcept {
        return {reinterpret_cast<std::uintptr_t>(data_), static_cast<std::uint32_t>(size_bytes()), lkey_};
    }

    /// "Up to the end" for `subspan`.
    static constexpr std::size_t npos = static_cast<std::size_t>(-1);

private:
    template <class>
    friend class local_span;
    friend class memory_region;
    constexpr local_span(T* data, std::size_t size, std::uint32_t lkey) noexcept
        : data_(data), size_(size), lkey_(lkey) {}

    T* data_ = nullptr;
    std::size_t size_ = 0;
    std::uint32_t lkey_ = 0;
};

/// Remote registered memory: a peer's virtual address, element count and rkey — what an RDMA
/// WRITE, READ or atomic targets. A plain value (trivially copyable, standard layout, 24 bytes);
/// to send it to a peer, `to_bytes()` gives its portable encoding and `from_bytes()` reads it
/// back on the other side. Narrowing is checked against its own length; whether it really
/// lies in the peer's region only the peer's HCA can tell (IBV_WC_REM_ACCESS_ERR).
template <class T>
class remote_span {
public:
    using element_type = T;

    /// The empty span.
    constexpr remote_span() noexcept = default;
    /// The span of `count` elements at the peer's virtual `address` under `rkey`.
    constexpr remote_span(std::uint64_t address, std::size_t count, std::uint32_t rkey) noexcept
        : address_(address), size_(count), rkey_(rkey) {}

    /// The peer's virtual address of the first element.
    [[nodiscard]] constexpr std::uint64_t address() const noexcept { return address_; }
    /// Number of elements.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
    /// Length in bytes.
    [[nodiscard]] constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
    /// The rkey of the peer's region.
    [[nodiscard]] constexpr std::uint32_t rkey() const noexcept { return rkey_; }
    /// True when it holds no element.
    [[nodiscard]] constexpr bool empty() const noexcept { return size_ == 0; }

    /// The first `count` elements. @throws argument_error when count > size().
    [[nodiscard]] constexpr remote_span first(std::size_t count) const {
        if (count > size_) [[unlikely]]
            detail::throw_out_of_span("remote_span::first", 0, count, size_);
        return {address_, count, rkey_};
    }
    /// The last `count` elements. @throws argument_error when count > size().
    [[nodiscard]] constexpr remote_span last(std::size_t count) const {
        if (count > size_) [[unlikely]]
            detail::throw_out_of_span("remote_span::last", size_ - count, count, size_);
        return {address_ + (size_ - count) * sizeof(T), count, rkey_};
    }
    /// `count` elements from `offset` (to the end when count is npos).
    /// @throws argument_error when the range leaves the span.
    [[nodiscard]] constexpr remote_span subspan(std::size_t offset, std::size_t count = npos) const {
        if (offset > size_) [[unlikely]]
            detail::throw_out_of_span("remote_span::subspan", offset, 0, size_);
        if (count == npos) count = size_ - offset;
        if (count > size_ - offset) [[unlikely]]
            detail::throw_out_of_span("remote_span::subspan", offset, count, size_);
        return {address_ + offset * sizeof(T), count, rkey_};
    }

    /// The same remote bytes as elements of `U`: e.g. the `remote_span<std::byte>` a peer exposed
    /// viewed as `remote_span<std::uint64_t>` for an atomic. Checked, as a cast cannot be: the
    /// length must be a whole number of `U`s and the address aligned for `U` (8 bytes for a
    /// 64-bit atomic target, as the verbs require).
    /// @throws argument_error naming the length or the address when either does not fit `U`.
    template <class U>
        requires std::is_trivially_copyable_v<U>
    [[nodiscard]] constexpr remote_span<U> as() const {
        if (size_bytes() % sizeof(U) != 0) [[unlikely]]
            detail::throw_argument("remote_span::as: " + std::to_string(size_bytes()) +
                                   " bytes are not a whole number of " + std::to_string(sizeof(U)) + "-byte elements");
        if (address_ % alignof(U) != 0) [[unlikely]]
            detail::throw_argument("remote_span::as: the remote address " + std::to_string(address_) +
                                   " is not aligned to " + std::to_string(alignof(U)) + " bytes");
        return {address_, size_bytes() / sizeof(U), rkey_};
    }

    /// "Up to the end" for `subspan`.
    static constexpr std::size_t npos = static_cast<std::size_t>(-1);

    friend constexpr bool operator==(remote_span const&, remote_span const&) noexcept = default;

    /// Bytes of the wire encoding.
    static constexpr std::size_t wire_size = 32;

    /// The portable encoding to send to a peer (`wire_size` bytes, integers big-endian):
    ///
    /// | offset | bytes | field |
    /// |---|---|---|
    /// | 0 | 4 | magic `"RXRS"` |
    /// | 4 | 1 | version, 1 |
    /// | 5 | 3 | reserved, 0 |
    /// | 8 | 8 | address |
    /// | 16 | 8 | element count |
    /// | 24 | 4 | rkey |
    /// | 28 | 4 | element size, `sizeof(T)` |
    [[nodiscard]] constexpr std::array<std::byte, wire_size> to_bytes() const noexcept {
        std::array<std::byte, wire_size> out{};
        detail::wire::put_header(out.data(), wire_magic);
        detail::wire::put<8>(out.data() + 8, address_);
        detail::wire::put<8>(out.data() + 16, size_);
        detail::wire::put<4>(out.data() + 24, rkey_);
        detail::wire::put<4>(out.data() + 28, sizeof(T));
        return out;
    }

    /// Decodes the first `wire_size` bytes of `bytes` (a longer buffer, such as the padded
    /// private data of a CM event, is fine).
    /// @throws argument_error naming what is wrong: too short, a wrong magic (not a remote span),
    ///         another version, reserved bits set, an element size other than `sizeof(T)`, a
    ///         byte length that overflows.
    [[nodiscard]] static remote_span from_bytes(std::span<std::byte const> bytes) {
        if (std::string why = detail::wire::header_fault(bytes, wire_size, wire_magic, "a remote_span"); !why.empty())
            [[unlikely]]
            detail::throw_argument(std::move(why));
        std::byte const* in = bytes.data();
        if (detail::wire::get<3>(in + 5) != 0) [[unlikely]]
            detail::throw_argument(detail::wire::reserved_fault("a remote_span", "the header"));
        if (auto const esize = detail::wire::get<4>(in + 28); esize != sizeof(T)) [[unlikely]]
            detail::throw_argument("cannot decode a remote_span: it holds elements of " + std::to_string(esize) +
                                   " bytes, this one's are " + std::to_string(sizeof(T)));
        auto const count = detail::wire::get<8>(in + 16);
        constexpr std::uint64_t max_count = std::min<std::uint64_t>(
            std::numeric_limits<std::uint64_t>::max() / sizeof(T), std::numeric_limits<std::size_t>::max());
        if (count > max_count) [[unlikely]]
            detail::throw_argument("cannot decode a remote_span: corrupt, its " + std::to_string(count) +
                                   " elements overflow a byte length");
        return {detail::wire::get<8>(in + 8), static_cast<std::size_t>(count),
                static_cast<std::uint32_t>(detail::wire::get<4>(in + 24))};
    }

private:
    static constexpr std::array<char, 4> wire_magic{'R', 'X', 'R', 'S'};

    std::uint64_t address_ = 0;
    std::size_t size_ = 0;
    std::uint32_t rkey_ = 0;
};

/// What `memory_region::advise` asks the device to prefetch for (`enum ibv_advise_mr_advice`).
enum class prefetch : std::uint32_t {
    read = IBV_ADVISE_MR_ADVICE_PREFETCH,              ///< pages the device will read
    write = IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,       ///< pages the device will write
    no_fault = IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, ///< map only pages already present
};

/// Whether `memory_region::advise` waits for the prefetch (`IBV_ADVISE_MR_FLAG_FLUSH`).
enum class advise_flush : bool {
    no,  ///< return when the advice is accepted
    yes, ///< return when the pages are mapped
};

/// A registered memory region (`ibv_mr`). Owns the registration (not the memory); move-only;
/// deregisters on destruction. The memory and the protection domain must outlive it.
///
/// With `checked` queue pairs (see checked.hpp) the requests in flight that use the region are
/// counted: `in_flight()` reads the count, `deregister()` refuses while it is not 0, and the
/// destructor reports an `in_flight_error` to the handler (`set_in_flight_handler`) before it
/// deregisters anyway.
///
/// A region registered from a dma-buf (`protection_domain::register_dmabuf`) holds no CPU
/// memory: its `address()` and the addresses of its spans are the I/O virtual address given at
/// registration, for work requests and peers, never to dereference.
/// Thread-safety: the accessors only read.
/// @see ibv_reg_mr(3), ibv_reg_dmabuf_mr(3)
class memory_region {
public:
    /// Registers `length` bytes at `address` in `pd` with `rights`.
    /// @throws not_supported_error naming ibv_reg_mr and the device when `rights` has
    ///         `access::on_demand` and the device has no on-demand paging, or when the verb
    ///         reports EOPNOTSUPP; sys_error when ibv_reg_mr(3) fails otherwise (EINVAL for
    ///         remote write or atomic without local write, ENOMEM past RLIMIT_MEMLOCK, EFAULT for
    ///         unmapped memory).
    memory_region(protection_domain& pd, void* address, std::size_t length, access rights)
        : handle_((::ibv_reg_mr)(pd.native_handle(), address, length, to_native(rights))), rights_(rights) {
        if (!handle_) [[unlikely]]
            refuse_registration(errno, pd, length, rights);
    }

    /// Deregisters now, leaving the object empty (as a moved-from one).
    /// @throws in_flight_error when requests of `checked` QPs that use the region are in flight:
    ///         the region then stays registered; sys_error when ibv_dereg_mr(3) fails.
    /// @see ibv_dereg_mr(3)
    void deregister() {
        if (!handle_) return;
        if (std::uint64_t const n = in_flight(); n != 0) [[unlikely]]
            throw in_flight_error(in_flight_message(handle_.get(), n, "cannot be deregistered"), n, 0);
        if (int rc = ::ibv_dereg_mr(handle_.get()); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_dereg_mr", "with lkey 0x" + to_hex(lkey()));
        (void)handle_.release();
    }

    /// Requests posted through `checked` QPs, of either queue, that use this region (by its lkey)
    /// and have not completed; always 0 without checked QPs. Thread-safety: any thread.
    [[nodiscard]] std::uint64_t in_flight() const noexcept { return handle_ ? in_flight(handle_.get()) : 0; }

    /// The whole region as a span of `T`. `T` must be const (`span<std::byte const>()`) when
    /// the region was registered without `access::local_write`: the HCA may not write it.
    /// @throws argument_error when `T` is not const and the region has no local write right,
    ///         when the region's start is not aligned for `T`, or when the region is longer than
    ///         one scatter-gather entry can describe (2^32 - 1 bytes; use the overload with offset
    ///         and count).
    template <class T = std::byte>
    [[nodiscard]] local_span<T> span() const {
        return span<T>(0, length() / sizeof(T));
    }

    /// `count` elements of `T` from element `offset` of the region.
    /// @throws argument_error when `T` is not const and the region has no local write right,
    ///         when the range leaves the region, is misaligned for `T`, or is longer than 2^32 - 1
    ///         bytes.
    template <class T = std::byte>
    [[nodiscard]] local_span<T> span(std::size_t offset, std::size_t count) const {
        if constexpr (!std::is_const_v<T>) check_writable();
        auto const base = reinterpret_cast<std::uintptr_t>(handle_->addr);
        if (base % alignof(T) != 0) [[unlikely]]
            detail::throw_argument("memory region at 0x" + to_hex(base) + " is not aligned for an element of " +
                                   std::to_string(alignof(T)) + " bytes");
        std::size_t const elements = length() / sizeof(T);
        if (offset > elements || count > elements - offset) [[unlikely]]
            detail::throw_argument("elements [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                                   std::to_string(count) + ") are outside a memory region of " +
                                   std::to_string(elements) + " elements of " + std::to_string(sizeof(T)) + " bytes");
        check_message_length(count * sizeof(T));
        return {static_cast<T*>(handle_->addr) + offset, count, handle_->lkey};
    }

    /// The registered span for `memory`, which must lie inside this region; a span of const
    /// (`std::span<T const>`) when the region was registered without `access::local_write`.
    /// @throws argument_error when it does not lie inside (quoting both ranges), when it is
    ///         longer than 2^32 - 1 bytes, or when `T` is not const and the region has no local
    ///         write right.
    template <class T>
    [[nodiscard]] local_span<T> span_of(std::span<T> memory) const {
        if constexpr (!std::is_const_v<T>) check_writable();
        auto const lo = reinterpret_cast<std::uintptr_t>(memory.data());
        auto const base = reinterpret_cast<std::uintptr_t>(handle_->addr);
        if (lo < base || memory.size_bytes() > length() || lo - base > length() - memory.size_bytes()) [[unlikely]]
            detail::throw_argument("span [0x" + to_hex(lo) + ", +" + std::to_string(memory.size_bytes()) +
                                   " bytes) is outside memory region [0x" + to_hex(base) + ", +" +
                                   std::to_string(length()) + " bytes) with lkey 0x" + to_hex(lkey()));
        check_message_length(memory.size_bytes());
        return {memory.data(), memory.size(), handle_->lkey};
    }

    /// The whole region as a `remote_span<T>` to hand to a peer (address, length, rkey).
    template <class T = std::byte>
    [[nodiscard]] remote_span<T> remote() const noexcept {
        return {reinterpret_cast<std::uintptr_t>(handle_->addr), length() / sizeof(T), handle_->rkey};
    }

    /// Start of the registered memory.
    [[nodiscard]] void* address() const noexcept { return handle_->addr; }
    /// Length in bytes.
    [[nodiscard]] std::size_t length() const noexcept { return handle_->length; }
    /// Local key, for scatter-gather entries.
    [[nodiscard]] std::uint32_t lkey() const noexcept { return handle_->lkey; }
    /// Remote key, for peers' one-sided operations.
    [[nodiscard]] std::uint32_t rkey() const noexcept { return handle_->rkey; }
    /// The access rights it was registered with.
    [[nodiscard]] access rights() const noexcept { return rights_; }
    /// The verbs handle.
    [[nodiscard]] ibv_mr* native_handle() const noexcept { return handle_.get(); }

    /// Asks the device to prefetch (fault in) `length` bytes from byte `offset` of an on-demand
    /// paged region (`access::on_demand`), so that the first accesses do not take page faults.
    /// Returns when the advice is accepted; with `flush` when the pages are mapped.
    /// @throws argument_error when the region is empty, `length` is 0 or over 2^32 - 1, or the
    ///         range leaves the region (nothing reaches the device); not_supported_error naming
    ///         ibv_advise_mr and the device when the provider has no such verb or not this
    ///         advice; sys_error otherwise (EINVAL: e.g. a region that is not on-demand paged).
    /// Thread-safety: safe beside other verbs on the region's domain.
    /// @see ibv_advise_mr(3)
    void advise(prefetch how, std::size_t offset, std::size_t length, advise_flush flush = advise_flush::no) const {
        if (!handle_) [[unlikely]]
            detail::throw_argument("memory_region::advise: the region is empty (moved from or deregistered)");
        if (length == 0 || offset > this->length() || length > this->length() - offset) [[unlikely]]
            detail::throw_argument("memory_region::advise: bytes [" + std::to_string(offset) + ", " +
                                   std::to_string(offset) + " + " + std::to_string(length) +
                                   ") are empty or leave the region of " + std::to_string(this->length()) +
                                   " bytes with lkey 0x" + to_hex(lkey()));
        check_message_length(length);
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(handle_->addr) + offset, static_cast<std::uint32_t>(length),
                    handle_->lkey};
        int const rc =
            ::ibv_advise_mr(handle_->pd, static_cast<ibv_advise_mr_advice>(how),
                            flush == advise_flush::yes ? std::uint32_t{IBV_ADVISE_MR_FLAG_FLUSH} : 0U, &sge, 1);
        if (rc != 0) [[unlikely]]
            detail::throw_verb(rc, "ibv_advise_mr",
                               "on " + std::string{::ibv_get_device_name(handle_->context->device)} + ": prefetching " +
                                   std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                                   " of the region with lkey 0x" + to_hex(lkey()));
    }
    /// Prefetches the whole region; see the overload with a range.
    void advise(prefetch how = prefetch::read, advise_flush flush = advise_flush::no) const {
        advise(how, 0, handle_ ? length() : 0, flush);
    }

private:
    friend class protection_domain;
    // Takes ownership of a region registered by another verb (ibv_reg_dmabuf_mr).
    memory_region(ibv_mr* adopted, access rights) noexcept : handle_(adopted), rights_(rights) {}

    // ibv_reg_mr failed with `err`: on-demand paging the device lacks is "not supported".
    [[noreturn]] RDMACXX_COLD static void refuse_registration(int err, protection_domain const& pd, std::size_t length,
                                                              access rights) {
        if (err == 0) err = EIO;
        std::string what = "registering " + std::to_string(length) + " bytes with access 0x" +
                           to_hex(static_cast<std::uint32_t>(rights));
        if (has(rights, access::on_demand) && !pd.supports_on_demand_paging())
            throw not_supported_error(err, "ibv_reg_mr",
                                      "on " + std::string{pd.context().name()} + ": " + what +
                                          ": access::on_demand, but the device has no on-demand paging "
                                          "(no IBV_ODP_SUPPORT in its ODP capabilities)");
        detail::throw_verb(err, "ibv_reg_mr", std::move(what));
    }
    static std::uint64_t in_flight(ibv_mr const* mr) noexcept { return detail::region_in_flight(mr); }
    static std::string in_flight_message(ibv_mr const* mr, std::uint64_t n, char const* what) {
        std::string s = "memory region [0x";
        s.append(to_hex(reinterpret_cast<std::uintptr_t>(mr->addr))).append(", +").append(std::to_string(mr->length));
        s.append(" bytes) with lkey 0x").append(to_hex(mr->lkey)).append(" ").append(what).append(" while ");
        s.append(std::to_string(n)).append(" work requests that use it are in flight");
        return s;
    }

    static std::string to_hex(std::uint64_t v) {
        static constexpr char digits[] = "0123456789abcdef";
        std::string s;
        do {
            s.insert(s.begin(), digits[v & 0xf]);
            v >>= 4;
        } while (v != 0);
        return s;
    }
    // A span of non-const elements is memory the HCA may write: only with local write access.
    void check_writable() const {
        if (!has(rights_, access::local_write)) [[unlikely]]
            detail::throw_argument("memory region [0x" + to_hex(reinterpret_cast<std::uintptr_t>(handle_->addr)) +
                                   ", +" + std::to_string(length()) + " bytes) with lkey 0x" + to_hex(lkey()) +
                                   " was registered without access::local_write, so the HCA may not write it: take "
                                   "a span of const (span<T const>(), span_of(std::span<T const>)) to send or RDMA "
                                   "WRITE from it; an RDMA READ, a receive or an atomic result needs local_write");
    }
    static void check_message_length(std::size_t bytes) {
        if (bytes > detail::max_message_bytes) [[unlikely]]
            detail::throw_argument("a span of " + std::to_string(bytes) +
                                   " bytes is longer than one scatter-gather entry can describe (2^32 - 1 bytes)");
    }

    // Deregisters; reports the work of checked QPs still in flight first (see the class).
    struct deleter {
        void operator()(ibv_mr* m) const noexcept {
            if (std::uint64_t const n = in_flight(m); n != 0) [[unlikely]] {
                try {
                    detail::report_in_flight(in_flight_error(in_flight_message(m, n, "destroyed"), n, 0));
                } catch (...) { // NOLINT(bugprone-empty-catch): no memory for the message; deregister all the same
                }
            }
            (void)::ibv_dereg_mr(m);
        }
    };
    std::unique_ptr<ibv_mr, deleter> handle_;
    access rights_ = access::none;
};

inline memory_region protection_domain::register_dmabuf(int fd, std::uint64_t offset, std::size_t length,
                                                        std::uint64_t iova, access rights) {
    if (fd < 0 || length == 0) [[unlikely]]
        detail::throw_argument("register_dmabuf: " +
                               (fd < 0 ? "file descriptor " + std::to_string(fd) + " is not a dma-buf's"
                                       : std::string{"length 0: nothing to register"}));
    ibv_mr* const mr = ::ibv_reg_dmabuf_mr(native_handle(), offset, length, iova, fd, to_native(rights));
    if (mr == nullptr) [[unlikely]] {
        int const err = errno;
        detail::throw_verb(err != 0 ? err : EIO, "ibv_reg_dmabuf_mr",
                           "on " + std::string{context().name()} + ": registering " + std::to_string(length) +
                               " bytes of dma-buf fd " + std::to_string(fd) + " from offset " + std::to_string(offset) +
                               " at IOVA 0x" + detail::hex(iova));
    }
    return memory_region{mr, rights};
}

template <class T>
memory_region protection_domain::register_memory(std::span<T> memory, access rights) {
    static_assert(std::is_trivially_copyable_v<std::remove_const_t<T>>,
                  "registered memory must hold trivially copyable elements: the HCA copies their bytes");
    return memory_region{*this, const_cast<std::remove_const_t<T>*>(memory.data()), memory.size_bytes(), rights};
}

} // namespace v0
} // namespace rdmacxx
