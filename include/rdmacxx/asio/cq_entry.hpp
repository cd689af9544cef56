#pragma once
/// @file
/// Internals of the Asio adapter: `cq_entry`, a CQ as a `completion_dispatcher` serves it,
/// whatever its completion strategy.

#include "rdmacxx/cq.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/work_completion.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace io::detail {

/// A CQ a dispatcher serves: its cell (`link::erased`, followed when the CQ moves), its handle,
/// its poll, arm and event count through the CQ's own strategy (type-erased), and how it is
/// served. Thread-safety: the dispatcher's.
struct cq_entry {
    std::shared_ptr<void const> cq; ///< the CQ's cell
    ibv_cq* native;
    std::size_t (*poll)(void const*, std::span<work_completion>);
    void (*arm)(void const*);
    void (*note)(void const*);
    bool batch;                     ///< served by `async_wait` (else routed by `wr_id`)
    bool armed;                     ///< routed: its next completion raises an event (reset when read)
    std::uint32_t waiter;           ///< batch: the slot of the pending `async_wait`, or `no_waiter`
    std::span<work_completion> out; ///< batch: where that wait's completions go

    static constexpr std::uint32_t no_waiter = ~std::uint32_t{0};

    /// The entry of `cq`, armed already, served as a batch CQ or routed.
    /// @throws std::bad_alloc
    template <class C>
    [[nodiscard]] static cq_entry of(rdmacxx::completion_queue<C>& cq, bool batch) {
        return {cq.anchor_cell().erased(),
                cq.native_handle(),
                &poll_cq<C>,
                &arm_cq<C>,
                &note_cq<C>,
                batch,
                true,
                no_waiter,
                {}};
    }

    /// The CQ of a cell, wherever it has moved to.
    /// @throws orphaned_error when the CQ is gone.
    template <class C>
    static rdmacxx::completion_queue<C>& entry_cq(void const* cell) {
        rdmacxx::completion_queue<C>* const cq = rdmacxx::detail::link<rdmacxx::completion_queue<C>>::follow(cell);
        if (cq == nullptr) [[unlikely]]
            rdmacxx::detail::throw_orphaned("completion dispatcher", "CQ");
        return *cq;
    }

private:
    template <class C>
    static std::size_t poll_cq(void const* cq, std::span<work_completion> out) {
        return entry_cq<C>(cq).poll(out);
    }
    template <class C>
    static void arm_cq(void const* cq) {
        entry_cq<C>(cq).arm();
    }
    template <class C>
    static void note_cq(void const* cq) {
        entry_cq<C>(cq).note_event();
    }
};

/// The CQs a dispatcher serves, in the order they were added, and where the next poll of the
/// routed ones starts (round robin, so that a busy CQ does not starve the others).
/// Thread-safety: the dispatcher's.
class cq_set {
public:
    /// The entry of `native`, or null.
    [[nodiscard]] cq_entry* find(ibv_cq* native) noexcept {
        for (auto& e : entries_)
            if (e.native == native) return &e;
        return nullptr;
    }
    /// Serves `e` too. @throws std::bad_alloc
    void add(cq_entry e) { entries_.push_back(std::move(e)); }
    /// Serves `*e` (from `find`) no more.
    void erase(cq_entry* e) noexcept {
        entries_.erase(entries_.begin() + (e - entries_.data()));
        next_ = 0;
    }
    [[nodiscard]] cq_entry* begin() noexcept { return entries_.data(); }
    [[nodiscard]] cq_entry* end() noexcept { return entries_.data() + entries_.size(); }

    /// Polls the routed CQs into `out`, round robin from where the last poll left off; when all
    /// are empty and `arm`, arms those not armed and polls each once more (a completion that
    /// lands between the last poll and the arm is not missed). How many it took.
    /// @throws what a CQ's poll or arm throws (orphaned_error, sys_error)
    std::size_t poll_routed(std::span<work_completion> out, bool arm) {
        std::size_t const count = entries_.size();
        for (int pass = 0; pass < (arm ? 2 : 1); ++pass) {
            for (std::size_t k = 0; k < count; ++k) {
                cq_entry& e = entries_[(next_ + k) % count];
                if (e.batch) continue;
                if (pass == 1) {
                    if (e.armed) continue;
                    e.arm(e.cq.get());
                    e.armed = true;
                }
                if (std::size_t const n = e.poll(e.cq.get(), out); n != 0) {
                    next_ = (next_ + k + 1) % count;
                    return n;
                }
            }
        }
        return 0;
    }

private:
    std::vector<cq_entry> entries_;
    std::size_t next_ = 0; // the routed CQ the next poll starts with
};

} // namespace io::detail
} // namespace v0
} // namespace rdmacxx
