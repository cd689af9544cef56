#pragma once
/// @file
/// Memory windows: `memory_window<1>` and `memory_window<2>` (ibv_alloc_mw(3)), a window's
/// `remote()` span, the type 1 bind (ibv_bind_mw(3)), and the three work requests of windows:
/// `bind_mw` (type 2), `local_invalidate` and `send_inv` (SEND with invalidate). Each request is
/// one operation type as in wr.hpp: its transports and both of its encodings side by side.
/// @see ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3), ibv_wr_bind_mw(3)

#include "rdmacxx/access.hpp"
#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr_base.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

namespace detail {

/// The rights a window may grant: remote read, write and atomic.
inline constexpr access window_rights = access::remote_read | access::remote_write | access::remote_atomic;

/// What a bind names, checked before anything is posted: `length` bytes at `offset` of `mr`, in
/// the window's domain, registered with `mw_bind` (and local write for remote write or atomic),
/// `rights` no more than a window grants.
inline ibv_mw_bind_info bind_info(ibv_mw const* mw, memory_region const& mr, std::size_t offset, std::size_t length,
                                  access rights) {
    if (mw == nullptr) [[unlikely]]
        throw_argument("binding a moved-from memory window");
    if (mr.native_handle() == nullptr) [[unlikely]]
        throw_argument("binding a memory window to a moved-from memory region");
    std::size_t const region = mr.length();
    if (!has(mr.rights(), access::mw_bind)) [[unlikely]]
        throw_argument("binding a memory window to a memory region registered without access::mw_bind (rights 0x" +
                       hex(static_cast<std::uint32_t>(mr.rights())) + ")");
    if (offset > region || length > region - offset) [[unlikely]]
        throw_argument("binding a memory window to bytes [" + std::to_string(offset) + ", " +
                       std::to_string(offset + length) + ") of a memory region of " + std::to_string(region) +
                       " bytes: beyond the region");
    if (has(mr.rights(), access::zero_based)) [[unlikely]]
        throw_argument("binding a memory window to a zero-based memory region (access::zero_based): windows "
                       "address a region by its virtual address");
    if ((rights & window_rights) != rights) [[unlikely]]
        throw_argument("a memory window grants only remote_read, remote_write and remote_atomic (asked 0x" +
                       hex(static_cast<std::uint32_t>(rights)) + ")");
    if ((has(rights, access::remote_write) || has(rights, access::remote_atomic)) &&
        !has(mr.rights(), access::local_write)) [[unlikely]]
        throw_argument("a memory window granting remote write or atomic needs a region registered with "
                       "access::local_write");
    if (mr.native_handle()->pd != mw->pd) [[unlikely]]
        throw_argument("binding a memory window to a memory region of another protection domain");
    return {mr.native_handle(), reinterpret_cast<std::uintptr_t>(mr.address()) + offset, length,
            static_cast<unsigned>(to_native(rights))};
}

} // namespace detail

/// A memory window (`ibv_mw`) of type `Type`, 1 or 2: a view of part of a registered region that
/// a peer reaches with the window's own rkey, granted and revoked without registering again.
///
/// - Type 1 is bound with `bind()` (ibv_bind_mw(3)) and stays bound until bound again; binding it
///   with no bytes (`unbind()`) revokes it. It cannot be invalidated.
/// - Type 2 is bound with the `bind_mw` work request on an RC QP, which alone may then reach it,
///   and revoked by `local_invalidate` on that QP or by the peer's `send_inv`; then it may be
///   bound again.
///
/// Each bind (a type 1 unbind too) gives the window its next rkey (ibv_inc_rkey(3)): only the
/// low byte changes, so after 256 of them the next would give it the rkey of the first again, and
/// a peer still holding that one (a late WRITE after a timeout) would reach the new bind's
/// memory. A window therefore takes at most `max_binds` (256) binds and unbinds together: the
/// next bind is refused with `argument_error` before anything is posted (`binds_left()` says how
/// many remain); then use a new window, and keep the old one allocated (invalidated or unbound)
/// while a peer may still hold its rkeys, since a freed window's index may be given to the next
/// window allocated. Unbinding (type 1) and invalidating (type 2) are never refused. The check is
/// made when a `bind_mw` is built, which names the rkey: build it just before posting it, and
/// post it once.
///
/// `remote()` is the span a peer needs (address, length, rkey) of the last bind. The region must
/// be registered with `access::mw_bind`. Owns the handle; move-only (a moved-from window is
/// empty); references its protection domain, which must outlive it. Unbind or invalidate a
/// window (or destroy it) before its region: ibv_dereg_mr(3) fails while a window is bound to
/// the region, and the region's destructor cannot report that.
/// Thread-safety: none beyond verbs'; a window is bound from the thread that posts to its QP.
/// @see ibv_alloc_mw(3), ibv_bind_mw(3), ibv_dealloc_mw(3)
template <unsigned Type>
class memory_window {
    static_assert(Type == 1 || Type == 2, "rdmacxx: a memory window is of type 1 or 2");

public:
    /// The window type.
    static constexpr unsigned type = Type;
    /// Binds and unbinds a window takes before its rkey would repeat one it has had (the key
    /// byte's 256 values).
    static constexpr std::uint32_t max_binds = 256;

