#pragma once
/// @file
/// Receives the adapter keeps posted, and `async_receive` that takes the next message from them:
/// a receive whose wait is cancelled (a timeout, `co_await (pool.async_receive(…) || timer)`)
/// leaves nothing on the device and takes no message; the message that arrives later goes to the
/// next `async_receive`. The memory is the caller's registered span, cut into equal slots; a
/// message is handed out in place (`received_message`, no copy) and its slot is posted again
/// when the `received_message` goes.

#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/operations.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/work_completion.hpp"
#include "rdmacxx/wr.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// Settings of a `receive_pool`.
struct receive_pool_options {
    /// Receives kept posted, each of `message_bytes`: the messages that may arrive before the
    /// application takes them. 1 … 65,536.
    std::uint32_t receives = 64;
    /// Bytes of each receive: the largest message it takes (a larger one fails the QP with
    /// IBV_WC_LOC_LEN_ERR).
    std::uint32_t message_bytes = 4096;
};

class receive_pool_base;

/// A message taken from a `receive_pool`: its bytes in place, in the pool's memory, and its
/// completion. Move-only; when it goes (or `release()`), its receive is posted again. An empty
/// one (default-constructed, moved from, or handed out with an error) holds nothing.
/// Thread-safety: as its pool's (the dispatcher's executor only).
class received_message {
public:
    received_message() noexcept = default;
    received_message(received_message const&) = delete;
    received_message& operator=(received_message const&) = delete;
    received_message(received_message&& other) noexcept
        : pool_(std::move(other.pool_)), slot_(other.slot_), data_(other.data_), wc_(other.wc_) {
        other.data_ = {};
    }
    received_message& operator=(received_message&& other) noexcept {
        if (this != &other) {
            release();
            pool_ = std::move(other.pool_);
            slot_ = other.slot_;
            data_ = std::exchange(other.data_, {});
            wc_ = other.wc_;
        }
        return *this;
    }
    ~received_message() { release(); }

    /// The message: `completion().byte_len()` bytes in the pool's memory, valid until this goes.
    [[nodiscard]] std::span<std::byte const> data() const noexcept { return data_; }
    /// Its work completion (`byte_len()`, `imm_data()`, `qp_num()`, `status()`).
    [[nodiscard]] work_completion const& completion() const noexcept { return wc_; }
    /// Whether it holds a message.
    [[nodiscard]] explicit operator bool() const noexcept { return data_.data() != nullptr; }
    /// Gives the receive back to the pool, which posts it again; then empty. A post the receive
    /// queue refuses is counted in the pool's `lost()`; with the pool gone, nothing is posted.
    inline void release() noexcept;

    /// @cond
    // Whether the wait it was handed to was cancelled before its handler ran; if so, it goes
    // back to the front of the pool, unread, and this is empty.
    inline bool put_back_if_revoked() noexcept;
    /// @endcond

    /// @cond
    received_message(rdmacxx::detail::link<receive_pool_base> pool, std::uint32_t slot, std::span<std::byte const> data,
                     work_completion const& wc) noexcept
        : pool_(std::move(pool)), slot_(slot), data_(data), wc_(wc) {}
    /// @endcond

private:
    rdmacxx::detail::link<receive_pool_base> pool_;
    std::uint32_t slot_ = 0;
    std::span<std::byte const> data_;
    work_completion wc_{};
};

/// What a `receive_pool` is to its dispatcher and its messages, whatever it posts to.
class receive_pool_base {
public:
    receive_pool_base(receive_pool_base const&) = delete;
    receive_pool_base& operator=(receive_pool_base const&) = delete;

    /// Messages arrived and not taken yet.
    [[nodiscard]] std::size_t ready() const noexcept { return count_; }
    /// `async_receive`s waiting (cancelled ones are not).
    [[nodiscard]] std::size_t waiting() const noexcept {
        completion_dispatcher const* d = d_.get_if();
        std::size_t n = 0;
        for (std::size_t i = waiter_head_; d != nullptr && i < waiters_.size(); ++i)
            if (d->is_pending(waiters_[i])) ++n;
        return n;
    }
    /// Receives not posted again: completed with an error (their QP in ERR), or refused when
    /// their message was released.
    [[nodiscard]] std::uint64_t lost() const noexcept { return lost_; }

