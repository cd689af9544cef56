#pragma once
/// @file
/// `thread_domain`: a promise to the provider that the resources made in it are used by one
/// thread at a time, so it may drop its locks.

#include "rdmacxx/context.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"

#include <cerrno>
#include <memory>
#include <string>

namespace rdmacxx {
inline namespace v0 {

/// A thread domain (`ibv_td`). Owns the handle; move-only. It finds its `context` wherever that
/// has moved to (`context()`), and the parent domains made with it find it the same way when it
/// moves (`parent_domain::td()`; see docs/ownership.md). The context must outlive it, and it
/// every parent domain made with it (the device refuses to free it while one exists).
///
/// The single-threaded resource policy: a thread domain is how a program tells the provider
/// that every QP and CQ created in a `parent_domain` with this thread domain is used (posted
/// to, polled) by one thread at a time. The provider may then give those resources their own
/// doorbell and drop the locks of its post and poll paths (mlx5 does). Nothing checks the
/// promise: two threads posting to such a QP at once corrupt its queue. Use one thread domain
/// per thread that drives RDMA.
///
/// Many devices (rxe among them) have no thread domains: the constructor then throws
/// `not_supported_error`, and the program goes on with an ordinary `protection_domain`, whose
/// resources stay locked and thread-safe.
/// Thread-safety: allocating and deallocating are thread-safe; moving is not.
/// @see ibv_alloc_td(3)
class thread_domain {
public:
    /// Allocates a thread domain on `ctx`.
    /// @throws not_supported_error naming ibv_alloc_td and the device when the provider has no
    ///         thread domains (EOPNOTSUPP); sys_error when ibv_alloc_td(3) fails otherwise;
    ///         std::bad_alloc.
    explicit thread_domain(rdmacxx::context& ctx)
        : context_(ctx.anchor_cell()), handle_(allocate(ctx)), anchor_(this) {}
    /// Takes over `other`'s thread domain and the parent domains made with it (they follow it
    /// here); `other` is left empty.
    thread_domain(thread_domain&& other) noexcept
        : context_(std::move(other.context_)), handle_(std::move(other.handle_)),
          anchor_(std::move(other.anchor_), this) {}
    /// Deallocates the thread domain held, as the destructor does, then takes over `other`'s;
    /// self-move is a no-op.
    thread_domain& operator=(thread_domain&& other) noexcept {
        if (this != &other) {
            context_ = other.context_;
            handle_ = std::move(other.handle_);
            anchor_.take(std::move(other.anchor_), this);
        }
        return *this;
    }
    thread_domain(thread_domain const&) = delete;
    thread_domain& operator=(thread_domain const&) = delete;
    /// Deallocates the thread domain (ibv_dealloc_td(3)).
    ~thread_domain() = default;

    /// The context this thread domain belongs to, wherever it has moved to.
    /// @throws orphaned_error when the context was destroyed.
    [[nodiscard]] rdmacxx::context& context() const { return context_.get("thread domain", "context"); }
    /// The verbs handle; null in a moved-from thread domain.
    [[nodiscard]] ibv_td* native_handle() const noexcept { return handle_.get(); }

    /// @cond
    // The stable cell through which the parent domains made with it find it.
    [[nodiscard]] detail::link<thread_domain> anchor_cell() const noexcept { return anchor_.cell(); }
    /// @endcond

private:
    static ibv_td* allocate(rdmacxx::context& ctx) {
        ibv_td_init_attr attr{};
        ibv_td* const td = ::ibv_alloc_td(ctx.native_handle(), &attr);
        if (td == nullptr) [[unlikely]] {
            int const err = errno;
            detail::throw_verb(err != 0 ? err : EIO, "ibv_alloc_td",
                               "on " + std::string{ctx.name()} + ": allocating a thread domain");
        }
        return td;
    }
    struct deleter {
        void operator()(ibv_td* p) const noexcept { (void)::ibv_dealloc_td(p); }
    };
    detail::link<rdmacxx::context> context_;
    std::unique_ptr<ibv_td, deleter> handle_;
    detail::anchor<thread_domain> anchor_; // after handle_: the thread domain is freed when it throws
};

} // namespace v0
} // namespace rdmacxx