    /// Allocates a window of this type in `pd`.
    /// @throws not_supported_error naming ibv_alloc_mw and the device when the device has no
    ///         windows of this type; sys_error when ibv_alloc_mw(3) fails otherwise.
    explicit memory_window(protection_domain& pd) : pd_(pd.anchor_cell()), handle_(allocate(pd)) {
        rkey_ = handle_->rkey;
    }
    /// Takes over `other`'s window; `other` is left empty (no handle, no bind).
    memory_window(memory_window&& other) noexcept
        : pd_(other.pd_), handle_(std::move(other.handle_)), rkey_(std::exchange(other.rkey_, 0)),
          address_(std::exchange(other.address_, 0)), length_(std::exchange(other.length_, 0)),
          mr_(std::exchange(other.mr_, nullptr)), binds_(std::exchange(other.binds_, max_binds)) {}
    /// Deallocates the window held, then takes over `other`'s; `other` is left empty.
    memory_window& operator=(memory_window&& other) noexcept {
        if (this != &other) {
            pd_ = other.pd_;
            handle_ = std::move(other.handle_);
            rkey_ = std::exchange(other.rkey_, 0);
            address_ = std::exchange(other.address_, 0);
            length_ = std::exchange(other.length_, 0);
            mr_ = std::exchange(other.mr_, nullptr);
            binds_ = std::exchange(other.binds_, max_binds);
        }
        return *this;
    }
    memory_window(memory_window const&) = delete;
    memory_window& operator=(memory_window const&) = delete;
    /// Deallocates the window (ibv_dealloc_mw(3)).
    ~memory_window() = default;

    /// The rkey of the last bind (type 2: the one the last `bind_mw` request asked for), which a
    /// `local_invalidate` names.
    [[nodiscard]] std::uint32_t rkey() const noexcept { return rkey_; }
    /// The peer's view of the last bind: its address, length and rkey; empty before any bind and
    /// after `unbind()`. Valid once the bind's completion is polled (a failed bind leaves it wrong).
    template <class T = std::byte>
    [[nodiscard]] remote_span<T> remote() const noexcept {
        return {address_, length_ / sizeof(T), rkey_};
    }
    /// Binds left before the window's rkey would repeat (`max_binds` less the binds and unbinds
    /// posted so far); 0 in a moved-from window.
    [[nodiscard]] std::uint32_t binds_left() const noexcept { return binds_ >= max_binds ? 0 : max_binds - binds_; }
    /// The protection domain, wherever it has moved to.
    /// @throws orphaned_error when the protection domain was destroyed.
    [[nodiscard]] protection_domain& pd() const { return pd_.get("memory window", "protection domain"); }
    /// The verbs handle; null in a moved-from window.
    [[nodiscard]] ibv_mw* native_handle() const noexcept { return handle_.get(); }

