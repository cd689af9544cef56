#pragma once
/// @file
/// Completions: the completion strategies `busy_poll`, `event_driven` and `adaptive`,
/// `completion_channel`, and `completion_queue<Completion>`; `work_completion` and
/// `completion_batch` are in work_completion.hpp, which this header includes.

#include "rdmacxx/context.hpp"
#include "rdmacxx/detail/tracking.hpp"
#include "rdmacxx/detail/wait.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/work_completion.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// Completion strategy: the waiter spins on ibv_poll_cq(3). Lowest latency, one core busy.
struct busy_poll {
    static constexpr bool uses_channel = false;
};

/// Completion strategy: the waiter arms the CQ (ibv_req_notify_cq(3)), polls once more to close
/// the arm race, and sleeps in ibv_get_cq_event(3) on a completion channel. Events are
/// acknowledged in batches. No core is burned while idle.
struct event_driven {
    static constexpr bool uses_channel = true;
};

/// Completion strategy: the waiter spins on ibv_poll_cq(3) for up to `spin` (50 µs), then arms
/// the CQ and sleeps on its channel as `event_driven` does: low latency when completions come
/// quickly, no core burned when they do not. While it spins it reads the steady clock once per
/// 32 polls, not once per poll.
struct adaptive {
    static constexpr bool uses_channel = true;
    /// How long a waiter spins before it sleeps.
    static constexpr std::chrono::microseconds spin{50};
};

/// A completion strategy: `busy_poll`, `event_driven`, `adaptive`, or a user type with the same
/// contract: `uses_channel` says whether the CQ gets a completion channel, and an optional
/// `std::chrono` duration `spin` how long a waiter polls before it sleeps.
template <class C>
concept completion_strategy = requires {
    { C::uses_channel } -> std::convertible_to<bool>;
};

/// A completion channel (`ibv_comp_channel`): the file descriptor CQ events arrive on. One
/// channel may serve several CQs. Move-only; must outlive the CQs bound to it (the device
/// refuses to free it before). It may move after they were made: what refers to it (a
/// `cm::connection`, the Asio dispatcher) follows it (see docs/ownership.md).
/// Thread-safety: one thread waits on a channel at a time.
/// @see ibv_create_comp_channel(3)
class completion_channel {
public:
    /// Creates a channel on `ctx`.
    /// @throws sys_error when ibv_create_comp_channel(3) fails.
    explicit completion_channel(context& ctx) : anchor_(this), handle_(::ibv_create_comp_channel(ctx.native_handle())) {
        if (!handle_) [[unlikely]]
            detail::throw_errno("ibv_create_comp_channel");
    }
    /// Takes over `other`'s channel (what refers to it follows it here); `other` is left empty.
    completion_channel(completion_channel&& other) noexcept
        : anchor_(std::move(other.anchor_), this), handle_(std::move(other.handle_)) {}
    /// Destroys the channel held, as the destructor does, then takes over `other`'s; self-move is
    /// a no-op.
    completion_channel& operator=(completion_channel&& other) noexcept {
        if (this != &other) {
            handle_ = std::move(other.handle_);
            anchor_.take(std::move(other.anchor_), this);
        }
        return *this;
    }
    completion_channel(completion_channel const&) = delete;
    completion_channel& operator=(completion_channel const&) = delete;
    /// Destroys the channel (ibv_destroy_comp_channel(3)).
    ~completion_channel() = default;

    /// The file descriptor, readable when an event is pending; for epoll/poll.
    [[nodiscard]] int fd() const noexcept { return handle_->fd; }

    /// Switches the descriptor to non-blocking mode (or back), so that a read with no event
    /// pending fails with EAGAIN instead of sleeping.
    /// @throws sys_error when fcntl(2) fails.
    void set_nonblocking(bool on = true) {
        int flags = ::fcntl(fd(), F_GETFL);
        if (flags < 0) [[unlikely]]
            detail::throw_errno("fcntl");
        flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
        if (::fcntl(fd(), F_SETFL, flags) < 0) [[unlikely]]
            detail::throw_errno("fcntl");
    }

