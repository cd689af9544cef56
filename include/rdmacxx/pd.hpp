#pragma once
/// @file
/// `protection_domain`: the owner of memory regions, QPs and address handles.

#include "rdmacxx/context.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"

#include "rdmacxx/access.hpp"

#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

namespace rdmacxx {
inline namespace v0 {

class memory_region;

/// A protection domain (`ibv_pd`). Owns the handle; move-only. The context must outlive it, and
/// it every region, window, QP, SRQ and address handle made in it (the device refuses to free
/// them while they exist; see docs/ownership.md).
///
/// Either may move after the other exists: the domain follows its context (`context()` names it
/// wherever it is now), and QPs follow the domain (`queue_pair::pd()`). A moved-from domain is
/// empty: only destruction and assignment are valid on it.
/// Thread-safety: the verbs on it are thread-safe; moving it is not.
/// @see ibv_alloc_pd(3)
class protection_domain {
public:
    /// Allocates a protection domain on `ctx`.
    /// @throws sys_error when ibv_alloc_pd(3) fails; std::bad_alloc.
    explicit protection_domain(rdmacxx::context& ctx)
        : context_(ctx.anchor_cell()), handle_(::ibv_alloc_pd(ctx.native_handle())), anchor_(this) {
        if (!handle_) [[unlikely]]
            detail::throw_errno("ibv_alloc_pd", [&] { return "on " + std::string{ctx.name()}; });
    }
    /// Takes over `other`'s domain and the objects made in it; `other` is left empty.
    protection_domain(protection_domain&& other) noexcept
        : context_(std::move(other.context_)), handle_(std::move(other.handle_)),
          anchor_(std::move(other.anchor_), this) {}
    /// Deallocates the domain held, as the destructor does, then takes over
    /// `other`'s; self-move is a no-op.
    protection_domain& operator=(protection_domain&& other) noexcept {
        if (this != &other) {
            context_ = other.context_;
            handle_ = std::move(other.handle_);
            anchor_.take(std::move(other.anchor_), this);
        }
        return *this;
    }
    protection_domain(protection_domain const&) = delete;
    protection_domain& operator=(protection_domain const&) = delete;
    /// Moving a derived domain (a `parent_domain`) into a plain one would keep its handle and
    /// forget what it was made from: it does not compile.
    template <class Derived>
        requires(std::derived_from<std::remove_cvref_t<Derived>, protection_domain> &&
                 !std::same_as<std::remove_cvref_t<Derived>, protection_domain>)
    protection_domain(Derived&&) // NOLINT(bugprone-forwarding-reference-overload): constrained to derived types
    = delete;
    /// As the constructor above: assigning a derived domain to a plain one does not compile.
    template <class Derived>
        requires(std::derived_from<std::remove_cvref_t<Derived>, protection_domain> &&
                 !std::same_as<std::remove_cvref_t<Derived>, protection_domain>)
    protection_domain& operator=(Derived&&) = delete;
    /// Deallocates the domain (ibv_dealloc_pd(3)).
    ~protection_domain() = default;

    /// Registers `bytes` for RDMA with `rights`. Defined in memory.hpp (include it, or
    /// rdmacxx/verbs.hpp, to call it): the region sits above the domain it is made in. With `access::on_demand` the
    /// region is paged on demand (ODP): a device without ODP refuses it with
    /// `not_supported_error` (see `supports_on_demand_paging()`).
    template <class T>
    [[nodiscard]] memory_region register_memory(std::span<T> memory, access rights);

    /// Registers `length` bytes of a dma-buf (GPU or accelerator memory exported by its driver)
    /// from byte `offset` of the buffer, at I/O virtual address `iova` (the address work requests
    /// and peers use for it: the region's `address()`; it is not a CPU address). Defined in
    /// memory.hpp, as `register_memory`.
    /// @param fd      the dma-buf's file descriptor; the region takes its own reference, so the
    ///                caller may close it afterwards
    /// @param offset  byte offset into the dma-buf
    /// @param length  bytes to register; not 0
    /// @param iova    the region's I/O virtual address
    /// @param rights  access rights, as for `register_memory`
    /// @throws argument_error for a negative `fd` or a zero `length` (nothing reaches the device);
    ///         not_supported_error naming ibv_reg_dmabuf_mr and the device when the provider or
    ///         kernel has no DMA-BUF registration (EOPNOTSUPP); sys_error for other failures
    ///         (EBADF: not a dma-buf; EINVAL: a range outside the buffer).
    /// Thread-safety: as ibv_reg_dmabuf_mr(3), safe beside other verbs on this domain.
    /// @see ibv_reg_dmabuf_mr(3)
    [[nodiscard]] memory_region register_dmabuf(int fd, std::uint64_t offset, std::size_t length, std::uint64_t iova,
                                                access rights);

    /// True when this domain's device can register dma-bufs. The probe is one call of
    /// ibv_reg_dmabuf_mr(3) with an invalid file descriptor: EBADF means the provider and kernel
    /// got as far as looking the descriptor up (supported), EOPNOTSUPP that they have no such
    /// verb. Registers nothing; costs one system call at most.
    /// @throws sys_error when the probe fails in any other way.
    /// @see ibv_reg_dmabuf_mr(3)
    [[nodiscard]] bool supports_dmabuf() const {
        ibv_mr* const mr = ::ibv_reg_dmabuf_mr(handle_.get(), 0, probe_length, 0, -1, IBV_ACCESS_LOCAL_WRITE);
        if (mr != nullptr) [[unlikely]] { // a descriptor -1 that registered: supported, whatever it was
            (void)::ibv_dereg_mr(mr);
            return true;
        }
        int const err = errno;
        if (err == EBADF) return true;
        if (detail::means_not_supported(err)) return false;
        detail::throw_sys(err != 0 ? err : EIO, "ibv_reg_dmabuf_mr",
                          "probing for DMA-BUF registration with fd -1 on " + std::string{context().name()});
    }

    /// True when this domain's device supports on-demand paging (`access::on_demand`): the
    /// `IBV_ODP_SUPPORT` bit of the ODP capabilities ibv_query_device_ex(3) reports.
    /// @throws sys_error when ibv_query_device_ex(3) fails.
    [[nodiscard]] bool supports_on_demand_paging() const {
        return (context().query_device().odp_caps.general_caps & IBV_ODP_SUPPORT) != 0;
    }

    /// The context this domain belongs to, wherever it has moved to.
    /// @throws orphaned_error when the context was destroyed.
    [[nodiscard]] rdmacxx::context& context() const { return context_.get("protection domain", "context"); }
    /// The verbs handle.
    [[nodiscard]] ibv_pd* native_handle() const noexcept { return handle_.get(); }

    /// @cond
    // The stable cell through which queue pairs find this domain.
    [[nodiscard]] detail::link<protection_domain> anchor_cell() const noexcept { return anchor_.cell(); }
    /// @endcond

protected:
    /// Takes ownership of `adopted`, an `ibv_pd` made on `ctx` by another verb (a parent domain,
    /// parent_domain.hpp): it is freed with ibv_dealloc_pd(3), also when this constructor throws.
    /// @throws std::bad_alloc
    protection_domain(rdmacxx::context& ctx, ibv_pd* adopted)
        : context_(ctx.anchor_cell()), handle_(adopted), anchor_(this) {}

private:
    static constexpr std::size_t probe_length = 4096;
    struct deleter {
        void operator()(ibv_pd* p) const noexcept { (void)::ibv_dealloc_pd(p); }
    };
    detail::link<rdmacxx::context> context_;
    std::unique_ptr<ibv_pd, deleter> handle_;
    detail::anchor<protection_domain> anchor_; // after handle_: the domain is freed when it throws
};

} // namespace v0
} // namespace rdmacxx