    /// @cond
    // A completion of one of its receives, routed by the dispatcher; false (a stray) when it
    // names no slot of this pool, or every receive has arrived already.
    bool deliver(std::uint32_t slot, work_completion const& wc) {
        if (slot >= arrived_.size() || count_ == arrived_.size()) [[unlikely]]
            return false;
        arrived_[(head_ + count_) % arrived_.size()] = {slot, wc};
        ++count_;
        serve();
        return true;
    }
    // Posts slot `slot`'s receive again.
    void repost(std::uint32_t slot) noexcept {
        try {
            post_one(slot);
        } catch (...) {
            ++lost_;
        }
    }
    // Puts an arrival handed out but never seen back at the front, for the next async_receive.
    void unread(std::uint32_t slot, work_completion const& wc) {
        head_ = (head_ + arrived_.size() - 1) % arrived_.size();
        arrived_[head_] = {slot, wc};
        ++count_;
        serve();
    }
    // Whether the wait its current message was handed to was cancelled on the way.
    [[nodiscard]] bool revoked(std::uint32_t slot) const noexcept {
        return revoked_[slot] != 0 && revoked_[slot] == handout_[slot];
    }
    /// @endcond

protected:
    // The dispatcher, wherever it has moved to.
    completion_dispatcher& dispatcher() const { return d_.get("receive pool", "completion dispatcher"); }
    receive_pool_base(completion_dispatcher& d, local_span<std::byte> memory, receive_pool_options const& opt)
        : d_(d.anchor_cell()), memory_(memory), opt_(check(opt, memory.size())), anchor_(this), arrived_(opt.receives),
          handout_(opt.receives, 0), revoked_(opt.receives, 0) {
        serial_ = d.add_receive_pool(anchor_.cell(), [](receive_pool_base& pool, std::uint32_t slot,
                                                        work_completion const& wc) { return pool.deliver(slot, wc); });
    }
    // Its waiting async_receives complete with operation_aborted (posted); its receives stay
    // posted, and their completions become strays.
    ~receive_pool_base() {
        anchor_.orphan();
        completion_dispatcher* const d = d_.get_if();
        if (d == nullptr) return; // gone: its operations went with it
        for (std::size_t i = waiter_head_; i < waiters_.size(); ++i)
            if (d->is_pending(waiters_[i]))
                d->complete(static_cast<std::uint32_t>(waiters_[i] & 0xffffffffU),
                            detail::op_result{io::detail::operation_aborted(), {}, 0, {}}, true);
        d->remove_receive_pool(serial_);
    }

    // Posts slot `slot`'s receive to the target.
    virtual void post(recv<1> const& r) = 0;

    void post_one(std::uint32_t slot) {
        recv<1> r{memory_.subspan(std::size_t{slot} * opt_.message_bytes, opt_.message_bytes)};
        r.id((std::uint64_t{serial_} << 32) | completion_dispatcher::pool_tag_bit | slot);
        post(r);
    }
    void post_all() {
        for (std::uint32_t i = 0; i < opt_.receives; ++i)
            post_one(i);
    }

