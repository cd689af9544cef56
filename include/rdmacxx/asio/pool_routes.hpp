#pragma once
/// @file
/// Internals of the Asio adapter: `pool_routes`, the receive pools (rdmacxx/asio/receive_pool.hpp)
/// a `completion_dispatcher` routes completions to, each named by a serial that its receives'
/// `wr_id` carries. Internal to rdmacxx/asio/dispatcher.hpp.

#include "rdmacxx/ownership.hpp"
#include "rdmacxx/work_completion.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace io {

class receive_pool_base;

namespace detail {

/// The receive pools a dispatcher routes to, by serial. Serials are unique in the process (a CQ
/// may move between dispatchers with a pool's receives still posted) and never 0.
/// Thread-safety: the dispatcher's (the serials' counter is atomic).
class pool_routes {
public:
    /// Hands a completion to its pool's slot `slot`; false when the pool does not take it.
    using deliver_fn = bool (*)(receive_pool_base&, std::uint32_t slot, work_completion const&);

    /// Routes the completions tagged with the returned serial to `to(pool, slot, wc)`.
    /// @throws std::bad_alloc
    std::uint32_t add(rdmacxx::detail::link<receive_pool_base> pool, deliver_fn to) {
        static std::atomic<std::uint32_t> serials{0};
        std::uint32_t serial = serials.fetch_add(1, std::memory_order_relaxed) + 1;
        if (serial == 0) serial = serials.fetch_add(1, std::memory_order_relaxed) + 1;
        routes_.push_back({serial, std::move(pool), to});
        return serial;
    }
    /// Routes nothing more to the pool of `serial`.
    void remove(std::uint32_t serial) noexcept {
        for (std::size_t i = 0; i < routes_.size(); ++i)
            if (routes_[i].serial == serial) {
                routes_.erase(routes_.begin() + static_cast<std::ptrdiff_t>(i));
                return;
            }
    }
    /// Hands `wc` to slot `slot` of the pool of `serial`; false when there is no such pool (or it
    /// is gone, or refuses it): a stray.
    [[nodiscard]] bool deliver(std::uint32_t serial, std::uint32_t slot, work_completion const& wc) const {
        for (route const& r : routes_)
            if (r.serial == serial) {
                receive_pool_base* const pool = r.pool.get_if();
                return pool != nullptr && r.deliver(*pool, slot, wc);
            }
        return false;
    }

private:
    struct route {
        std::uint32_t serial;
        rdmacxx::detail::link<receive_pool_base> pool;
        deliver_fn deliver;
    };
    std::vector<route> routes_;
};

} // namespace detail
} // namespace io
} // namespace v0
} // namespace rdmacxx