    /// Binds this type 1 window to `length` bytes at `offset` of `mr`, granting `rights` (remote
    /// read, write, atomic), by posting a bind request to `qp`'s send queue (ibv_bind_mw(3)); its
    /// completion (IBV_WC_BIND_MW, `wr_id`) comes to the QP's send CQ. Rebinding moves the
    /// window; the old rkey stops working. The QP is any QP of the window's domain whose
    /// transport has the bind operation (RC), and not a `checked` one (its ledger does not see
    /// binds).
    /// @returns the window's new `remote()`. ibv_bind_mw(3) gives the window its new rkey when it
    ///          posts: hand the span to a peer only after the bind's completion is polled
    ///          successfully. After a failed completion the window is unusable: destroy it.
    /// @throws argument_error (nothing posted) for bytes beyond the region, a region without
    ///         `access::mw_bind` (or without local write for remote write or atomic), rights a
    ///         window cannot grant, a region of another domain, or a window with no `binds_left()`;
    ///         sys_error when ibv_bind_mw(3) refuses.
    template <class QueuePair>
        requires(Type == 1 && (QueuePair::transport_type::send_ops & IBV_QP_EX_WITH_BIND_MW) != 0 &&
                 !detail::tracks_in_flight<typename QueuePair::completion_type>)
    remote_span<std::byte> bind(QueuePair& qp, memory_region const& mr, std::size_t offset, std::size_t length,
                                access rights, std::uint64_t wr_id = 0) {
        ibv_mw_bind bind{};
        bind.wr_id = wr_id;
        bind.send_flags = IBV_SEND_SIGNALED;
        bind.bind_info = detail::bind_info(handle_.get(), mr, offset, length, rights);
        require_fresh_rkey();
        post_bind(qp.native_handle(), bind);
        address_ = bind.bind_info.addr;
        length_ = length;
        mr_ = mr.native_handle();
        return remote();
    }
    /// Binds this type 1 window to the whole of `mr`; as above.
    template <class QueuePair>
        requires(Type == 1 && (QueuePair::transport_type::send_ops & IBV_QP_EX_WITH_BIND_MW) != 0 &&
                 !detail::tracks_in_flight<typename QueuePair::completion_type>)
    remote_span<std::byte> bind(QueuePair& qp, memory_region const& mr, access rights, std::uint64_t wr_id = 0) {
        return bind(qp, mr, 0, mr.length(), rights, wr_id);
    }
    /// Revokes this type 1 window: binds it with no bytes, so that a peer's access through the
    /// old rkey fails with a remote access error. Posts to `qp` as `bind()`; `remote()` is then
    /// empty. Nothing happens for a window never bound.
    /// @throws sys_error when ibv_bind_mw(3) refuses.
    template <class QueuePair>
        requires(Type == 1 && (QueuePair::transport_type::send_ops & IBV_QP_EX_WITH_BIND_MW) != 0 &&
                 !detail::tracks_in_flight<typename QueuePair::completion_type>)
    void unbind(QueuePair& qp, std::uint64_t wr_id = 0) {
        if (mr_ == nullptr || length_ == 0) return;
        ibv_mw_bind bind{};
        bind.wr_id = wr_id;
        bind.send_flags = IBV_SEND_SIGNALED;
        bind.bind_info = {mr_, address_, 0, 0};
        post_bind(qp.native_handle(), bind);
        length_ = 0;
        mr_ = nullptr; // the region may go now; a second unbind does nothing
    }

private:
    template <unsigned>
    friend class memory_window;
    friend class bind_mw;

