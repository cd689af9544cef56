#pragma once
/// @file
/// The Asio adapter's post pool: fixed blocks from which the completion dispatcher allocates the
/// handlers it posts (each operation's completion, its own polling sweeps), so that posting takes
/// no heap memory in steady state. Internal to rdmacxx/asio/dispatcher.hpp.

#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/thread_rule.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace io::detail {

/// A fixed number of blocks of `block_bytes` bytes, handed out and taken back in any order
/// (a free list), for handlers posted to one `io_context`, its owner. Made once, never grown.
/// Used only from the one thread that runs its owner (`post_from` posts handlers bound to any
/// other context as Asio does). With the thread check (thread_rule.hpp) its free list is also
/// locked: a second thread is refused when its handler starts, after Asio has given that
/// handler's block back, and the list stays whole until then.
class post_pool {
public:
    /// Bytes of one block: an `io_context` operation around a posted handler and its bound
    /// arguments (a work completion, an error) fits; a larger one goes to the heap.
    static constexpr std::size_t block_bytes = 512;

    /// `blocks` blocks (at least 1), allocated now, for handlers run by `owner`.
    post_pool(std::size_t blocks, net::execution_context const* owner)
        : arena_(std::make_unique<block[]>(blocks)), count_(blocks), owner_(owner) {
        free_.reserve(blocks);
        for (std::size_t i = blocks; i-- > 0;)
            free_.push_back(&arena_[i]);
    }
    post_pool(post_pool const&) = delete;
    post_pool& operator=(post_pool const&) = delete;

    /// A block for `bytes` bytes, or null when `bytes` is over `block_bytes` or none is free.
    [[nodiscard]] void* take(std::size_t bytes) noexcept {
        [[maybe_unused]] list_lock const lock{busy_};
        if (bytes > block_bytes || free_.empty()) return nullptr;
        void* p = free_.back();
        free_.pop_back();
        return p;
    }
    /// Takes `p` back when it is one of the blocks; false (nothing done) otherwise.
    bool give(void* p) noexcept {
        auto const at = reinterpret_cast<std::uintptr_t>(p);
        auto const first = reinterpret_cast<std::uintptr_t>(arena_.get());
        if (at < first || at >= first + count_ * sizeof(block)) return false;
        [[maybe_unused]] list_lock const lock{busy_};
        free_.push_back(p);
        return true;
    }
    /// Blocks free now.
    [[nodiscard]] std::size_t available() const noexcept { return free_.size(); }
    /// The execution context whose thread alone takes and gives blocks.
    [[nodiscard]] net::execution_context const* owner() const noexcept { return owner_; }

private:
    struct alignas(std::max_align_t) block {
        std::byte bytes[block_bytes];
    };
    std::unique_ptr<block[]> arena_;
    std::size_t count_;
    net::execution_context const* owner_;
    std::vector<void*> free_;
    // Holds the free list for one take or give, with the thread check; does nothing without.
    // (The flag is there either way: the layout does not depend on NDEBUG.)
    struct list_lock {
        explicit list_lock([[maybe_unused]] std::atomic_flag& flag) noexcept
#if RDMACXX_ASIO_THREAD_CHECK
            : held(&flag) {
            while (held->test_and_set(std::memory_order_acquire)) {}
        }
#else
        {
        }
#endif
        list_lock(list_lock const&) = delete;
        list_lock& operator=(list_lock const&) = delete;
        ~list_lock() {
            if (held != nullptr) held->clear(std::memory_order_release);
        }
        std::atomic_flag* held = nullptr;
    };
    std::atomic_flag busy_{};
};

/// An allocator over a shared `post_pool`: a block when the request fits and one is free,
/// the heap otherwise. Each copy shares the pool, so a handler still queued in an `io_context`
/// keeps it alive after the dispatcher has gone.
template <class T>
struct pool_allocator {
    using value_type = T;

    explicit pool_allocator(std::shared_ptr<post_pool> p) noexcept : pool(std::move(p)) {}
    /// Copies (a move copies too: a moved-from allocator still equals its copy, as allocators must).
    pool_allocator(pool_allocator const&) noexcept = default;
    template <class U>
    pool_allocator(pool_allocator<U> const& other) noexcept
        : pool(other.pool) {} // NOLINT: converting, as allocators are

