#pragma once
/// @file
/// The Asio adapter's completion dispatcher, its class: one completion channel wrapped in an
/// `asio::posix::stream_descriptor`, the CQs on it, and the pool of operation slots that routes
/// each work completion to the operation that posted it. What it does when the objects it
/// serves go is defined in rdmacxx/asio/dispatcher.hpp, which includes this header: include that
/// one. The operations themselves (`async_post`, `async_recv`, `async_wait`) are in
/// rdmacxx/asio/operations.hpp.

#include "rdmacxx/asio/cq_entry.hpp"
#include "rdmacxx/asio/descriptor.hpp"
#include "rdmacxx/asio/dispatcher_options.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/op_slot.hpp"
#include "rdmacxx/asio/pool_routes.hpp"
#include "rdmacxx/asio/post_pool.hpp"
#include "rdmacxx/asio/slot_pool.hpp"
#include "rdmacxx/asio/thread_rule.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/srq.hpp"

#include <poll.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
/// The Asio adapter (rdmacxx/asio.hpp): completions, connections and async events as Asio
/// asynchronous operations, for callbacks, `asio::use_future`, `asio::experimental::deferred`
/// and C++20 coroutines (`asio::use_awaitable`). Standalone Asio 1.22 or later.
namespace io {

/// Routes completions to Asio operations: owns a duplicate of a completion channel's descriptor
/// in an `asio::posix::stream_descriptor` on the executor it is given, and a fixed pool of
/// operation slots. It polls before it sleeps, as a hand-written event loop does: a sweep runs
/// when an operation starts (posted to the executor; one at a time) and after each wake-up, and
/// polls the routed CQs (round robin) one batch at a time. Each completion's `wr_id` names a slot
/// and the generation that posted it; the sweep completes that slot's operation at once, its
/// handler run inline when the handler's executor is running in this thread (`dispatch`: a
/// coroutine resumes inside the sweep, a callback runs there) and posted to it otherwise. What
/// the handler starts is polled by the same sweep, so a request whose completion is there at
/// once (rxe carries a request out within the call that posts it) costs no system call and no
/// trip through the io_context's queue. After 64 handlers (`inline_budget`) the sweep posts
/// another and returns, so that the io_context's other handlers get their turn. Only a sweep that
/// finds every routed CQ empty arms the CQs (those not armed yet), polls them once more (a
/// completion that lands between the last poll and the arm is not missed) and waits on the
/// descriptor. When the descriptor is readable it takes every pending CQ event, counts it on its
/// CQ (acknowledged in batches of `completion_queue::ack_batch`) and sweeps. A handler that
/// throws leaves the completions polled with it for the next sweep (posted as the exception
/// leaves), and one that destroys or moves the dispatcher ends the sweep (it is followed through
/// its cell). A
/// completion whose tag names no pending operation (one not posted through the dispatcher, or a
/// forgotten QP's) is dropped and counted (`stray()`).
///
/// Cancellation (a terminal one, through the handler's cancellation slot) never hands memory
/// back while the device may still use it: a cancelled operation's handler runs only once its
/// request's completion has been reaped, and `opt.cancel` says what is done meanwhile
/// (`cancel_mode`: by default its QP is moved to ERR, so the flushed completion comes at once).
/// An `async_wait` on a batch CQ, which has nothing on the device, completes at once.
///
/// The descriptor is waited on only while operations are pending, cancelled ones included, so
/// `io_context::run` returns when the last one has completed. Several CQs may share the channel;
/// a CQ event of a CQ not added is acknowledged and ignored.
///
/// No heap allocation per operation in steady state: handlers up to 192 bytes (callbacks,
/// coroutine handlers) live in the slot; a larger one uses its associated allocator. What it
/// posts (each completion, bound to its handler, and its sweeps) is allocated from a pool of
/// `max_operations` + 4 blocks of 512 bytes, made once, when the handler's executor belongs to
/// the dispatcher's own `io_context` (held directly or in an `asio::any_io_executor`); Asio's own
/// post, which it uses on any other executor (a strand, another `io_context`), allocates from a
/// per-thread cache of 2 blocks and then from the heap. A channel in error (POLLERR: its device
/// is gone) fails every pending operation with EIO.
/// Thread-safety: not thread-safe; use it, its operations and its CQs from one thread at a time
/// (a single-threaded `io_context`: with several threads in `run()`, another thread may take the
/// descriptor's edge between the dispatcher's look and its wait). With the thread check
/// (thread_rule.hpp, on unless `NDEBUG`), a thread that runs one of its handlers, starts one of
/// its operations, or calls `add`, `remove` or `forget` while another thread is inside it is
/// refused with `io::thread_error`. A routed CQ carries only requests posted through the dispatcher, and the channel
/// has no other consumer (`cq.wait()` on it would take the dispatcher's events).
///
/// Ownership (see docs/ownership.md): the dispatcher finds its channel and its CQs through
/// their cells, so they may move after being added (it follows them); one destroyed while the
/// dispatcher serves it fails its operations with `std::errc::owner_dead` instead of being read
/// after it was freed. The dispatcher may itself move, also with operations pending: its
/// handlers, sweeps and cancellation slots find it through its own cell. Destroying it
/// destroys the handlers of pending operations without calling them (a cancellation emitted
/// afterwards does nothing); move-assigning to it does the same to the operations it had.
/// Nothing needs to be told to it before an object goes: a QP whose operations it routes tells
/// it when it is destroyed (or replaced by a move assignment), and each of that QP's pending
/// operations, cancelled ones included, then completes with `asio::error::operation_aborted`,
/// posted: its handler runs after the QP is gone, when the device no longer touches its memory
/// (a completion of it not reaped by then is dropped). A CQ it serves tells it when it is
/// destroyed: it is served no more, as after `remove`. An operation on a QP whose CQ it does not
/// route (not added, or a batch CQ) is refused when it starts (`argument_error`, EINVAL), as is
/// one on a QP whose operations another live dispatcher routes.
/// @see ibv_get_cq_event(3), ibv_req_notify_cq(3), ibv_ack_cq_events(3)
class completion_dispatcher final {
public:
    /// The executor its descriptor and operations run on.
    using executor_type = net::any_io_executor;

