#pragma once
/// @file
/// `protection_domain`: the owner of memory regions, QPs and address handles.

#include "rdmacxx/context.hpp"
#include "rdmacxx/error.hpp"

#include "rdmacxx/access.hpp"

#include <memory>
#include <span>

namespace rdmacxx {
inline namespace v0 {

class memory_region;

/// A protection domain (`ibv_pd`). Owns the handle; move-only; holds a non-owning reference to
/// its `context`, which must outlive it, as must it every region and QP made in it.
/// Thread-safety: the verbs on it are thread-safe.
/// @see ibv_alloc_pd(3)
class protection_domain {
public:
    /// Allocates a protection domain on `ctx`.
    /// @throws sys_error when ibv_alloc_pd(3) fails.
    explicit protection_domain(rdmacxx::context& ctx) : context_(&ctx), handle_(::ibv_alloc_pd(ctx.native_handle())) {
        if (!handle_) [[unlikely]]
            detail::throw_errno("ibv_alloc_pd", [&] { return "on " + std::string{ctx.name()}; });
    }

    /// Registers `bytes` for RDMA with `rights`; see memory.hpp.
    template <class T>
    [[nodiscard]] memory_region register_memory(std::span<T> memory, access rights);

    /// The context this domain belongs to.
    [[nodiscard]] rdmacxx::context& context() const noexcept { return *context_; }
    /// The verbs handle.
    [[nodiscard]] ibv_pd* native_handle() const noexcept { return handle_.get(); }

private:
    struct deleter {
        void operator()(ibv_pd* p) const noexcept { (void)::ibv_dealloc_pd(p); }
    };
    rdmacxx::context* context_;
    std::unique_ptr<ibv_pd, deleter> handle_;
};

} // namespace v0
} // namespace rdmacxx

#include "rdmacxx/memory.hpp"