    /// Takes the next event: the `ibv_cq` that fired, or nullptr when the descriptor is
    /// non-blocking and none is pending. The caller accounts for the event through the CQ
    /// (`completion_queue::note_event`), which acknowledges it.
    /// @throws sys_error when ibv_get_cq_event(3) fails other than with EAGAIN.
    [[nodiscard]] ibv_cq* get_event() {
        ibv_cq* cq = nullptr;
        void* cq_context = nullptr;
        if (::ibv_get_cq_event(handle_.get(), &cq, &cq_context) != 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return nullptr;
            detail::throw_errno("ibv_get_cq_event");
        }
        return cq;
    }

    /// Takes the next event if one arrives within `timeout` (a `std::chrono` duration; zero or
    /// negative: only one already there): the `ibv_cq` that fired, or nullptr when none came in
    /// time. Waits with ppoll(2) on `fd()`, so it works whether the descriptor is blocking or not;
    /// with a blocking descriptor and another reader of this channel, that reader may take the
    /// event in between and this call then blocks until the next one (one reader per channel).
    /// @throws sys_error when ppoll(2) or ibv_get_cq_event(3) fails other than with EAGAIN/EINTR.
    template <class Rep, class Period>
    [[nodiscard]] ibv_cq* get_event(std::chrono::duration<Rep, Period> timeout) {
        auto const deadline = detail::deadline_after(timeout);
        for (;;) {
            int const ready = detail::wait_readable(fd(), deadline);
            if (ready < 0) [[unlikely]]
                detail::throw_errno("ppoll", "waiting on a completion channel");
            if (ready == 0) return nullptr;
            ibv_cq* cq = nullptr;
            void* cq_context = nullptr;
            if (::ibv_get_cq_event(handle_.get(), &cq, &cq_context) == 0) return cq;
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) [[unlikely]]
                detail::throw_errno("ibv_get_cq_event");
        }
    }

    /// The verbs handle.
    [[nodiscard]] ibv_comp_channel* native_handle() const noexcept { return handle_.get(); }

    /// @cond
    // The stable cell through which the objects that use this channel find it.
    [[nodiscard]] detail::link<completion_channel> anchor_cell() const noexcept { return anchor_.cell(); }
    /// @endcond

private:
    struct deleter {
        void operator()(ibv_comp_channel* c) const noexcept { (void)::ibv_destroy_comp_channel(c); }
    };
    detail::anchor<completion_channel> anchor_; // before handle_: made first, so nothing leaks when it throws
    std::unique_ptr<ibv_comp_channel, deleter> handle_;
};

namespace detail {
/// Selects completion_queue's constructor for a CQ made by another verb (ibv_create_cq_ex).
struct adopt_cq_t {
    explicit adopt_cq_t() = default;
};
} // namespace detail

/// Options of a completion queue at creation. @see ibv_create_cq(3)
struct cq_options {
    /// The completion vector its events are signalled on: 0 … `context::num_comp_vectors()` - 1.
    /// Each vector is typically one interrupt; CQs on different vectors spread event handling
    /// over cores.
    int comp_vector = 0;
    /// A pointer of the caller's kept with the CQ (`ibv_cq::cq_context`): `user_context()`
    /// returns it, and ibv_get_cq_event(3) hands it back beside the CQ that fired.
    void* user_context = nullptr;
};

/// A completion queue (`ibv_cq`) waited on by the strategy `Completion`. Owns the CQ (and, for
/// `event_driven` without a channel of the caller's, its own channel); move-only; destroy it
/// after the QPs that use it.
///
/// Polling (`poll`) is the same for every strategy and never blocks; waiting (`wait`) blocks
/// until at least one completion is there, spinning or sleeping as the strategy says; the
/// bounded twins `wait(out, timeout)` and `wait_one(timeout)` give up after a `std::chrono`
/// duration and say so by returning 0 / an empty optional (never by throwing).
///
/// A CQ may move after QPs were made on it (they hold the `ibv_cq`, not this object), and it
/// follows its context when that moves (`context()`). Moving one CQ into another first destroys
/// the target's CQ (acknowledging its events) and then its own channel, as the destructor does.
/// Thread-safety: one thread polls or waits on a CQ at a time; moving it is not thread-safe.
/// @see ibv_create_cq(3), ibv_poll_cq(3), ibv_req_notify_cq(3), ibv_get_cq_event(3)
template <class Completion>
class completion_queue {
    static_assert(
        completion_strategy<Completion>,
        "the completion strategy must be rdmacxx::busy_poll, rdmacxx::event_driven or a type with their contract");
    static constexpr bool tracked = detail::tracks_in_flight<Completion>;

public:
    /// Number of events acknowledged together by `event_driven` (ibv_ack_cq_events(3) takes a mutex).
    static constexpr unsigned ack_batch = 64;