    /// Serves `channel` (put in non-blocking mode) on `ex`, with `opt.max_operations` slots.
    /// @throws argument_error when `max_operations` is 0 or over 2^31; sys_error when dup(2) or
    ///         fcntl(2) fails.
    completion_dispatcher(executor_type ex, completion_channel& channel, dispatcher_options const& opt = {})
        : ex_(std::move(ex)), channel_(channel.anchor_cell()), descriptor_(ex_), slots_(opt.max_operations),
          anchor_(this),
          pool_(std::make_shared<detail::post_pool>(slots_.size() + 4, &net::query(ex_, net::execution::context))),
          cancel_(opt.cancel), io_(detail::owner_executor(pool_, ex_)) {
        channel.set_nonblocking();
        detail::assign_duplicate(descriptor_, channel.fd(), "for the completion dispatcher's descriptor");
    }
    completion_dispatcher(completion_dispatcher const&) = delete;
    completion_dispatcher& operator=(completion_dispatcher const&) = delete;
    /// Takes over `other`'s descriptor, CQs and operations, pending ones included (their
    /// handlers, sweeps and cancellation slots follow it here); `other` is left empty.
    completion_dispatcher(completion_dispatcher&& other) noexcept
        : ex_(std::move(other.ex_)), channel_(std::move(other.channel_)), descriptor_(std::move(other.descriptor_)),
          slots_(std::move(other.slots_)), cqs_(std::move(other.cqs_)), anchor_(std::move(other.anchor_), this),
          pool_(std::move(other.pool_)), stray_(other.stray_), cancel_(other.cancel_), pools_(std::move(other.pools_)),
          reading_(std::exchange(other.reading_, false)), sweep_queued_(std::exchange(other.sweep_queued_, false)),
          thread_(std::move(other.thread_)), backlog_(other.backlog_),
          backlog_at_(std::exchange(other.backlog_at_, 0U)), backlog_end_(std::exchange(other.backlog_end_, 0U)),
          kept_(std::move(other.kept_)), io_(other.io_) {}
    /// Destroys its pending handlers without calling them and closes its descriptor, as the
    /// destructor does, then takes over `other`'s as the move constructor does; self-move is a
    /// no-op.
    completion_dispatcher& operator=(completion_dispatcher&& other) noexcept {
        if (this != &other) {
            std::destroy_at(this); // final, never a subobject: transparently replaced
            std::construct_at(this, std::move(other));
        }
        return *this;
    }
    /// Destroys pending handlers without calling them and closes its descriptor (not the channel).
    ~completion_dispatcher() {
        anchor_.orphan();
        for (std::uint32_t i = 0; i < slots_.size(); ++i) {
            detail::op_slot& s = slots_[i];
            if (s.cancel.is_connected()) s.cancel.clear();
            if (s.invoke != nullptr) s.invoke(s, nullptr, false, delivery());
        }
        detail::net_error_code ignored;
        descriptor_.close(ignored);
    }

