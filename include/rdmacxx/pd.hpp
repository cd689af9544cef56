#pragma once
/// @file
/// `protection_domain`: the owner of memory regions, QPs and address handles.

#include "rdmacxx/context.hpp"
#include "rdmacxx/detail/anchor.hpp"
#include "rdmacxx/error.hpp"

#include "rdmacxx/access.hpp"

#include <memory>
#include <span>

namespace rdmacxx {
inline namespace v0 {

class memory_region;

/// A protection domain (`ibv_pd`). Owns the handle; move-only; holds a non-owning reference to
/// its `context`, which must outlive it, as must it every region and QP made in it.
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
        : context_(other.context_), handle_(std::move(other.handle_)), anchor_(std::move(other.anchor_), this) {}
    /// Deallocates the domain held (everything made in it must be gone), then takes over
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
    /// Deallocates the domain (ibv_dealloc_pd(3)).
    ~protection_domain() = default;

    /// Registers `bytes` for RDMA with `rights`; see memory.hpp.
    template <class T>
    [[nodiscard]] memory_region register_memory(std::span<T> memory, access rights);

    /// The context this domain belongs to, wherever it has moved to.
    [[nodiscard]] rdmacxx::context& context() const noexcept { return **context_; }
    /// The verbs handle.
    [[nodiscard]] ibv_pd* native_handle() const noexcept { return handle_.get(); }

    /// @cond
    // The stable cell through which queue pairs find this domain.
    [[nodiscard]] protection_domain* const* anchor_cell() const noexcept { return anchor_.cell(); }
    /// @endcond

private:
    struct deleter {
        void operator()(ibv_pd* p) const noexcept { (void)::ibv_dealloc_pd(p); }
    };
    rdmacxx::context* const* context_;
    std::unique_ptr<ibv_pd, deleter> handle_;
    detail::anchor<protection_domain> anchor_; // after handle_: the domain is freed when it throws
};

} // namespace v0
} // namespace rdmacxx

#include "rdmacxx/memory.hpp"
