#pragma once
/// @file
/// `anchor`: the stable address of a parent object (context, protection domain, CQ) that may
/// move after its children exist.

#include <memory>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The stable address of a movable object `T` (a context, a protection domain, a CQ): a heap
/// cell that holds the address of the object owning it now. The owner re-points the cell when
/// it moves; the objects made from it keep the cell (`T* const*`) and so always find their
/// parent, wherever it has moved to. Empty in a moved-from owner.
template <class T>
class anchor {
public:
    /// An anchor for `self`.
    /// @throws std::bad_alloc
    explicit anchor(T* self) : cell_(std::make_unique<T*>(self)) {}
    /// Takes `other`'s cell and points it at `self`, the owner `other`'s has moved to.
    anchor(anchor&& other, T* self) noexcept : cell_(std::move(other.cell_)) { repoint(self); }
    anchor(anchor const&) = delete;
    anchor& operator=(anchor const&) = delete;
    anchor& operator=(anchor&&) = delete;
    ~anchor() = default;

    /// Drops this cell and takes `other`'s, pointing it at `self` (not for self-moves).
    void take(anchor&& other, T* self) noexcept {
        cell_ = std::move(other.cell_);
        repoint(self);
    }
    /// The cell: `**cell()` is the owner, wherever it is now. Null in a moved-from owner.
    [[nodiscard]] T* const* cell() const noexcept { return cell_.get(); }

private:
    void repoint(T* self) noexcept {
        if (cell_) *cell_ = self;
    }
    std::unique_ptr<T*> cell_;
};

} // namespace detail
} // namespace v0
} // namespace rdmacxx