    /// Serves `cq`, which must deliver its events to this dispatcher's channel, in `mode`; arms it.
    /// @throws argument_error when `cq` uses another channel or was added already; sys_error
    ///         when ibv_req_notify_cq(3) fails.
    template <class Completion>
    void add(rdmacxx::completion_queue<Completion>& cq, cq_mode mode = cq_mode::routed) {
        auto const inside = thread_.enter(who);
        static_assert(Completion::uses_channel, "the dispatcher serves CQs with a completion channel (event_driven)");
        if (!cq.delivers_to(channel())) [[unlikely]]
            rdmacxx::detail::throw_argument("the CQ added to a completion dispatcher delivers its events to another "
                                            "completion channel");
        if (find(cq.native_handle()) != nullptr) [[unlikely]]
            rdmacxx::detail::throw_argument("the CQ was added to this completion dispatcher already");
        cq.arm(); // first: a CQ that cannot be armed is not added
        cqs_.add(cq_entry::of(cq, mode == cq_mode::batch));
        cq.destruction_watch().set(anchor_.cell().erased(), &on_cq_destroyed);
    }

    /// Stops serving `cq` (added with `add`), so that it can be destroyed or added elsewhere.
    /// A batch CQ's pending `async_wait` completes with `asio::error::operation_aborted` at once
    /// (posted). A routed CQ is refused while an operation whose completion arrives on it is
    /// pending (cancelled ones included), or while any `async_recv` on an SRQ is
    /// (its CQ is not known): let them complete, or `forget` their QPs, first. Events of `cq`
    /// that arrive later are acknowledged and ignored, as for any CQ not added.
    /// @throws argument_error when `cq` is not added, or is a routed CQ with operations as
    ///         above (nothing changes).
    template <class Completion>
    void remove(rdmacxx::completion_queue<Completion>& cq) {
        auto const inside = thread_.enter(who);
        ibv_cq* const native = cq.native_handle();
        cq_entry* e = find(native);
        if (e == nullptr) [[unlikely]]
            rdmacxx::detail::throw_argument("the CQ removed from a completion dispatcher was not added to it");
        if (!e->batch) {
            for (std::uint32_t i = 0; i < slots_.size(); ++i)
                if (slots_.taken(i) && !slots_[i].batch && (slots_[i].cq == native || slots_[i].cq == nullptr))
                    [[unlikely]]
                    rdmacxx::detail::throw_argument(
                        "the routed CQ removed from a completion dispatcher still has operations whose "
                        "completion arrives on it (let them complete, or forget(qp) their QPs, first)");
        }
        if (cq.destruction_watch().watcher() == anchor_.identity()) cq.destruction_watch().set({}, nullptr);
        drop_cq(native);
    }

    /// Drops every operation posted to `qp` (`async_post`, `async_recv` on the QP) now: each
    /// pending one, cancelled ones included, completes with `asio::error::operation_aborted`
    /// (posted), and their slots are free again. Not needed before destroying the QP, which does
    /// the same by itself (see the class); for a QP that is handed to other code. A completion
    /// of their requests that still arrives names a slot generation that no longer exists: it is
    /// dropped and counted in `stray()`, never routed to another operation. The requests stay on
    /// the device until the QP is destroyed or they complete, and so must their memory. Receives
    /// posted to an SRQ are not the QP's and are kept. Returns how many operations it dropped.
    /// Thread-safety: on the executor only.
    template <transport Transport, completion_strategy Completion, post_policy Post>
    std::size_t forget(rdmacxx::queue_pair<Transport, Completion, Post>& qp);