    /// Creates a CQ of at least `min_entries` entries on `ctx`, on the completion vector and with
    /// the user context `opt` names; an `event_driven` CQ gets its own completion channel.
    /// @throws argument_error naming the device's count when `opt.comp_vector` is not one of its
    ///         completion vectors (nothing created); sys_error when ibv_create_cq(3) fails (e.g.
    ///         EINVAL past the device's max_cqe).
    completion_queue(rdmacxx::context& ctx, int min_entries, cq_options const& opt = {})
        : ctx_(ctx.anchor_cell()), anchor_(this) {
        check_vector(ctx, opt.comp_vector);
        if constexpr (Completion::uses_channel) own_channel_ = std::make_unique<completion_channel>(ctx);
        create(min_entries, own_channel_ ? own_channel_.get() : nullptr, opt);
    }

    /// Creates an `event_driven` CQ whose events arrive on `channel`, which may serve other CQs.
    /// @throws argument_error as the constructor above; sys_error when ibv_create_cq(3) fails.
    completion_queue(rdmacxx::context& ctx, int min_entries, completion_channel& channel,
                     cq_options const& opt = {}) requires(Completion::uses_channel)
        : ctx_(ctx.anchor_cell()), anchor_(this) {
        check_vector(ctx, opt.comp_vector);
        create(min_entries, &channel, opt);
    }

    /// Takes over `other`'s CQ, channel and unacknowledged events; `other` is left empty.
    completion_queue(completion_queue&& other) noexcept
        : ctx_(other.ctx_), own_channel_(std::move(other.own_channel_)), cq_(std::move(other.cq_)),
          unacked_(std::exchange(other.unacked_, 0U)), ledger_(std::move(other.ledger_)),
          watch_(std::move(other.watch_)), anchor_(std::move(other.anchor_), this) {}
    /// Destroys the CQ held as the destructor does, then takes over
    /// `other`'s; self-move is a no-op.
    completion_queue& operator=(completion_queue&& other) noexcept {
        if (this != &other) {
            destroy();
            ctx_ = other.ctx_;
            own_channel_ = std::move(other.own_channel_);
            cq_ = std::move(other.cq_);
            unacked_ = std::exchange(other.unacked_, 0U);
            ledger_ = std::move(other.ledger_);
            watch_ = std::move(other.watch_);
            anchor_.take(std::move(other.anchor_), this);
        }
        return *this;
    }
    completion_queue(completion_queue const&) = delete;
    completion_queue& operator=(completion_queue const&) = delete;
    /// Acknowledges the events taken and not yet acknowledged (ibv_destroy_cq(3) waits for
    /// them), destroys the CQ, then its own channel (a channel with a CQ on it is busy).
    ~completion_queue() { destroy(); }

    /// Takes up to `out.size()` completions without blocking; returns how many.
    /// @throws sys_error when ibv_poll_cq(3) fails.
    std::size_t poll(std::span<work_completion> out) {
        int const n = poll_native(static_cast<int>(out.size()), reinterpret_cast<ibv_wc*>(out.data()));
        if (n < 0) [[unlikely]]
            detail::throw_poll_cq(n);
        return static_cast<std::size_t>(n);
    }

    /// As `poll(out)`, reporting failure through `ec` instead of throwing.
    std::size_t poll(std::span<work_completion> out, std::error_code& ec) noexcept {
        int const n = poll_native(static_cast<int>(out.size()), reinterpret_cast<ibv_wc*>(out.data()));
        if (n < 0) [[unlikely]] {
            ec = detail::poll_cq_error_code(n);
            return 0;
        }
        ec.clear();
        return static_cast<std::size_t>(n);
    }

