#pragma once
/// @file
/// The Asio adapter's operation slots: the type-erased handler of one pending operation, what it
/// completes with, and how a completion is bound to its handler and posted. Internal to
/// rdmacxx/asio/dispatcher.hpp.

#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/post_pool.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/work_completion.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

struct ibv_qp;
struct ibv_cq;
struct ibv_srq;

namespace rdmacxx {
inline namespace v0 {
namespace io::detail {

/// Bytes of a handler kept in an operation slot itself; a larger handler goes to its associated
/// allocator.
inline constexpr std::size_t op_storage_bytes = 192;

/// What an operation completes with.
struct op_result {
    error_code ec;           ///< empty on success (Asio's error code type, net.hpp)
    work_completion wc{};    ///< the completion (routed operations)
    std::size_t count = 0;   ///< completions taken (batch waits)
    std::exception_ptr ex{}; ///< the library's exception when there is one (a refused post)
    void* source = nullptr;  ///< the receive pool a message comes from (receive_pool::async_receive)
    std::uint32_t slot = 0;  ///< the pool's slot that holds the message
    /// The handler's cancellation slot while a message is on its way to it (receive_pool).
    net::cancellation_slot delivery{};
};

/// Where a dispatcher's completions go: the pool its posted handlers are allocated from, its
/// executor, and that executor's `io_context` executor when it is one of the pool's owner (held
/// directly or in an `asio::any_io_executor`; found once, when the dispatcher is made), so that a
/// handler on the dispatcher's own executor is run or posted without a type-erased lookup.
struct delivery {
    std::shared_ptr<post_pool> const& pool;
    net::any_io_executor const& ex;
    net::io_context::executor_type const* io; ///< null: the executor is no `io_context`'s of the pool's owner

    /// Whether a handler on the dispatcher's executor may run here and now (as `net::dispatch`
    /// would run it inline).
    [[nodiscard]] bool inline_here() const noexcept { return io != nullptr && io->running_in_this_thread(); }
    /// Posts `handler`, whose executor is the dispatcher's.
    template <class Handler>
    void post(Handler&& handler) const {
        if (io != nullptr)
            post_to_owner(pool, *io, std::forward<Handler>(handler));
        else
            post_from(pool, ex, std::forward<Handler>(handler));
    }
};

struct op_slot;
/// Moves the handler of slot `s` out, destroys the slot's copy and, when `r` is non-null,
/// completes it with `*r` (run inline when its executor runs in this thread, else posted; always
/// posted when `posted`).
using invoke_fn = void (*)(op_slot& s, op_result const* r, bool posted, delivery const& to);

/// One slot of the pool: the type-erased handler of one operation and its tag's generation.
struct op_slot {
    enum class state : std::uint8_t { free, pending, cancelled };
    invoke_fn invoke = nullptr;
    net::cancellation_slot cancel{};
    ibv_qp* qp = nullptr;   ///< the QP it posted to (null: an SRQ receive, a batch wait)
    ibv_cq* cq = nullptr;   ///< the CQ its completion arrives on (null: not known, an SRQ receive)
    ibv_srq* srq = nullptr; ///< the SRQ it posted a receive to (null: not an SRQ receive)
    std::uint32_t generation = 1;
    std::uint32_t next_free = 0;
    state st = state::free;
    bool batch = false;
    alignas(std::max_align_t) std::byte storage[op_storage_bytes];
};

/// A handler and the work it keeps on its executor while the operation is pending. The
/// dispatcher's own executor needs none: while an operation is pending the dispatcher has a
/// wait on its descriptor or a sweep queued, which keep its context's `run()` going. So a
/// handler whose executor is the dispatcher's, held in the same type (an `any_io_executor`:
/// `use_awaitable`'s, a plain callback's), keeps nothing (`work` empty; it completes through the
/// dispatcher's `delivery`); any other executor (a strand, another context, `use_future`'s) is
/// tracked.
template <class Handler, class Executor>
struct op_holder {
    using work_executor = net::associated_executor_t<Handler, Executor>;
    using tracked_executor = std::decay_t<decltype(net::prefer(std::declval<work_executor const&>(),
                                                               net::execution::outstanding_work.tracked))>;
    /// Whether the tracked executor has the executor's own type (an `any_io_executor`, a
    /// strand of one): then one member holds either, else a work guard.
    static constexpr bool one_type = std::is_same_v<tracked_executor, work_executor>;
    using work_type = std::conditional_t<one_type, work_executor, net::executor_work_guard<work_executor>>;

    Handler handler;
    std::optional<work_type> work; // empty: the handler's executor is the dispatcher's own

    op_holder(Handler&& h, Executor const& ex) : handler(std::move(h)) {
        work_executor w = net::get_associated_executor(handler, ex);
        if constexpr (std::is_same_v<work_executor, Executor>)
            if (w == ex) return;
        if constexpr (one_type)
            work.emplace(net::prefer(w, net::execution::outstanding_work.tracked));
        else
            work.emplace(std::move(w));
    }
};

/// A handler bound to its two arguments, moved into it when called. Its associated executor,
/// allocator and cancellation slot are the handler's (the `asio::associator` below).
template <class Handler, class First, class Second>
struct bound_handler {
    Handler handler;
    First first;
    Second second;
    void operator()() { std::move(handler)(std::move(first), std::move(second)); }
};

/// Binds an `op_result` to the handler as its arguments: `(io::error_code, T)`, or for an
/// `as_exception` handler `(std::exception_ptr, T)` with the library's exception (completion.hpp);
/// T is the work completion, or for a batch wait the number of completions taken. `call` calls
/// the handler with them at once.
template <bool Batch>
struct completer {
    template <class Handler>
    static auto bind(Handler&& h, op_result const& r) {
        auto second = value(r);
        using outcome = outcome_for<std::decay_t<Handler>>;
        auto first = outcome::first(r.ec, second, [&] { return r.ex; });
        return bound_handler<typename outcome::handler_type, typename outcome::first_type, decltype(second)>{
            outcome::unwrap(h), std::move(first), second};
    }
    template <class Handler>
    static void call(Handler& h, op_result const& r) {
        using outcome = outcome_for<std::decay_t<Handler>>;
        auto&& second = value(r);
        outcome::unwrap(h)(outcome::first(r.ec, second, [&] { return r.ex; }), second);
    }

private:
    static decltype(auto) value(op_result const& r) {
        if constexpr (Batch)
            return r.count;
        else
            return (r.wc);
    }
};

/// Completes `h` with `r` on the dispatcher's own executor: at once when it runs in this thread
/// and the completion need not be posted, posted otherwise.
template <class Completer, class Handler>
void complete_home(Handler& h, op_result const& r, bool posted, delivery const& to) {
    if constexpr (requires { Completer::call(h, r); }) {
        if (!posted && to.inline_here()) {
            Completer::call(h, r);
            return;
        }
    } else {
        if (!posted && to.inline_here()) {
            Completer::bind(std::move(h), r)();
            return;
        }
    }
    to.post(Completer::bind(std::move(h), r));
}

template <class Handler, class Executor, class Completer>
void invoke_slot(op_slot& s, op_result const* r, bool posted, delivery const& to) {
    using holder = op_holder<Handler, Executor>;
    constexpr bool in_place = sizeof(holder) <= op_storage_bytes && alignof(holder) <= alignof(std::max_align_t);
    holder* stored = nullptr;
    if constexpr (in_place)
        stored = std::launder(reinterpret_cast<holder*>(s.storage));
    else
        stored = *std::launder(reinterpret_cast<holder**>(s.storage));
    Handler h{std::move(stored->handler)};
    // The work is kept until the completion is queued: the io_context must not run out of work
    // (and stop) in between.
    std::optional<typename holder::work_type> work{std::move(stored->work)};
    if constexpr (in_place) {
        stored->~holder();
    } else {
        using alloc_t =
            typename std::allocator_traits<net::associated_allocator_t<Handler>>::template rebind_alloc<holder>;
        alloc_t alloc{net::get_associated_allocator(h)};
        std::allocator_traits<alloc_t>::destroy(alloc, stored);
        std::allocator_traits<alloc_t>::deallocate(alloc, stored, 1);
    }
    s.invoke = nullptr;
    if (r == nullptr) return;
    if (!work) {
        complete_home<Completer>(h, *r, posted, to); // the dispatcher's own executor
        return;
    }
    auto deliver = [&](auto const& ex) {
        if (posted)
            post_from(to.pool, ex, Completer::bind(std::move(h), *r));
        else
            dispatch_from(to.pool, ex, Completer::bind(std::move(h), *r));
    };
    if constexpr (holder::one_type) // the handler's own, as it was given (`work` keeps the count until the end)
        deliver(typename holder::work_executor(net::prefer(*work, net::execution::outstanding_work.untracked)));
    else
        deliver(work->get_executor());
}

} // namespace io::detail
} // namespace v0
} // namespace rdmacxx

/// @cond
// A bound handler has its handler's associated executor, allocator and cancellation slot.
template <template <class, class> class Associator, class Handler, class First, class Second, class Default>
struct RDMACXX_ASIO_NS::associator<Associator, rdmacxx::io::detail::bound_handler<Handler, First, Second>, Default>
    : Associator<Handler, Default> {
    static typename Associator<Handler, Default>::type
    get(rdmacxx::io::detail::bound_handler<Handler, First, Second> const& h, Default const& c = Default()) noexcept {
        return Associator<Handler, Default>::get(h.handler, c);
    }
};
/// @endcond
