#pragma once
/// @file
/// The process-wide count of `checked<C>` requests in flight per memory region (see checked.hpp),
/// which a memory region asks before it is deregistered. Internals.

#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/detail/verbs.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <unordered_map>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The process-wide count of requests in flight per memory region, keyed by device context and
/// lkey. Thread-safety: internally locked.
class region_ledger {
public:
    static region_ledger& instance() noexcept {
        static region_ledger ledger;
        return ledger;
    }

    /// Answers memory_region's question through `region_in_flight_hook`, installed by the first
    /// `acquire` (memory_region looks no further before).
    static std::uint64_t count_of(ibv_context const* ctx, std::uint32_t lkey) noexcept {
        return instance().count(ctx, lkey);
    }

    void acquire(ibv_context const* ctx, std::span<std::uint32_t const> lkeys) {
        region_in_flight_hook.store(&count_of, std::memory_order_release);
        std::lock_guard const lock(mutex_);
        for (std::uint32_t const lkey : lkeys)
            ++counts_[key{ctx, lkey}];
    }

    void release(ibv_context const* ctx, std::span<std::uint32_t const> lkeys) noexcept {
        std::lock_guard const lock(mutex_);
        for (std::uint32_t const lkey : lkeys)
            if (auto it = counts_.find(key{ctx, lkey}); it != counts_.end() && --it->second == 0) counts_.erase(it);
    }

    [[nodiscard]] std::uint64_t count(ibv_context const* ctx, std::uint32_t lkey) const noexcept {
        std::lock_guard const lock(mutex_);
        auto const it = counts_.find(key{ctx, lkey});
        return it == counts_.end() ? 0 : it->second;
    }

private:
    struct key {
        ibv_context const* ctx;
        std::uint32_t lkey;
        friend bool operator==(key const&, key const&) = default;
    };
    struct key_hash {
        std::size_t operator()(key const& k) const noexcept {
            return std::hash<void const*>{}(k.ctx) ^ (std::hash<std::uint32_t>{}(k.lkey) * 0x9e3779b97f4a7c15ULL);
        }
    };
    mutable std::mutex mutex_;
    std::unordered_map<key, std::uint64_t, key_hash> counts_;
};

} // namespace detail
} // namespace v0
} // namespace rdmacxx