    /// Takes up to `N` completions without blocking and returns them by value.
    /// @throws sys_error when ibv_poll_cq(3) fails.
    template <std::size_t N>
    [[nodiscard]] completion_batch<N> poll() {
        completion_batch<N> batch{typename completion_batch<N>::no_init{}};
        int const n = poll_native(static_cast<int>(N), reinterpret_cast<ibv_wc*>(batch.items()));
        if (n < 0) [[unlikely]]
            detail::throw_poll_cq(n);
        if (n > static_cast<int>(N)) __builtin_unreachable(); // at most N: lets the caller's loop know
        batch.count_ = static_cast<std::uint32_t>(n);
        return batch;
    }

    /// Blocks until at least one completion is there, then takes up to `out.size()`; returns
    /// how many (at least 1). `busy_poll` spins; `adaptive` spins for a while first; `event_driven` arms the CQ, polls
    /// once more so that a completion that arrived before the arm is not missed, then sleeps on the channel.
    /// @throws sys_error when polling, arming or reading the channel fails.
    std::size_t wait(std::span<work_completion> out) {
        return wait_with([&] { return poll(out); });
    }

    /// Blocks until one completion is there and returns it.
    /// @throws sys_error as `wait(out)`.
    [[nodiscard]] work_completion wait_one() {
        work_completion wc;
        (void)wait(std::span{&wc, 1});
        return wc;
    }

    /// As `wait(out)`, for at most `timeout` (a `std::chrono` duration; zero or negative: poll
    /// once): returns how many completions it took, 0 when none came in time. `busy_poll` spins
    /// until the deadline; `adaptive` spins for its `spin` (or until the deadline), then sleeps
    /// (both spins read the clock once per 32 polls, so they may overrun by those polls);
    /// `event_driven` sleeps on the channel in ppoll(2) until the deadline, so it also works
    /// when the channel is non-blocking. A timeout leaves the CQ armed: the event that comes
    /// later is taken by the next wait. The deadline is the steady clock's; the wait may end up
    /// to one scheduler tick after it.
    /// @throws sys_error when polling, arming, ppoll(2) or reading the channel fails.
    template <class Rep, class Period>
    [[nodiscard]] std::size_t wait(std::span<work_completion> out, std::chrono::duration<Rep, Period> timeout) {
        return wait_until_with([&] { return poll(out); }, detail::deadline_after(timeout));
    }

    /// As `wait_one()`, for at most `timeout`: the completion, or nothing when none came in time.
    /// @throws sys_error as `wait(out, timeout)`.
    template <class Rep, class Period>
    [[nodiscard]] std::optional<work_completion> wait_one(std::chrono::duration<Rep, Period> timeout) {
        work_completion wc;
        if (wait_until_with([&] { return poll(std::span{&wc, 1}); }, detail::deadline_after(timeout)) == 0)
            return std::nullopt;
        return wc;
    }