    /// @cond
    // An operation posted to `qp`'s send queue (`send`) or receive queue: the CQ its completion
    // arrives on must be routed here (else it would never complete), and the dispatcher is the
    // one told when the QP goes. Refuses (argument_error) a CQ not added, a batch CQ, and a QP
    // with operations pending in another live dispatcher (one with none hands the QP over: after
    // `remove(cq)` there and `add(cq)` here, say). Both dispatchers on one thread.
    template <class QP>
    void route_from(QP& qp, ibv_cq* cq);
    // A receive posted to `srq`: the dispatcher is the one told when the SRQ goes. Refuses
    // (argument_error) an SRQ with receives pending in another live dispatcher.
    void route_from(rdmacxx::shared_receive_queue& srq);
    // Whether an operation posted to `qp` (a receive posted to `srq`, an operation whose
    // completion arrives on `cq`) is pending here.
    [[nodiscard]] bool routes(ibv_qp* qp) const noexcept;
    [[nodiscard]] bool routes(ibv_srq* srq) const noexcept;
    [[nodiscard]] bool routes(ibv_cq* cq) const noexcept;
    // Keeps `object` until the dispatcher is destroyed (an io::completion_queue let go of while
    // operations complete on its CQ).
    void keep(std::shared_ptr<void> object) { kept_.push_back(std::move(object)); }
    /// @endcond

    /// The executor.
    [[nodiscard]] executor_type get_executor() const noexcept { return ex_; }
    /// Operations pending: waiting for their completion, cancelled ones included.
    [[nodiscard]] std::size_t in_flight() const noexcept { return slots_.pending(); }
    /// Cancelled operations whose completion has not been reaped yet: their handlers have not
    /// run, their memory is still the device's.
    [[nodiscard]] std::size_t cancelled() const noexcept { return slots_.cancelled(); }
    /// What cancelling a posted operation does.
    [[nodiscard]] cancel_mode cancellation() const noexcept { return cancel_; }
    /// Completions whose `wr_id` named no operation (not posted through the dispatcher, or the
    /// later completions of a chain that failed early) dropped so far.
    [[nodiscard]] std::uint64_t stray() const noexcept { return stray_; }
    /// Slots in the pool.
    [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }

    /// @cond
    static constexpr std::uint32_t npos = detail::slot_pool::npos;
    // The bit of a wr_id's low half that marks a receive_pool's receive: the high half is the
    // pool's serial, the rest of the low half its slot. An operation's index is below 2^31.
    static constexpr std::uint64_t pool_tag_bit = std::uint64_t{1} << 31;

    // Where its own I/O objects find it, wherever it has moved to.
    [[nodiscard]] rdmacxx::detail::link<completion_dispatcher> anchor_cell() const noexcept { return anchor_.cell(); }

    // This thread is inside the dispatcher until the scope goes (thread_rule.hpp): each
    // operation's initiation holds one from its start.
    [[nodiscard]] detail::thread_rule::scope enter() { return thread_.enter(who); }

    // Routes the completions tagged with the returned serial to `deliver(pool, slot, wc)`
    // (receive_pool; pool_routes.hpp).
    using pool_deliver_fn = detail::pool_routes::deliver_fn;
    std::uint32_t add_receive_pool(rdmacxx::detail::link<receive_pool_base> pool, pool_deliver_fn deliver) {
        return pools_.add(std::move(pool), deliver);
    }
    void remove_receive_pool(std::uint32_t serial) noexcept { pools_.remove(serial); }
    // The cancellation slot of the operation in slot `index` (not connected: none).
    [[nodiscard]] net::cancellation_slot cancellation_slot_of(std::uint32_t index) const noexcept {
        return slots_[index].cancel;
    }
    // Whether `tag` (as `tag(index)` made it) names a pending operation.
    [[nodiscard]] bool is_pending(std::uint64_t tag) const noexcept { return slots_.names_taken(tag); }
    static_assert(npos == detail::cq_entry::no_waiter, "an entry with no waiter names no slot");