    T* allocate(std::size_t n) {
        if constexpr (alignof(T) <= alignof(std::max_align_t))
            if (void* p = pool->take(n * sizeof(T))) return static_cast<T*>(p);
        return std::allocator<T>{}.allocate(n);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (!pool->give(p)) std::allocator<T>{}.deallocate(p, n);
    }
    template <class U>
    friend bool operator==(pool_allocator const& a, pool_allocator<U> const& b) noexcept {
        return a.pool == b.pool;
    }

    std::shared_ptr<post_pool> pool;
};

/// Calls `on_io(io)` with the `io_context` executor that `ex` is or holds (in an
/// `asio::any_io_executor`; untracked, or tracking outstanding work as a coroutine's is), or
/// `other()` when it is neither (a strand, a thread pool's, `use_future`'s).
template <class Executor, class OnIo, class Other>
void with_io_executor(Executor const& ex, OnIo&& on_io, Other&& other) {
    using untracked = net::io_context::basic_executor_type<std::allocator<void>, 0>;
    using tracked = net::io_context::basic_executor_type<std::allocator<void>, 4>;
    if constexpr (std::is_same_v<Executor, untracked> || std::is_same_v<Executor, tracked>) {
        on_io(ex);
    } else if constexpr (std::is_same_v<Executor, net::any_io_executor>) {
        if (auto const* io = ex.template target<untracked>())
            on_io(*io);
        else if (auto const* tio = ex.template target<tracked>())
            on_io(*tio);
        else
            other();
    } else {
        other();
    }
}

/// Posts `handler` to `io`, an executor of the pool's owner: the queued operation is allocated
/// from `pool`, and the handler runs bound to `io` itself (no type-erased hop, which would allocate).
template <class Handler>
void post_to_owner(std::shared_ptr<post_pool> const& pool, net::io_context::executor_type const& io,
                   Handler&& handler) {
    net::post(io,
              net::bind_executor(io, net::bind_allocator(pool_allocator<void>{pool}, std::forward<Handler>(handler))));
}

/// The executor of the pool's owner that `ex` is or holds (untracked), or null when it is none
/// (another `io_context`'s, a strand, a thread pool's): where `post_to_owner` may post.
template <class Executor>
[[nodiscard]] std::optional<net::io_context::executor_type> owner_executor(std::shared_ptr<post_pool> const& pool,
                                                                           Executor const& ex) {
    std::optional<net::io_context::executor_type> found;
    with_io_executor(
        ex,
        [&](auto const& io) {
            if (static_cast<net::execution_context const*>(&io.context()) == pool->owner())
                found.emplace(net::prefer(io, net::execution::outstanding_work.untracked));
        },
        [] {});
    return found;
}

/// Posts `handler` to `ex`. On an executor of the pool's owner (an `io_context`'s executor, held
/// directly or in an `asio::any_io_executor`, untracked or tracking outstanding work, as a
/// coroutine's is) the queued operation is allocated from `pool`, and the handler runs bound to
/// that executor itself (the same `io_context`; no type-erased hop, which would allocate); on
/// any other executor, another `io_context`'s included, it is posted as Asio does (which may
/// allocate), so that the pool is only ever used from its owner's thread.
template <class Executor, class Handler>
void post_from(std::shared_ptr<post_pool> const& pool, Executor const& ex, Handler&& handler) {
    with_io_executor(
        ex,
        [&](auto const& io) {
            if (static_cast<net::execution_context const*>(&io.context()) != pool->owner())
                net::post(io, std::forward<Handler>(handler));
            else
                post_to_owner(pool, net::prefer(io, net::execution::outstanding_work.untracked),
                              std::forward<Handler>(handler));
        },
        [&] { net::post(ex, std::forward<Handler>(handler)); });
}

/// Runs `handler` as `net::dispatch(ex, handler)` does: inline when `ex` is running in this
/// thread, posted otherwise. On an executor of the pool's owner (held directly or in an
/// `asio::any_io_executor`) running in this thread it is called directly (no type-erased hop,
/// which would allocate); posted, it goes through `post_from`. Any other executor (a strand,
/// another `io_context`) gets `net::dispatch`.
template <class Executor, class Handler>
void dispatch_from(std::shared_ptr<post_pool> const& pool, Executor const& ex, Handler&& handler) {
    with_io_executor(
        ex,
        [&](auto const& io) {
            if (static_cast<net::execution_context const*>(&io.context()) != pool->owner() ||
                !io.running_in_this_thread())
                post_from(pool, io, std::forward<Handler>(handler));
            else
                std::forward<Handler>(handler)();
        },
        [&] { net::dispatch(ex, std::forward<Handler>(handler)); });
}

} // namespace io::detail
} // namespace v0
} // namespace rdmacxx
