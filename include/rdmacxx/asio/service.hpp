#pragma once
/// @file
/// The Asio adapter's service: one `completion_dispatcher` per completion channel per
/// execution context (an `asio::io_context`), made on first use and owned by the context, as
/// Asio's own I/O objects keep their state in a service of their context.

#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/cq.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// The dispatchers of one execution context, one per completion channel: `dispatcher_for`
/// finds or makes the one of a channel. They live as long as the context, and go in Asio's
/// order when it is destroyed: `shutdown()` destroys them, and with them the handlers of
/// their pending operations, without calling them (a QP or CQ destroyed afterwards finds its
/// dispatcher gone and tells nobody). A dispatcher whose channel was destroyed is dropped at
/// the next lookup. Thread-safety: as the dispatchers', the context's own thread only.
/// @see asio::use_service, asio::execution_context::service
class dispatcher_service final : public net::execution_context::service {
public:
    /// The service's identity in its context (Asio's `use_service`).
    static inline net::execution_context::id id; // NOLINT(readability-identifier-naming): Asio's name

    /// The service of `ctx` (made by `use_service`).
    explicit dispatcher_service(net::execution_context& ctx) : net::execution_context::service(ctx) {}

    /// The dispatcher of `channel` in this context: the one made before, or a new one on `ex`
    /// with `opt` (which a dispatcher made before keeps).
    /// @throws what `completion_dispatcher`'s constructor throws; std::bad_alloc
    completion_dispatcher& dispatcher_for(completion_dispatcher::executor_type const& ex, completion_channel& channel,
                                          dispatcher_options const& opt) {
        // The gone channels' dispatchers leave the list before they are destroyed (a handler they
        // destroy may look a dispatcher up).
        auto const alive = std::partition(entries_.begin(), entries_.end(),
                                          [](entry const& e) { return follow(e.channel.get()) != nullptr; });
        std::vector<entry> gone(std::make_move_iterator(alive), std::make_move_iterator(entries_.end()));
        entries_.erase(alive, entries_.end());
        gone.clear();
        for (entry const& e : entries_)
            if (follow(e.channel.get()) == &channel) return *e.dispatcher;
        auto d = std::make_unique<completion_dispatcher>(ex, channel, opt);
        entries_.push_back({channel.anchor_cell().erased(), std::move(d)});
        return *entries_.back().dispatcher;
    }

    /// Dispatchers it holds.
    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

private:
    // Destroys every dispatcher, before the context's handlers are destroyed.
    void shutdown() override {
        std::vector<entry> gone = std::move(entries_); // out of the list first, as above
        entries_.clear();
        gone.clear();
    }

    static completion_channel* follow(void const* cell) noexcept {
        return rdmacxx::detail::link<completion_channel>::follow(cell);
    }

    struct entry {
        std::shared_ptr<void const> channel; // the channel's cell: null once it is destroyed
        std::unique_ptr<completion_dispatcher> dispatcher;
    };
    std::vector<entry> entries_;
};

/// The dispatcher of `channel` on `ex`'s execution context (`dispatcher_service`): made on first
/// use with `opt` and owned by the context; the same one for every later call with that
/// channel. Nothing to keep alive, nothing to destroy: the context's destruction ends it.
/// `auto& d = rxa::dispatcher_for(io.get_executor(), channel); d.add(cq);`
/// @throws as `dispatcher_service::dispatcher_for`
template <class Executor>
completion_dispatcher& dispatcher_for(Executor const& ex, completion_channel& channel,
                                      dispatcher_options const& opt = {}) {
    net::execution_context& ctx = net::query(ex, net::execution::context);
    return net::use_service<dispatcher_service>(ctx).dispatcher_for(completion_dispatcher::executor_type{ex}, channel,
                                                                    opt);
}

} // namespace io
} // namespace v0
} // namespace rdmacxx