    // Takes a slot for `handler` (moved in), hooks its cancellation slot; npos when none is free
    // (the handler is left as it was). `qp` and `cq` name where it was posted and where its
    // completion arrives (drop_qp, remove). Exception-safe (slot_pool::acquire).
    template <class Completer, class Handler>
    std::uint32_t acquire(Handler& handler, bool batch, ibv_qp* qp = nullptr, ibv_cq* cq = nullptr,
                          ibv_srq* srq = nullptr) {
        // The caller is inside the dispatcher already (enter(): every initiation holds it).
        return slots_.acquire<Completer>(handler, ex_, batch, qp, cq, srq,
                                         [this](auto& cs, std::uint32_t index, std::uint32_t generation) {
                                             cs.template emplace<canceller>(anchor_.cell(), index, generation);
                                         });
    }

    // The wr_id that names slot `index` as it is now.
    [[nodiscard]] std::uint64_t tag(std::uint32_t index) const noexcept { return slots_.tag(index); }

    // Completes the pending (or cancelled) operation of slot `index` with `r`, then frees the slot.
    void complete(std::uint32_t index, detail::op_result const& r, bool posted) {
        auto const invoke = slots_.release(index);           // free from here on: the handler is moved out of it next
        if (slots_.pending() == 0) stop_reading_when_idle(); // whoever completed the last: run() may return
        // The handler is moved out and the slot's copy destroyed before it runs. Not posted, it runs
        // inline when its executor is running in this thread (net::dispatch): it may start the next
        // operation, destroy or move the dispatcher — nothing of the dispatcher is touched after.
        invoke(slots_[index], &r, posted, delivery());
    }

    // A pending operation whose work never reached the device: completed with `ec` (and the
    // exception that said so), posted.
    void fail(std::uint32_t index, error_code ec, std::exception_ptr ex = {}) {
        complete(index, detail::op_result{ec, {}, 0, std::move(ex)}, true);
    }

    // Makes sure the routed CQs are looked at: a sweep is posted unless one is queued already or
    // one is running (a handler it runs inline started an operation: it polls again before it
    // returns). Called when an operation starts (its request is posted).
    void watch() {
        if (sweep_queued_ || sweeping_) return;
        delivery().post([self = anchor_.cell()] { sweep(self, true); });
        sweep_queued_ = true; // once queued (posting may throw): the sweep runs after this returns
    }