    static ibv_mw* allocate(protection_domain& pd) {
        ibv_mw* const mw = ::ibv_alloc_mw(pd.native_handle(), Type == 1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
        if (mw == nullptr) [[unlikely]] {
            int const err = errno;
            detail::throw_verb(err != 0 ? err : EIO, "ibv_alloc_mw",
                               "on " + std::string{::ibv_get_device_name(pd.native_handle()->context->device)} +
                                   ": allocating a type " + std::to_string(Type) + " memory window");
        }
        return mw;
    }
    // ibv_bind_mw sets the window's new rkey in the handle when it posts (an unbind too).
    void post_bind(ibv_qp* qp, ibv_mw_bind& bind) {
        if (int rc = ::ibv_bind_mw(qp, handle_.get(), &bind); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_bind_mw", "binding a type 1 memory window");
        rkey_ = handle_->rkey;
        ++binds_;
    }
    // A bind's rkey must be one the window has not had: refused once the key byte has gone round.
    void require_fresh_rkey() const {
        if (binds_ >= max_binds) [[unlikely]]
            detail::throw_argument(
                "binding memory window " + std::to_string(rkey_ >> 8) + " after " + std::to_string(binds_) +
                " binds and unbinds: its rkey would repeat one it has had (rkey " +
                std::to_string(::ibv_inc_rkey(rkey_)) +
                "), which a peer may still hold; use a new window, and keep this one allocated while a peer may "
                "hold its rkeys");
    }

    struct deleter {
        void operator()(ibv_mw* p) const noexcept { (void)::ibv_dealloc_mw(p); }
    };
    detail::link<protection_domain> pd_;
    std::unique_ptr<ibv_mw, deleter> handle_;
    std::uint32_t rkey_ = 0;
    std::uint64_t address_ = 0;
    std::size_t length_ = 0;
    ibv_mr* mr_ = nullptr;    // the region of the last bind (unbind names it)
    std::uint32_t binds_ = 0; // binds and unbinds posted: each gave it the next rkey
};

/// BIND MW: binds a type 2 `memory_window` to `length` bytes at `offset` of a region with a
/// work request, granting `rights` (remote read, write, atomic) to the peer of the QP it is
/// posted on, which alone may reach the window. Completes with IBV_WC_BIND_MW. The request names
/// the window's next rkey (ibv_inc_rkey(3)); posting it (`queue_pair::post` or `try_post`, when
/// the request is among those posted) gives the window that rkey and its new `remote()`, which a
/// peer may use once the completion is polled. A request refused before posting, or never posted,
/// leaves the window as it was. The window must be free (never bound, or invalidated); build the
/// request just before posting it. rdmacxx allows it on RC (the verbs allow UC too).
class bind_mw : public detail::send_wr_base<bind_mw, 0> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_BIND_MW; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "BIND MW";          ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_BIND_MW;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(),
                      "binding a memory window with a work request (bind_mw, type 2) is available only on RC queue "
                      "pairs");
    }

    /// Binds `window` to `length` bytes at `offset` of `mr`, granting `rights`.
    /// @throws argument_error (nothing posted) for a moved-from window or region, no bytes, bytes
    ///         beyond the region, a region without `access::mw_bind` (or without local write for
    ///         remote write or atomic) or zero-based, rights a window cannot grant, a region
    ///         of another domain, or a window with no `binds_left()` (its rkey would repeat).
    bind_mw(memory_window<2>& window, memory_region const& mr, std::size_t offset, std::size_t length, access rights)
        : send_wr_base(sg_list<0>{}), window_(&window), mw_(window.native_handle()),
          info_(detail::bind_info(window.native_handle(), mr, offset, length, rights)),
          rkey_(::ibv_inc_rkey(window.rkey_)) {
        window.require_fresh_rkey();
        if (length == 0) [[unlikely]]
            detail::throw_argument(
                "binding a type 2 memory window to no bytes: invalidate it instead (local_invalidate)");
    }
    /// Binds `window` to the whole of `mr`; as above.
    bind_mw(memory_window<2>& window, memory_region const& mr, access rights)
        : bind_mw(window, mr, 0, mr.length(), rights) {}

    /// The rkey the window gets.
    [[nodiscard]] std::uint32_t rkey() const noexcept { return rkey_; }

    /// Called by `queue_pair::post` once the device has taken the request: the window (and the
    /// provider's handle, whose `rkey` the next bind names as the current one) gets the new rkey
    /// and span.
    void posted() const noexcept {
        mw_->rkey = rkey_;
        window_->rkey_ = rkey_;
        ++window_->binds_;
        window_->address_ = info_.addr;
        window_->length_ = info_.length;
        window_->mr_ = info_.mr;
    }

    /// Fills `wr` for transport `Transport` (every field a provider reads; `next` is the caller's).
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        fill_common(wr, opcode);
        wr.wr.rdma.remote_addr = 0;
        wr.wr.rdma.rkey = 0;
        wr.bind_mw.mw = mw_;
        wr.bind_mw.rkey = rkey_;
        wr.bind_mw.bind_info = info_;
    }
    /// Writes it with the extended API (the caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_bind_mw(qpx, mw_, rkey_, &info_);
    }