    template <class Completer, class Handler>
    void start(Handler& handler) {
        completion_dispatcher& d = dispatcher();
        auto const inside = d.enter(); // thread_rule.hpp: before anything is touched
        auto const ex = net::get_associated_executor(handler, d.get_executor());
        // The waits cancelled since go first: they completed already.
        while (waiter_head_ < waiters_.size() && !d.is_pending(waiters_[waiter_head_]))
            ++waiter_head_;
        if (waiter_head_ == waiters_.size()) {
            waiters_.clear();
            waiter_head_ = 0;
        }
        if (count_ != 0 && waiters_.empty()) {
            auto cs = net::get_associated_cancellation_slot(handler);
            detail::op_result r = take();
            if (r.source != nullptr && cs.is_connected()) { // as in serve(): a cancellation on the way puts it back
                try {
                    cs.template emplace<delivery_canceller>(anchor_.cell(), r.slot, handout_[r.slot]);
                    r.delivery = cs;
                } catch (...) { // no memory for it: a cancellation from now on is not seen
                }
            }
            net::post(ex, Completer::bind(std::move(handler), r));
            return;
        }
        if (count_ == 0 && failed_) { // its QP is in ERR: no receive of it will complete again
            net::post(ex, Completer::bind(std::move(handler), detail::op_result{failed_, {}, 0, {}}));
            return;
        }
        waiters_.reserve(waiters_.size() + 1); // before the slot is taken: nothing throws after
        std::uint32_t const i = d.acquire<Completer>(handler, true);
        if (i == completion_dispatcher::npos) [[unlikely]] {
            detail::op_result const r{std::make_error_code(std::errc::no_buffer_space), {}, 0, {}};
            net::post(ex, Completer::bind(std::move(handler), r));
            return;
        }
        waiters_.push_back(d.tag(i));
        d.watch(); // what the CQ holds already is routed here
    }

private:
    struct arrival {
        std::uint32_t slot = 0;
        work_completion wc{};
    };