    /// Requests an event for the next completion (or the next solicited one).
    /// @throws sys_error when ibv_req_notify_cq(3) fails.
    void arm(bool solicited_only = false) requires(Completion::uses_channel) {
        if (int rc = ::ibv_req_notify_cq(cq_.get(), solicited_only ? 1 : 0); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_req_notify_cq");
    }

    /// Records one event taken for this CQ from its channel (by `wait` or by a caller's own event
    /// loop through `completion_channel::get_event`); acknowledges every `ack_batch` events.
    void note_event() noexcept requires(Completion::uses_channel) {
        if (++unacked_ == ack_batch) {
            ::ibv_ack_cq_events(cq_.get(), unacked_);
            unacked_ = 0;
        }
    }

    /// Resizes the CQ to at least `min_entries` entries (larger or smaller); returns the number
    /// it really has now (`capacity()`). Completions already queued stay queued, in order. Not
    /// thread-safe with polling or waiting on this CQ.
    /// @throws argument_error when `min_entries` < 1 (nothing asked of the device); sys_error
    ///         when ibv_resize_cq(3) fails: EINVAL past the device's max_cqe or below the number
    ///         of completions queued (rxe), EOPNOTSUPP where the provider cannot resize.
    /// @see ibv_resize_cq(3)
    int resize(int min_entries) {
        if (min_entries < 1) [[unlikely]]
            detail::throw_argument("a CQ resize asks for at least 1 entry, not " + std::to_string(min_entries));
        if (int rc = ::ibv_resize_cq(cq_.get(), min_entries); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_resize_cq",
                              "from " + std::to_string(cq_->cqe) + " to " + std::to_string(min_entries) +
                                  " entries on " + std::string{context().name()});
        return cq_->cqe;
    }

    /// The user context given at creation (`cq_options::user_context`), nullptr when none.
    [[nodiscard]] void* user_context() const noexcept { return cq_->cq_context; }
    /// True when this CQ delivers its events on `channel` (event_driven and adaptive CQs made
    /// on it, or on a channel of their own that is `channel`). The raw channel is
    /// `native_handle()->channel`.
    [[nodiscard]] bool delivers_to(completion_channel const& channel) const noexcept {
        return cq_->channel == channel.native_handle();
    }
    /// The number of entries the CQ really has (at least the number asked for).
    [[nodiscard]] int capacity() const noexcept { return cq_->cqe; }
    /// The context the CQ lives on, wherever it has moved to.
    /// @throws orphaned_error when the context was destroyed.
    [[nodiscard]] rdmacxx::context& context() const { return ctx_.get("CQ", "context"); }
    /// The verbs handle.
    [[nodiscard]] ibv_cq* native_handle() const noexcept { return cq_.get(); }

    /// @cond
    // The in-flight ledger of a `checked<C>` CQ, for the queue pairs that use it.
    [[nodiscard]] std::shared_ptr<detail::cq_ledger> const& in_flight_ledger() const noexcept requires(tracked) {
        return ledger_;
    }
    // The stable cell through which the objects that use this CQ find it.
    [[nodiscard]] detail::link<completion_queue> anchor_cell() const noexcept { return anchor_.cell(); }
    // Who is told before the CQ is destroyed (the Asio dispatcher that serves it).
    [[nodiscard]] detail::destruction_watch& destruction_watch() noexcept { return watch_; }
    /// @endcond

protected:
    /// @cond
    // For a CQ made by another verb (completion_queue_ex: ibv_create_cq_ex): checks the vector,
    // gives an event-driven CQ without `channel` its own, and adopts what `create(ibv_comp_channel*)`
    // returns (it throws when creation fails).
    template <class Create>
    completion_queue(detail::adopt_cq_t, rdmacxx::context& ctx, int comp_vector, completion_channel* channel,
                     Create&& create)
        : ctx_(ctx.anchor_cell()), anchor_(this) {
        static_assert(!tracked, "an adopted CQ has no in-flight ledger");
        check_vector(ctx, comp_vector);
        if constexpr (Completion::uses_channel)
            if (channel == nullptr) channel = (own_channel_ = std::make_unique<completion_channel>(ctx)).get();
        cq_.reset(create(channel != nullptr ? channel->native_handle() : nullptr));
    }

    // The waits of every strategy around `poll()`, which takes what is there and returns how
    // many (0: none): `wait(out)` and `wait(out, timeout)` are these around ibv_poll_cq(3).
    template <class Poll>
    std::size_t wait_with(Poll&& poll) {
        if constexpr (Completion::uses_channel && requires { Completion::spin; }) {
            auto const until = std::chrono::steady_clock::now() + Completion::spin;
            if (std::size_t n = detail::spin_until(poll, steady_now, until); n != 0) return n;
        }
        for (;;) {
            if (std::size_t n = poll(); n != 0) return n;
            if constexpr (Completion::uses_channel) {
                arm();
                if (std::size_t n = poll(); n != 0) return n;
                sleep_for_event();
            }
        }
    }
    template <class Poll>
    std::size_t wait_until_with(Poll&& poll, std::chrono::steady_clock::time_point deadline) {
        using clock = std::chrono::steady_clock;
        if constexpr (!Completion::uses_channel) {
            return detail::spin_until(poll, steady_now, deadline);
        } else {
            if constexpr (requires { Completion::spin; }) {
                auto const spin_end = clock::now() + Completion::spin;
                auto const until = spin_end < deadline ? spin_end : deadline;
                if (std::size_t n = detail::spin_until(poll, steady_now, until); n != 0) return n;
            }
            for (;;) {
                if (std::size_t n = poll(); n != 0) return n;
                arm();
                if (std::size_t n = poll(); n != 0) return n;
                if (!sleep_for_event_until(deadline)) return poll(); // timed out: one last look
            }
        }
    }
    /// @endcond

private:
    static std::chrono::steady_clock::time_point steady_now() noexcept { return std::chrono::steady_clock::now(); }

    void destroy() noexcept {
        void* const held = cq_.get();
        if (cq_ && unacked_ != 0) ::ibv_ack_cq_events(cq_.get(), unacked_);
        unacked_ = 0;
        cq_.reset(); // before the channel: ibv_destroy_comp_channel(3) fails with EBUSY while a CQ uses it
        own_channel_.reset();
        ledger_ = {};
        if (held != nullptr) watch_.fire(held); // once it is gone (its handle only a key)
    }

    // As sleep_for_event, giving up at `deadline`: false when it passed with no event.
    bool sleep_for_event_until(std::chrono::steady_clock::time_point deadline) {
        for (;;) {
            int const ready = detail::wait_readable(cq_->channel->fd, deadline);
            if (ready < 0) [[unlikely]]
                detail::throw_errno("ppoll", "waiting on a completion channel");
            if (ready == 0) return false;
            ibv_cq* ev_cq = nullptr;
            void* ev_ctx = nullptr;
            if (::ibv_get_cq_event(cq_->channel, &ev_cq, &ev_ctx) == 0) {
                if (ev_cq == cq_.get())
                    note_event();
                else
                    ::ibv_ack_cq_events(ev_cq, 1); // another CQ's event on a shared channel
                return true;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) [[unlikely]]
                detail::throw_errno("ibv_get_cq_event");
        }
    }

    static void check_vector(rdmacxx::context const& ctx, int vector) {
        int const count = ctx.num_comp_vectors();
        if (vector < 0 || vector >= count) [[unlikely]]
            detail::throw_argument("completion vector " + std::to_string(vector) +
                                   " is out of range: " + std::string{ctx.name()} + " has " + std::to_string(count) +
                                   " completion vectors (0 … " + std::to_string(count - 1) + ")");
    }

    void create(int min_entries, completion_channel* channel, cq_options const& opt) {
        cq_.reset(::ibv_create_cq(context().native_handle(), min_entries, opt.user_context,
                                  channel != nullptr ? channel->native_handle() : nullptr, opt.comp_vector));
        if (!cq_) [[unlikely]]
            detail::throw_errno("ibv_create_cq", [&] { return "with " + std::to_string(min_entries) + " entries"; });
        if constexpr (tracked)
            ledger_ = std::make_shared<typename detail::dependent<Completion, detail::cq_ledger>::type>(cq_.get());
    }

    // ibv_poll_cq(3), through the in-flight ledger when tracked.
    RDMACXX_HOT int poll_native(int max, ibv_wc* out) noexcept {
        if constexpr (tracked)
            return ledger_->poll(out, max);
        else
            return ::ibv_poll_cq(cq_.get(), max, out);
    }

    void sleep_for_event() {
        // The channel may be non-blocking (set by an epoll user): wait for readability first.
        pollfd pfd{cq_->channel->fd, POLLIN, 0};
        for (;;) {
            ibv_cq* ev_cq = nullptr;
            void* ev_ctx = nullptr;
            if (::ibv_get_cq_event(cq_->channel, &ev_cq, &ev_ctx) == 0) {
                if (ev_cq == cq_.get())
                    note_event();
                else
                    ::ibv_ack_cq_events(ev_cq, 1); // another CQ's event on a shared channel: it will re-arm and re-poll
                return;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) [[unlikely]]
                detail::throw_errno("ibv_get_cq_event");
            if (errno != EINTR && ::poll(&pfd, 1, -1) < 0 && errno != EINTR) [[unlikely]]
                detail::throw_errno("poll");
        }
    }

    struct deleter {
        void operator()(ibv_cq* c) const noexcept { (void)::ibv_destroy_cq(c); }
    };
    detail::link<rdmacxx::context> ctx_;              // the context's stable cell: valid when the context moves
    std::unique_ptr<completion_channel> own_channel_; // destroyed after cq_ (see destroy())
    std::unique_ptr<ibv_cq, deleter> cq_;
    unsigned unacked_ = 0;
    struct untracked {};
    [[no_unique_address]] std::conditional_t<tracked, std::shared_ptr<detail::cq_ledger>, untracked> ledger_{};
    detail::destruction_watch watch_; // told before the CQ goes
    detail::anchor<completion_queue> anchor_;
};

} // namespace v0
} // namespace rdmacxx