private:
    memory_window<2>* window_;
    ibv_mw* mw_;
    ibv_mw_bind_info info_;
    std::uint32_t rkey_ = 0;
};

/// LOCAL INVALIDATE: revokes a type 2 `memory_window` bound on the QP it is posted to; a peer's
/// access through its rkey then fails with a remote access error. Completes with
/// IBV_WC_LOCAL_INV. Type 1 windows cannot be invalidated (unbind them): a `memory_window<1>`
/// does not compile here. rdmacxx allows it on RC.
class local_invalidate : public detail::send_wr_base<local_invalidate, 0> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_LOCAL_INV; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "LOCAL INVALIDATE";   ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_LOCAL_INV;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(), "local invalidate is available only on RC queue pairs");
    }

    /// Invalidates `window`'s current rkey.
    explicit local_invalidate(memory_window<2> const& window) noexcept
        : send_wr_base(sg_list<0>{}), rkey_(window.rkey()) {}

    /// The rkey invalidated.
    [[nodiscard]] std::uint32_t invalidate_rkey() const noexcept { return rkey_; }

    /// Fills `wr` for transport `Transport` (every field a provider reads; `next` is the caller's).
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        fill_common(wr, opcode);
        wr.invalidate_rkey = rkey_;
        wr.wr.rdma.remote_addr = 0;
        wr.wr.rdma.rkey = 0;
    }
    /// Writes it with the extended API (the caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_local_inv(qpx, rkey_);
    }

private:
    std::uint32_t rkey_ = 0;
};

/// SEND with invalidate: a SEND that also revokes, at the peer, the type 2 window whose
/// `remote()` span it names (the peer's receive completion carries IBV_WC_WITH_INV and the
/// rkey; rxe sets another bit: `detail::quirks::with_inv_flags`, detail/quirks.hpp). rdmacxx
/// allows it on RC (the verbs allow UC too).
template <std::size_t Sges = 1>
class send_inv : public detail::send_wr_base<send_inv<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_SEND_WITH_INV; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "SEND with invalidate";   ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_SEND_WITH_INV;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(), "SEND with invalidate is available only on RC queue pairs");
    }

    /// Sends `payload` and invalidates the peer's window `window`.
    template <class T, class U>
    constexpr send_inv(local_span<T> payload, remote_span<U> window) noexcept requires(Sges == 1)
        : detail::send_wr_base<send_inv, Sges>(detail::as_sg_list(payload)), rkey_(window.rkey()) {}
    /// Sends the gathered `payload` and invalidates the peer's window `window`.
    template <bool W, class U>
    constexpr send_inv(sg_list<Sges, W> const& payload, remote_span<U> window) noexcept
        : detail::send_wr_base<send_inv, Sges>(detail::as_sg_list(payload)), rkey_(window.rkey()) {}

    /// The rkey invalidated at the peer.
    [[nodiscard]] std::uint32_t invalidate_rkey() const noexcept { return rkey_; }

    /// Fills `wr` for transport `Transport` (every field a provider reads; `next` is the caller's).
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        wr.invalidate_rkey = rkey_;
        wr.wr.rdma.remote_addr = 0;
        wr.wr.rdma.rkey = 0;
    }
    /// Writes it with the extended API (the caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_send_inv(qpx, rkey_);
        this->set_payload(qpx);
    }

private:
    std::uint32_t rkey_ = 0;
};
template <class T, class U>
send_inv(local_span<T>, remote_span<U>) -> send_inv<1>;
template <std::size_t N, bool W, class U>
send_inv(sg_list<N, W>, remote_span<U>) -> send_inv<N>;

} // namespace v0
} // namespace rdmacxx