    static receive_pool_options const& check(receive_pool_options const& opt, std::size_t bytes) {
        if (opt.receives == 0 || opt.receives > 65'536 || opt.message_bytes == 0) [[unlikely]]
            rdmacxx::detail::throw_argument("a receive pool holds 1 to 65,536 receives of at least 1 byte");
        if (bytes < std::size_t{opt.receives} * opt.message_bytes) [[unlikely]]
            rdmacxx::detail::throw_argument("a receive pool of " + std::to_string(opt.receives) + " receives of " +
                                            std::to_string(opt.message_bytes) + " bytes needs that many bytes, not " +
                                            std::to_string(bytes));
        return opt;
    }

    // The oldest arrival as a result: a message, or the error it completed with (its receive
    // is not posted again: its QP is in ERR).
    detail::op_result take() {
        arrival const a = arrived_[head_];
        head_ = (head_ + 1) % arrived_.size();
        --count_;
        detail::op_result r{a.wc.error_code(), a.wc, 0, {}};
        if (!r.ec) {
            r.source = this;
            r.slot = a.slot;
            if (++handout_[a.slot] == 0) handout_[a.slot] = 1; // 0: never handed out
            revoked_[a.slot] = 0;
        } else {
            ++lost_;
            failed_ = r.ec;
        }
        return r;
    }

    // Installed in a waiter's cancellation slot once a message is on its way to its handler: a
    // cancellation then (an Asio `||` whose other operation completed first, which discards this
    // one's result) marks the message, and the handler's binder puts it back unread.
    // It names the handout, so that a canceller left behind (its binder destroyed uncalled)
    // never marks a later handout of the same slot.
    struct delivery_canceller {
        delivery_canceller(rdmacxx::detail::link<receive_pool_base> p, std::uint32_t s, std::uint32_t h) noexcept
            : pool(std::move(p)), slot(s), handout(h) {}
        rdmacxx::detail::link<receive_pool_base> pool;
        std::uint32_t slot;
        std::uint32_t handout;
        void operator()(net::cancellation_type_t type) const noexcept {
            if ((type & net::cancellation_type::terminal) == net::cancellation_type::none) return;
            receive_pool_base* p = pool.get_if();
            if (p != nullptr && p->handout_[slot] == handout) p->revoked_[slot] = handout;
        }
    };

    // Hands arrivals to the waiters still pending, oldest first.
    void serve() {
        completion_dispatcher& d = dispatcher();
        while (count_ != 0 && waiting() != 0) {
            std::uint64_t const tag = waiters_[waiter_head_++];
            if (!d.is_pending(tag)) continue; // cancelled: completed already
            auto const index = static_cast<std::uint32_t>(tag & 0xffffffffU);
            net::cancellation_slot cs = d.cancellation_slot_of(index); // complete() empties it
            detail::op_result r = take();
            if (r.source != nullptr && cs.is_connected()) r.delivery = cs;
            d.complete(index, r, true);
            if (r.delivery.is_connected()) {
                try {
                    r.delivery.emplace<delivery_canceller>(anchor_.cell(), r.slot, handout_[r.slot]);
                } catch (...) { // no memory for it: a cancellation from now on is not seen
                }
            }
        }
        if (waiter_head_ == waiters_.size()) {
            waiters_.clear();
            waiter_head_ = 0;
        }
    }

public:
    /// @cond
    // The message of a result `take` made, for the completer.
    static received_message message_of(detail::op_result const& r) {
        auto* self = static_cast<receive_pool_base*>(r.source);
        if (self == nullptr) return {};
        // A WRITE with immediate writes elsewhere: its byte_len() is the WRITE's, and its receive holds nothing.
        std::size_t const n = r.wc.opcode() == IBV_WC_RECV_RDMA_WITH_IMM
                                  ? 0
                                  : std::min<std::size_t>(r.wc.byte_len(), self->opt_.message_bytes);
        std::span<std::byte const> const bytes{self->memory_.data() + std::size_t{r.slot} * self->opt_.message_bytes,
                                               n};
        return received_message{self->anchor_.cell(), r.slot, bytes, r.wc};
    }
    /// @endcond

private:
    rdmacxx::detail::link<completion_dispatcher> d_; // followed when the dispatcher moves; null once gone
    local_span<std::byte> memory_;
    receive_pool_options opt_;
    rdmacxx::detail::anchor<receive_pool_base> anchor_;
    std::uint32_t serial_ = 0;
    std::vector<arrival> arrived_; // a ring of `receives`: at most one arrival per posted receive
    std::size_t head_ = 0;
    std::size_t count_ = 0;
    std::vector<std::uint32_t> handout_; // per slot: how many times its message was handed out
    std::vector<std::uint32_t> revoked_; // per slot: the handout whose wait was cancelled on the way (0: none)
    std::vector<std::uint64_t> waiters_; // tags of waiting async_receives, oldest at waiter_head_
    std::size_t waiter_head_ = 0;
    std::uint64_t lost_ = 0;
    error_code failed_{}; // a receive completed with an error: its QP is in ERR
};

/// @cond
inline bool received_message::put_back_if_revoked() noexcept {
    receive_pool_base* p = pool_.get_if();
    if (data_.data() == nullptr || p == nullptr || !p->revoked(slot_)) return false;
    data_ = {};
    pool_ = {};
    try {
        p->unread(slot_, wc_);
    } catch (...) { // its dispatcher gone: the message goes with it
    }
    return true;
}
/// @endcond

inline void received_message::release() noexcept {
    if (data_.data() == nullptr) return;
    data_ = {};
    if (receive_pool_base* p = pool_.get_if()) p->repost(slot_);
    pool_ = {};
}

namespace detail {
/// A handler bound to its arguments, moved into it when called (a `received_message` is
/// move-only, which Asio's own binders do not take).
template <class Handler, class First>
struct message_binder {
    Handler handler;
    First first;
    received_message message;
    net::cancellation_slot delivery;
    void operator()() {
        bool const watched = delivery.is_connected();
        if (watched) delivery.clear();
        if (watched && message.put_back_if_revoked()) { // cancelled on its way: the next async_receive takes it
            error_code const aborted = io::detail::operation_aborted();
            if constexpr (std::is_same_v<First, std::exception_ptr>)
                std::move(handler)(exception_of(aborted, received_message{}), received_message{});
            else
                std::move(handler)(aborted, received_message{});
            return;
        }
        std::move(handler)(std::move(first), std::move(message));
    }
};

/// Binds a pool's result to the handler: `(io::error_code, received_message)`, or for an
/// `as_exception` handler (`use_awaitable`) `(std::exception_ptr, received_message)`.
struct message_completer {
    template <class Handler>
    static auto bind(Handler&& h, op_result const& r) {
        using outcome = outcome_for<std::decay_t<Handler>>;
        received_message message = receive_pool_base::message_of(r);
        auto first = outcome::first(r.ec, r.wc, [&] { return r.ex; });
        return message_binder<typename outcome::handler_type, typename outcome::first_type>{
            outcome::unwrap(h), std::move(first), std::move(message), r.delivery};
    }
};

/// `co_await pool.async_receive(asio::use_awaitable)` throws the library's exception.
template <>
inline constexpr bool is_operation_value_v<received_message> = true;
} // namespace detail
} // namespace io
} // namespace v0
} // namespace rdmacxx