    // Starts waiting on the descriptor unless it already is.
    void ensure_reading() {
        if (reading_) return;
        // Asio's reactor watches the descriptor edge-triggered, and a wait takes only the edges
        // that come after it starts: an event that came while no wait was queued would never wake
        // it. So look first; what is already there is read now. A channel in error (its device
        // gone: POLLERR, and reads that find nothing) fails every operation instead of waking
        // the dispatcher again and again.
        pollfd pfd{descriptor_.native_handle(), POLLIN, 0};
        if (::poll(&pfd, 1, 0) > 0) {
            if ((pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) [[unlikely]] {
                fail_all(std::make_error_code(std::errc::io_error));
                return;
            }
            delivery().post([self = anchor_.cell()] {
                completion_dispatcher* const d = self.get_if();
                if (d == nullptr) return;
                auto const inside = d->thread_.enter(who);
                d->reading_ = false;
                d->on_readable({});
            });
            reading_ = true; // once queued (posting may throw)
            return;
        }
        descriptor_.async_wait(net::posix::stream_descriptor::wait_read,
                               [self = anchor_.cell()](detail::net_error_code ec) {
                                   completion_dispatcher* const d = self.get_if();
                                   if (d == nullptr) return;
                                   auto const inside = d->thread_.enter(who);
                                   d->reading_ = false;
                                   if (ec == io::detail::operation_aborted()) { // nothing was pending
                                       if (d->slots_.pending() != 0) d->ensure_reading();
                                       return;
                                   }
                                   d->on_readable(ec);
                               });
        reading_ = true; // once the wait is queued (queuing may throw)
    }

    using cq_entry = detail::cq_entry;
    // The entry of `cq`, or null.
    [[nodiscard]] cq_entry* find(ibv_cq* native) noexcept { return cqs_.find(native); }
    /// @endcond

private:
    // Installed in an operation's cancellation slot, which may outlive the dispatcher (a slot of
    // a cancelled operation keeps it until its owner clears or reuses it): its cell tells where
    // the dispatcher is now, or that it is gone.
    struct canceller {
        canceller(rdmacxx::detail::link<completion_dispatcher> dispatcher, std::uint32_t slot,
                  std::uint32_t gen) noexcept
            : self(std::move(dispatcher)), index(slot), generation(gen) {}
        rdmacxx::detail::link<completion_dispatcher> self;
        std::uint32_t index;
        std::uint32_t generation;
        void operator()(net::cancellation_type_t type) const {
            if ((type & net::cancellation_type::terminal) == net::cancellation_type::none) return;
            completion_dispatcher* const d = self.get_if();
            if (d == nullptr) return; // the dispatcher is gone, and its operations with it
            d->abort(index, generation);
        }
    };

    // What it does when the objects it serves go, and the checks that make them tell it
    // (defined in dispatcher.hpp).
    static void on_qp_destroyed(void const* cell, void* qp) noexcept;
    static void on_srq_destroyed(void const* cell, void* srq) noexcept;
    static void on_cq_destroyed(void const* cell, void* cq) noexcept;
    std::size_t drop_qp(ibv_qp* qp) noexcept;
    void drop_cq(ibv_cq* cq) noexcept;
    void abort_now(std::uint32_t i) noexcept;

    // The channel, wherever it has moved to.
    completion_channel& channel() const { return channel_.get("completion dispatcher", "completion channel"); }
    // Cancellation. A batch wait, with nothing on the device, completes with operation_aborted
    // now (posted). A routed operation keeps its handler until its completion is reaped (route):
    // with cancel_mode::qp_to_error its QP goes to ERR so that the completion comes flushed at once.
    void abort(std::uint32_t index, std::uint32_t generation) {
        detail::op_slot& s = slots_[index];
        if (s.generation != generation || s.st != detail::op_slot::state::pending) return;
        s.cancel = {}; // the cancellation slot's handler is this one: leave it to its owner
        if (s.batch) {
            for (auto& e : cqs_)
                if (e.waiter == index) e.waiter = npos;
            complete(index, detail::op_result{io::detail::operation_aborted(), {}, 0}, true);
            stop_reading_when_idle();
            return;
        }
        slots_.mark_cancelled(index);
        if (cancel_ == cancel_mode::qp_to_error && s.qp != nullptr) {
            // Any state may go to ERR; a QP that cannot (destroyed under us is a caller's bug, the
            // device gone) leaves the operation waiting for whatever ends it, as cancel_mode::wait.
            (void)rdmacxx::detail::move_to_error(s.qp);
            watch(); // the flushed completions are there: reap them without a wake-up
        }
    }

    // With nothing pending, the descriptor's wait goes, so that io_context::run can return.
    void stop_reading_when_idle() {
        if (slots_.pending() == 0 && reading_) {
            detail::net_error_code ignored;
            descriptor_.cancel(ignored);
        }
    }

    void on_readable(error_code ec) {
        if (ec) [[unlikely]] {
            fail_all(ec);
            return;
        }
        try {
            while (ibv_cq* fired = channel().get_event()) {
                cq_entry* e = find(fired);
                if (e == nullptr) {
                    ::ibv_ack_cq_events(fired, 1); // another CQ on the shared channel
                    continue;
                }
                e->note(e->cq.get());
                if (e->batch)
                    serve_batch(*e);
                else
                    e->armed = false; // the sweep below polls it, and arms it again before the next wait
            }
        } catch (rdmacxx::error const& err) {
            fail_all(err.code());
            return;
        }
        if (slots_.pending() != 0)
            sweep(anchor_.cell(), false); // last: the handlers it runs may destroy the dispatcher
        else
            stop_reading_when_idle();
    }

    // The sweep: looks at the routed CQs before sleeping, as a hand-written event loop polls
    // before it waits, and completes what it finds, one completion at a time, each handler run
    // inline when its executor is running in this thread (a coroutine resumes here, and the
    // request it posts next is polled by the same sweep), at most `inline_budget` of them; then it
    // posts another sweep, so that the io_context's other handlers get their turn. Only when
    // every routed CQ is empty does it arm those that are not armed, poll them once more (nothing
    // that lands before the arm is missed) and wait on the descriptor. Static: a handler it runs
    // may destroy or move the dispatcher, which it follows through its cell. The completions it
    // polled and has not completed yet wait in `backlog_`: a handler that throws (out of run())
    // leaves them there, and the sweep posted on the way out takes them first. `posted`: run by
    // the sweep `watch` posted (not by a wake-up).
    static void sweep(rdmacxx::detail::link<completion_dispatcher> const& self, bool posted) {
        completion_dispatcher* d = self.get_if(); // wherever it has moved to; null: gone
        if (d == nullptr) return;
        auto const inside = d->thread_.enter(who); // its state outlives the dispatcher (thread_rule.hpp)
        if (posted) d->sweep_queued_ = false;
        struct guard {
            rdmacxx::detail::link<completion_dispatcher> const& self;
            int const unwinding = std::uncaught_exceptions();
            ~guard() {
                completion_dispatcher* const now = self.get_if();
                if (now == nullptr) return;
                now->sweeping_ = false;
                if (std::uncaught_exceptions() > unwinding) try {
                        now->watch(); // a handler threw: the rest of the batch, and the CQs, next time
                    } catch (...) {   // no memory to post with: the next operation or wake-up sweeps
                    }
            }
        } const on_exit{self};
        std::uint32_t index = npos;
        detail::op_result r{};
        for (unsigned budget = inline_budget;; --budget) {
            d = self.get_if(); // wherever the last handler left it
            if (d == nullptr) return;
            d->sweeping_ = true;
            if (!d->next(budget, index, r)) return;
            d->complete(index, r, false); // last: the handler may destroy or move the dispatcher
        }
    }

    // The next completion for the sweep to complete (its slot in `index`, its result in `r`), or
    // false when the sweep ends, the dispatcher then as it must be: idle, waiting on the
    // descriptor, or another sweep posted (`budget` spent).
    bool next(unsigned budget, std::uint32_t& index, detail::op_result& r) {
        for (;;) {
            if (slots_.pending() == 0) {
                // Nothing pending: what is polled already, and what the CQs hold, can only be
                // receive pools' messages (taken now, into their pools, which complete nothing
                // inline) or strays; nothing is armed.
                sweeping_ = false;
                try {
                    do {
                        while (backlog_at_ < backlog_end_)
                            (void)route(backlog_[backlog_at_++], index, r);
                        backlog_at_ = 0;
                        backlog_end_ = static_cast<std::uint32_t>(poll_routed(false));
                    } while (backlog_end_ != 0);
                } catch (rdmacxx::error const& err) {
                    fail_all(err.code());
                    return false;
                }
                stop_reading_when_idle();
                return false;
            }
            if (budget == 0) {
                sweeping_ = false;
                watch();
                return false;
            }
            while (backlog_at_ < backlog_end_)
                if (route(backlog_[backlog_at_++], index, r)) return true;
            std::size_t n = 0;
            try {
                n = poll_routed();
            } catch (rdmacxx::error const& err) {
                sweeping_ = false;
                fail_all(err.code());
                return false;
            }
            if (n == 0) {
                sweeping_ = false;
                ensure_reading();
                return false;
            }
            backlog_at_ = 0;
            backlog_end_ = static_cast<std::uint32_t>(n);
        }
    }

    // Polls the routed CQs into `backlog_` (cq_set::poll_routed); how many it took.
    std::size_t poll_routed(bool arm = true) { return cqs_.poll_routed(std::span{backlog_}, arm); }

    // Where completion `wc` goes: true with `index` and `r` set for a pending operation's; a
    // receive pool's goes to its pool, and one that names no pending operation is a stray.
    bool route(work_completion const& wc, std::uint32_t& index, detail::op_result& r) {
        auto const i = static_cast<std::uint32_t>(wc.wr_id() & 0xffffffffU);
        auto const generation = static_cast<std::uint32_t>(wc.wr_id() >> 32);
        if ((wc.wr_id() & pool_tag_bit) != 0) {
            if (!pools_.deliver(generation, static_cast<std::uint32_t>(i & ~pool_tag_bit), wc)) ++stray_;
            return false;
        }
        if (!slots_.routed(i, generation)) [[unlikely]] {
            ++stray_;
            return false;
        }
        // A cancelled operation completes with its own outcome, which the cancellation did not
        // change, except the flush that cancel_mode::qp_to_error caused: that is its abort.
        error_code ec = wc.error_code();
        if (slots_[i].st == detail::op_slot::state::cancelled && cancel_ == cancel_mode::qp_to_error &&
            wc.status() == IBV_WC_WR_FLUSH_ERR)
            ec = io::detail::operation_aborted();
        index = i;
        r.ec = ec; // the sweep's result holds nothing else
        r.wc = wc;
        return true;
    }

    // An event of a batch CQ: the waiter (if any) takes what is there, arm-then-poll.
    void serve_batch(cq_entry& e) {
        if (e.waiter == npos) return; // left unarmed: the next async_wait polls first
        std::size_t n = e.poll(e.cq.get(), e.out);
        if (n == 0) {
            e.arm(e.cq.get());
            n = e.poll(e.cq.get(), e.out);
        }
        if (n == 0) return;
        std::uint32_t const w = std::exchange(e.waiter, npos);
        complete(w, detail::op_result{{}, {}, n}, true);
    }

    // The descriptor or the channel failed: every pending operation completes with `ec`.
    void fail_all(error_code ec) {
        for (std::uint32_t i = 0; i < slots_.size(); ++i) {
            if (slots_.taken(i)) {
                for (auto& e : cqs_)
                    if (e.waiter == i) e.waiter = npos;
                complete(i, detail::op_result{ec, {}, 0}, true);
            }
        }
        stop_reading_when_idle(); // a sweep may fail while a wait is queued: run() must be able to return
    }

    executor_type ex_;
    rdmacxx::detail::link<completion_channel> channel_; // the channel's cell: followed when it moves
    net::posix::stream_descriptor descriptor_;
    detail::slot_pool slots_;
    detail::cq_set cqs_;
    rdmacxx::detail::anchor<completion_dispatcher> anchor_; // where its handlers find it; null once gone
    std::shared_ptr<detail::post_pool> pool_;               // the handlers it posts: one block per slot and its sweep
    std::uint64_t stray_ = 0;
    cancel_mode cancel_ = cancel_mode::qp_to_error;
    detail::pool_routes pools_; // the receive pools it routes to
    bool reading_ = false;
    bool sweep_queued_ = false;
    detail::thread_rule thread_; // who may use it now (thread_rule.hpp)
    // Completions a sweep polled and has not completed yet: [backlog_at_, backlog_end_).
    std::array<work_completion, 16> backlog_;
    std::uint32_t backlog_at_ = 0;
    std::uint32_t backlog_end_ = 0;
    bool sweeping_ = false; // a sweep is running: an operation that starts needs no other
    // Handlers a sweep runs inline before it lets the io_context's other handlers run.
    static constexpr unsigned inline_budget = 64;
    static constexpr char const* who = "a completion dispatcher";
    std::vector<std::shared_ptr<void>> kept_; // keep(): destroyed first, once the dispatcher is orphaned
    // ex_'s io_context executor when it is one of the pool's owner (delivery()).
    std::optional<net::io_context::executor_type> io_;

    // Where its completions and sweeps go.
    [[nodiscard]] detail::delivery delivery() const noexcept { return {pool_, ex_, io_ ? &*io_ : nullptr}; }
};

} // namespace io
} // namespace v0
} // namespace rdmacxx
