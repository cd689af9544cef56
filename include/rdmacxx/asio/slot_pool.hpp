#pragma once
/// @file
/// Internals of the Asio adapter: `slot_pool`, the fixed pool of operation slots of a
/// `completion_dispatcher` — which slot is free, which operation is pending or cancelled, and
/// the tag (`wr_id`) that names a slot and its generation. Internal to rdmacxx/asio/dispatcher.hpp.

#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/op_slot.hpp"
#include "rdmacxx/error.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace io::detail {

/// A fixed pool of operation slots, allocated once: a free list (LIFO), and for each slot its
/// state, its handler and its generation, which changes each time the slot is freed so that a
/// late completion naming an older generation is told apart (`tag`, `routed`). Counts the
/// pending operations, cancelled ones included, and the cancelled ones. Thread-safety: the
/// dispatcher's.
class slot_pool {
public:
    /// No slot.
    static constexpr std::uint32_t npos = ~std::uint32_t{0};

    /// `n` free slots.
    /// @throws argument_error when `n` is 0 or over 2^31 (an index must leave the tag's bit 31
    ///         to receive pools); std::bad_alloc
    explicit slot_pool(std::uint32_t n) : slots_(check_size(n)) {
        for (std::uint32_t i = 0; i < n; ++i)
            slots_[i].next_free = i + 1;
    }
    slot_pool(slot_pool&& other) noexcept
        : slots_(std::move(other.slots_)), free_(other.free_), pending_(std::exchange(other.pending_, 0U)),
          cancelled_(std::exchange(other.cancelled_, 0U)) {}
    slot_pool(slot_pool const&) = delete;
    slot_pool& operator=(slot_pool const&) = delete;
    slot_pool& operator=(slot_pool&&) = delete;
    ~slot_pool() = default;

    /// Slots in the pool.
    [[nodiscard]] std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
    /// Slot `i`.
    [[nodiscard]] op_slot& operator[](std::uint32_t i) noexcept { return slots_[i]; }
    [[nodiscard]] op_slot const& operator[](std::uint32_t i) const noexcept { return slots_[i]; }
    /// Operations pending, cancelled ones included.
    [[nodiscard]] std::size_t pending() const noexcept { return pending_; }
    /// Cancelled operations whose completion has not been reaped.
    [[nodiscard]] std::size_t cancelled() const noexcept { return cancelled_; }
    /// Whether slot `i` holds an operation (pending or cancelled).
    [[nodiscard]] bool taken(std::uint32_t i) const noexcept { return slots_[i].st != op_slot::state::free; }

    /// The `wr_id` that names slot `i` as it is now: its generation above, its index below.
    [[nodiscard]] std::uint64_t tag(std::uint32_t i) const noexcept {
        return (std::uint64_t{slots_[i].generation} << 32) | i;
    }
    /// Whether `tag` (as `tag(i)` made it) names a taken slot.
    [[nodiscard]] bool names_taken(std::uint64_t tag) const noexcept {
        auto const i = static_cast<std::uint32_t>(tag & 0xffffffffU);
        return i < slots_.size() && slots_[i].generation == static_cast<std::uint32_t>(tag >> 32) && taken(i);
    }
    /// Whether slot `i` at `generation` holds a routed operation (not a batch wait).
    [[nodiscard]] bool routed(std::uint32_t i, std::uint32_t generation) const noexcept {
        return i < slots_.size() && slots_[i].generation == generation && taken(i) && !slots_[i].batch;
    }

    /// Takes a slot for `handler` (moved in, with the work it keeps on its associated executor,
    /// `ex` by default), calling `hook(cancellation_slot, index, generation)` first when the
    /// handler has a connected cancellation slot; npos when none is free (the handler is left as
    /// it was). `qp` (or `srq`) and `cq` name where it was posted and where its completion arrives.
    /// Exception-safe: when the hook or storing the handler throws, no slot is taken and the
    /// cancellation slot is left empty. A handler over `op_storage_bytes` uses its associated
    /// allocator.
    template <class Completer, class Executor, class Handler, class Hook>
    std::uint32_t acquire(Handler& handler, Executor const& ex, bool batch, ibv_qp* qp, ibv_cq* cq, ibv_srq* srq,
                          Hook&& hook) {
        if (free_ == slots_.size()) [[unlikely]]
            return npos;
        std::uint32_t const index = free_;
        op_slot& s = slots_[index];
        auto cs = net::get_associated_cancellation_slot(handler);
        // First, while nothing is taken: it may allocate, and throw. A cancellation before the slot
        // is pending finds it free and does nothing.
        if (cs.is_connected()) hook(cs, index, s.generation);
        using holder = op_holder<Handler, Executor>;
        try {
            if constexpr (sizeof(holder) <= op_storage_bytes && alignof(holder) <= alignof(std::max_align_t)) {
                ::new (static_cast<void*>(s.storage)) holder(std::move(handler), ex);
            } else {
                using alloc_t =
                    typename std::allocator_traits<net::associated_allocator_t<Handler>>::template rebind_alloc<holder>;
                alloc_t alloc{net::get_associated_allocator(handler)};
                holder* p = std::allocator_traits<alloc_t>::allocate(alloc, 1);
                try {
                    std::allocator_traits<alloc_t>::construct(alloc, p, std::move(handler), ex);
                } catch (...) {
                    std::allocator_traits<alloc_t>::deallocate(alloc, p, 1);
                    throw;
                }
                ::new (static_cast<void*>(s.storage)) holder*(p);
            }
        } catch (...) {
            if (cs.is_connected()) cs.clear();
            throw;
        }
        free_ = s.next_free;
        s.invoke = &invoke_slot<Handler, Executor, Completer>;
        s.st = op_slot::state::pending;
        s.batch = batch;
        s.qp = qp;
        s.cq = cq;
        s.srq = srq;
        ++pending_;
        if (cs.is_connected()) s.cancel = cs;
        return index;
    }

    /// Marks the pending operation of slot `i` cancelled (its completion not reaped yet); its
    /// cancellation slot is left to its owner.
    void mark_cancelled(std::uint32_t i) noexcept {
        slots_[i].cancel = {};
        slots_[i].st = op_slot::state::cancelled;
        ++cancelled_;
    }

    /// Frees slot `i`, taken, and returns how to complete its operation: the handler is still in
    /// the slot's storage, to be moved out by that function before anything can take the slot
    /// again. Its cancellation slot is cleared.
    [[nodiscard]] invoke_fn release(std::uint32_t i) noexcept {
        op_slot& s = slots_[i];
        if (s.cancel.is_connected()) s.cancel.clear();
        s.cancel = {};
        if (s.st == op_slot::state::cancelled) --cancelled_;
        --pending_;
        s.st = op_slot::state::free;
        s.qp = nullptr;
        s.cq = nullptr;
        s.srq = nullptr;
        if (++s.generation == 0) s.generation = 1; // a tag never has generation 0
        s.next_free = free_;
        free_ = i;
        return s.invoke;
    }

private:
    static std::uint32_t check_size(std::uint32_t n) {
        if (n == 0 || n > (1U << 31)) [[unlikely]]
            rdmacxx::detail::throw_argument("a completion dispatcher holds 1 to 2^31 operations, not " +
                                            std::to_string(n));
        return n;
    }

    std::vector<op_slot> slots_;
    std::uint32_t free_ = 0;
    std::size_t pending_ = 0;
    std::size_t cancelled_ = 0;
};

} // namespace io::detail
} // namespace v0
} // namespace rdmacxx