/// @cond
// A message binder has its handler's associated executor, allocator and cancellation slot.
template <template <class, class> class Associator, class Handler, class First, class Default>
struct RDMACXX_ASIO_NS::associator<Associator, rdmacxx::io::detail::message_binder<Handler, First>, Default>
    : Associator<Handler, Default> {
    static typename Associator<Handler, Default>::type get(rdmacxx::io::detail::message_binder<Handler, First> const& h,
                                                           Default const& c = Default()) noexcept {
        return Associator<Handler, Default>::get(h.handler, c);
    }
};
/// @endcond

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// Receives kept posted to a QP's receive queue or an SRQ (`Target`), over the caller's
/// registered memory cut into `opt.receives` slots of `opt.message_bytes` bytes, and the
/// messages they take, handed out in order by `async_receive`. The receives are posted at
/// construction; a message's receive is posted again when its `received_message` goes.
///
/// Cancelling an `async_receive` (a timer with `||`, a cancellation slot) completes it at once
/// with `asio::error::operation_aborted`: it has nothing on the device, and the message that
/// arrives later is not lost but handed to the next `async_receive`. This is the receive to bound
/// by a timer; `async_recv` posts into the caller's memory, and its cancellation must end the QP
/// (`cancel_mode`).
///
/// Messages are handed out in the order they arrive to one waiter at a time; with several
/// waiters at once, a message put back after a cancellation may reach a later waiter.
///
/// A QP in ERR completes the pool's receives flushed: the `async_receive`s waiting, and every
/// later one, complete with IBV_WC_WR_FLUSH_ERR and an empty message.
/// Ownership: the target must not move and must outlive the pool and every `received_message`
/// of it; `memory` must stay registered until the target's QP is destroyed, since the pool's
/// receives stay on the device when the pool goes (their completions are then strays) and when
/// its constructor throws part-way. `completion_dispatcher::remove` does not know the pool's CQ:
/// destroy the pool first. Not movable. Thread-safety: on the dispatcher's executor only.
/// @see ibv_post_recv(3), ibv_post_srq_recv(3)
template <class Target>
class receive_pool final : public receive_pool_base {
public:
    /// Posts `opt.receives` receives to `target` over `memory` (at least `receives` ×
    /// `message_bytes` bytes, registered with local write access on the target's PD); the CQ
    /// their completions arrive on must be added to `d` as routed.
    /// @throws argument_error for sizes out of range or memory too small; what `post_recv`
    ///         throws (`wr_error` when the receive queue is too small).
    receive_pool(completion_dispatcher& d, Target& target, local_span<std::byte> memory,
                 receive_pool_options const& opt = {})
        : receive_pool_base(d, memory, opt), target_(target) {
        post_all();
    }

    /// Completes with the next message, oldest first: `(io::error_code, received_message)` for
    /// every token (`co_await` with `asio::use_awaitable` throws `wc_error` for a failed receive).
    /// One already there completes it at once (posted). No token: `default_token_t`.
    template <class Token = default_token_t>
    auto async_receive(Token&& token = default_token_t{}) {
        return net::async_initiate<Token, void(error_code, received_message)>(initiation{this}, token);
    }

private:
    // The initiation of `async_receive`.
    struct initiation {
        using executor_type = completion_dispatcher::executor_type;
        receive_pool* pool;
        [[nodiscard]] executor_type get_executor() const { return pool->dispatcher().get_executor(); }
        template <class Handler>
        void operator()(Handler handler) const {
            pool->template start<detail::message_completer>(handler);
        }
    };
    void post(recv<1> const& r) override { target_.post_recv(r); }
    Target& target_;
};

} // namespace io
} // namespace v0
} // namespace rdmacxx
