#pragma once
/// @file
/// `anchor` and `link`: how every object reaches the object it was made from (its parent: a
/// context, protection domain, thread domain, CQ, completion channel, SRQ or queue pair) when
/// the parent may move or be destroyed after its children exist. See docs/ownership.md. The
/// cells are internals (namespace `detail`); the model is the library's, so the header sits
/// beside the objects that use it, above `error.hpp`, whose `orphaned_error` it throws.

#include "rdmacxx/error.hpp"

#include <memory>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// Throws `orphaned_error`: a `child` used after the `parent` it was made from was destroyed.
[[noreturn]] RDMACXX_COLD inline void throw_orphaned(char const* child, char const* parent) {
    throw orphaned_error(std::string{"the "} + parent + " this " + child +
                         " was made from has been destroyed (or moved into and so replaced)");
}

/// A child's way to its parent `T`: shares the parent's cell (see `anchor`), which holds the
/// parent's current address, or null once the parent is destroyed. Copyable; empty in a
/// moved-from child. Reading it costs one load more than a plain pointer and a test; it is read
/// by the accessors (`context()`, `pd()`, …), by `selective_signaling` once per request and by
/// the Asio dispatcher once per poll of a CQ, never by a QP's own post or a CQ's own poll.
template <class T>
class link {
public:
    /// An empty link (a moved-from child's).
    link() noexcept = default;
    /// The parent, wherever it has moved to.
    /// @throws orphaned_error naming `child` and `parent` when the parent was destroyed (or the
    ///         link is empty).
    [[nodiscard]] T& get(char const* child, char const* parent) const {
        T* const p = cell_ ? *cell_ : nullptr;
        if (p == nullptr) [[unlikely]]
            throw_orphaned(child, parent);
        return *p;
    }
    /// For a parent that may not exist: null when the link is empty (the child has no such
    /// parent), the parent wherever it has moved to otherwise.
    /// @throws orphaned_error naming `child` and `parent` when the parent was destroyed.
    [[nodiscard]] T* get_optional(char const* child, char const* parent) const {
        return cell_ ? &get(child, parent) : nullptr;
    }
    /// The parent, or null when it was destroyed (or the link is empty).
    [[nodiscard]] T* get_if() const noexcept { return cell_ ? *cell_ : nullptr; }

    /// The cell with its type erased, for a child that keeps links to parents of several types
    /// (the Asio dispatcher's CQs): it keeps the cell alive; read it back with `follow`.
    [[nodiscard]] std::shared_ptr<void const> erased() const noexcept { return cell_; }
    /// The parent a cell from `erased()` of a `link<T>` holds now, or null when it was destroyed.
    [[nodiscard]] static T* follow(void const* erased_cell) noexcept { return *static_cast<T* const*>(erased_cell); }

private:
    template <class>
    friend class anchor;
    explicit link(std::shared_ptr<T*> cell) noexcept : cell_(std::move(cell)) {}
    std::shared_ptr<T* const> cell_;
};

/// The stable address of a movable object `T` (a context, a protection domain, a CQ, …): a heap
/// cell, shared with the children made from it, that holds the address of the object owning it
/// now. The owner re-points the cell when it moves and nulls it when it is destroyed (or
/// replaced by a move assignment), so a child always finds its parent wherever it has moved to,
/// and finds out (`orphaned_error`) instead of reading freed memory when its parent is gone.
/// Empty in a moved-from owner.
template <class T>
class anchor {
public:
    /// An anchor for `self`.
    /// @throws std::bad_alloc
    explicit anchor(T* self) : cell_(std::make_shared<T*>(self)) {}
    /// Takes `other`'s cell and points it at `self`, the owner `other`'s has moved to.
    anchor(anchor&& other, T* self) noexcept : cell_(std::move(other.cell_)) { repoint(self); }
    anchor(anchor const&) = delete;
    anchor& operator=(anchor const&) = delete;
    anchor& operator=(anchor&&) = delete;
    /// The owner is gone: its children's links now read null.
    ~anchor() { repoint(nullptr); }

    /// Drops this cell (its children's links then read null: their parent has been replaced) and
    /// takes `other`'s, pointing it at `self` (not for self-moves).
    void take(anchor&& other, T* self) noexcept {
        repoint(nullptr);
        cell_ = std::move(other.cell_);
        repoint(self);
    }
    /// Nulls and drops the cell now, before the owner's destruction (its children's links read
    /// null from here on).
    void orphan() noexcept {
        repoint(nullptr);
        cell_.reset();
    }
    /// A link to the owner for a child. Empty in a moved-from owner.
    [[nodiscard]] link<T> cell() const noexcept { return link<T>{cell_}; }
    /// The cell's address, as `link::erased()` gives it, without taking a reference: to compare.
    [[nodiscard]] void const* identity() const noexcept { return cell_.get(); }

private:
    void repoint(T* self) noexcept {
        if (cell_) *cell_ = self;
    }
    std::shared_ptr<T*> cell_;
};

/// Who is told that an object (a queue pair, a CQ) is about to be destroyed, or replaced by a
/// move assignment: one watcher (the Asio dispatcher whose operations use it), reached through
/// the watcher's own cell, so that a watcher destroyed first is not called. Empty in a moved-from
/// object. Thread-safety: the object's.
class destruction_watch {
public:
    /// What the watcher is told: its cell (as `link::erased()` gave it) and the object's handle.
    using notify_fn = void (*)(void const* watcher_cell, void* handle) noexcept;

    destruction_watch() noexcept = default;
    destruction_watch(destruction_watch&& other) noexcept
        : cell_(std::move(other.cell_)), notify_(std::exchange(other.notify_, nullptr)) {}
    destruction_watch& operator=(destruction_watch&& other) noexcept {
        cell_ = std::move(other.cell_);
        notify_ = std::exchange(other.notify_, nullptr);
        return *this;
    }
    destruction_watch(destruction_watch const&) = delete;
    destruction_watch& operator=(destruction_watch const&) = delete;

    /// Makes `cell`'s owner the watcher, told through `notify` (the one before is forgotten).
    void set(std::shared_ptr<void const> cell, notify_fn notify) noexcept {
        cell_ = std::move(cell);
        notify_ = notify;
    }
    /// The watcher's cell, or null.
    [[nodiscard]] void const* watcher() const noexcept { return cell_.get(); }
    /// How the watcher is told, or null.
    [[nodiscard]] notify_fn notifier() const noexcept { return notify_; }
    /// Tells the watcher, once, that the object with `handle` goes now; forgets it.
    void fire(void* handle) noexcept {
        if (notify_ == nullptr) return;
        auto const cell = std::move(cell_);
        std::exchange(notify_, nullptr)(cell.get(), handle);
    }

private:
    std::shared_ptr<void const> cell_;
    notify_fn notify_ = nullptr;
};

} // namespace detail
} // namespace v0
} // namespace rdmacxx
