#pragma once
/// @file
/// `queue_pair<Transport, Completion>`: a QP of transport RC, UC or UD whose completions are
/// waited for by a `busy_poll` or `event_driven` CQ; its typed, compile-time-checked
/// posting. Its state transitions are in qp_state.hpp, the QP-independent pieces of posting in
/// qp_post.hpp, `selective_signaling` in selective_signaling.hpp; this header includes them all.

#include "rdmacxx/cq.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/endpoint.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/post_policy.hpp"
#include "rdmacxx/qp_options.hpp"
#include "rdmacxx/qp_post.hpp"
#include "rdmacxx/qp_state.hpp"
#include "rdmacxx/selective_signaling.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// A queue pair of transport `Transport` (`rc`, `uc`, `ud`) whose CQs use the completion
/// strategy `Completion` (`busy_poll`, `event_driven`).
///
/// Owns the `ibv_qp`; move-only. It finds its protection domain wherever that has moved to
/// (`pd()`, through the domain's cell), and may itself move after objects that use it were made
/// (`selective_signaling`, a `cm::connection` on it): they follow it the same way (see
/// docs/ownership.md). Its protection domain and CQs must outlive it (the device refuses to free
/// them while it exists). It starts in RESET; `connect` (RC, UC) or `activate` (UD) walks RESET → INIT → RTR → RTS,
/// and the single steps are public too.
///
/// Posting: `post(wr…)` takes one or more typed send requests and posts them as one chain with
/// one doorbell, built on the stack (no heap); a request the transport cannot carry does not
/// compile. Before anything reaches the device it refuses inline data over `max_inline_data`, a
/// UD send over the path MTU and an unaddressed UD send. `try_post` reports instead of throwing.
/// Thread-safety: posting to one QP from several threads needs the caller's lock (as verbs).
/// @see ibv_create_qp(3), ibv_modify_qp(3), ibv_post_send(3), ibv_post_recv(3)
template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post>
class queue_pair : public qp_state_machine<queue_pair<Transport, Completion, Post>, Transport> {
    friend class qp_state_machine<queue_pair, Transport>;

    static constexpr bool tracked = detail::tracks_in_flight<Completion>;

public:
    using transport_type = Transport;
    using completion_type = Completion;
    using post_type = Post;

    /// Creates a QP in `pd` whose send completions go to `send_cq` and receive completions to
    /// `recv_cq` (they may be the same CQ), sized by `caps`.
    /// @throws sys_error when ibv_create_qp(3) fails (EINVAL for caps past the device limits).
    queue_pair(protection_domain& pd, completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq,
               qp_capabilities const& caps = {})
        : queue_pair(pd, send_cq, recv_cq, nullptr, caps) {}

    /// Creates a QP that takes its receive buffers from `srq` (its own receive queue stays
    /// empty: post receives to the SRQ); otherwise as the constructor above.
    /// @throws sys_error when ibv_create_qp(3) fails.
    queue_pair(protection_domain& pd, completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq,
               shared_receive_queue& srq, qp_capabilities const& caps = {})
        : queue_pair(pd, send_cq, recv_cq, &srq, caps) {}

    /// Takes ownership of `handle`, a QP of this transport already created in `pd` by other
    /// means — rdma_create_qp(3) on an RDMA CM id, which also drives its state transitions (see
    /// cm/id.hpp). `caps` are what it was created with, `path_mtu_bytes` the largest UD message
    /// (0 for a connected QP). Its PSN is the CM's: `psn()` reads 0. Destroyed with
    /// ibv_destroy_qp(3) as any other; whoever created it on a CM id clears `id->qp` first.
    /// @throws std::bad_alloc when its cell cannot be allocated (the handle is then destroyed).
    queue_pair(adopt_qp_t, protection_domain& pd, ibv_qp* handle, qp_capabilities const& caps,
               std::uint32_t path_mtu_bytes = 0)
        : pd_(pd.anchor_cell()), qp_(handle), caps_(caps), path_mtu_bytes_(path_mtu_bytes), anchor_(this) {}

    /// As the adopting constructor above, also naming the QP's CQs: a `checked` QP attaches its
    /// in-flight ledger to them (rdmacxx::cm::id::create_qp uses this one; a checked QP adopted
    /// by the constructor above is not tracked).
    /// @throws std::bad_alloc when the ledger cannot be allocated (the handle is then destroyed).
    queue_pair(adopt_qp_t, protection_domain& pd, ibv_qp* handle, qp_capabilities const& caps,
               std::uint32_t path_mtu_bytes, completion_queue<Completion>& send_cq,
               completion_queue<Completion>& recv_cq)
        : pd_(pd.anchor_cell()), qp_(handle), caps_(caps), path_mtu_bytes_(path_mtu_bytes), anchor_(this) {
        if constexpr (tracked)
            if (qp_) track(send_cq, recv_cq);
    }

private:
    queue_pair(protection_domain& pd, completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq,
               shared_receive_queue* srq, qp_capabilities const& caps)
        : pd_(pd.anchor_cell()), anchor_(this) {
        ibv_qp_init_attr init =
            detail::qp_init_attributes(Transport::qp_type, send_cq.native_handle(), recv_cq.native_handle(),
                                       srq != nullptr ? srq->native_handle() : nullptr, caps);
        if constexpr (Post::extended)
            create_extended(pd, init);
        else
            qp_.reset(::ibv_create_qp(pd.native_handle(), &init));
        if (!qp_) [[unlikely]]
            detail::throw_errno("ibv_create_qp", [&] { return detail::describe_request(Transport::name, caps); });
        caps_ = detail::granted(init);
        psn_ = std::random_device{}() & 0xffffffU;
        if constexpr (tracked) track(send_cq, recv_cq);
    }

    void track(completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq) requires(tracked) {
        tracking_ = std::make_unique<typename detail::dependent<Completion, detail::qp_tracking>::type>(
            qp_->context, qp_->qp_num, send_cq.in_flight_ledger(), recv_cq.in_flight_ledger());
    }

    // The extended post API: the QP made by detail::create_qp_ex, and its ibv_qp_ex.
    void create_extended(protection_domain& pd, ibv_qp_init_attr& init) {
        ibv_context* const verbs = pd.native_handle()->context; // valid wherever the context moved
        qp_.reset(detail::create_qp_ex<Transport>(pd.native_handle(), init, window_ops_));
        qpx_ = ::ibv_qp_to_qp_ex(qp_.get());
        if (qpx_ == nullptr) [[unlikely]]
            detail::throw_sys(EOPNOTSUPP, "ibv_qp_to_qp_ex",
                              "on " + std::string{::ibv_get_device_name(verbs->device)} +
                                  ": the device has no extended post API");
    }

    // The one post path, for plain and checked QPs alike: posts the `n` linked requests of
    // `chain` with ibv_post_send(3) or ibv_post_recv(3). A checked QP records them in its ledger
    // first (the tags become their wr_id, `first` the first tag); a checked QP adopted without its
    // CQs has no ledger and posts untracked. Returns the verb's value, `bad_wr` as the verb sets it.
    template <class Wr>
    RDMACXX_HOT int submit(Wr* chain, std::size_t n, Wr*& bad_wr,
                           [[maybe_unused]] std::uint64_t& first) noexcept(!tracked) {
        if constexpr (tracked)
            if (tracking_) first = tracking_->ledger().record(chain, n);
        if constexpr (std::is_same_v<Wr, ibv_send_wr>)
            return ::ibv_post_send(qp_.get(), chain, &bad_wr);
        else
            return ::ibv_post_recv(qp_.get(), chain, &bad_wr);
    }

    // After a refused post, out of line: the user wr_id of request `i` (its `wr_id` in the chain),
    // the first not posted; a checked QP's ledger forgets it and those after it.
    template <class Wr>
    RDMACXX_COLD std::uint64_t refused(std::uint64_t wr_id, [[maybe_unused]] std::size_t i,
                                       [[maybe_unused]] std::uint64_t first) noexcept {
        if constexpr (tracked) {
            if (tracking_) {
                if constexpr (std::is_same_v<Wr, ibv_send_wr>)
                    return tracking_->ledger().cancel_sends(first + i);
                else
                    return tracking_->ledger().cancel_recvs(first + i);
            }
        }
        return wr_id;
    }
    // Throws the wr_error of a refused post of request `i` (its chain `wr_id` and `opcode`, -1 for
    // a receive); its bad_index counts from `base`.
    template <class Wr>
    [[noreturn]] RDMACXX_COLD void throw_refused(int rc, std::size_t i, std::uint64_t wr_id, int opcode,
                                                 std::uint64_t first, std::size_t base) {
        std::uint64_t const user_wr_id = refused<Wr>(wr_id, i, first);
        detail::throw_post(rc, std::is_same_v<Wr, ibv_send_wr> ? "ibv_post_send" : "ibv_post_recv", base + i,
                           user_wr_id, opcode, qp_num());
    }

    // submit of the first `n` requests of `chain`, throwing wr_error as post does; its bad_index
    // counts from `base`.
    template <class Wr, std::size_t N>
    RDMACXX_HOT void submit_or_throw(std::array<Wr, N>& chain, std::size_t n = N, std::size_t base = 0) {
        Wr* bad_wr = nullptr;
        std::uint64_t first = 0;
        if (int rc = submit(chain.data(), n, bad_wr, first); rc != 0) [[unlikely]] {
            std::size_t const i = detail::index_of(chain, n, bad_wr);
            if constexpr (tracked)
                throw_refused<Wr>(rc, i, chain[i].wr_id, detail::opcode_of(chain[i]), first, base);
            else
                detail::throw_post(rc, std::is_same_v<Wr, ibv_send_wr> ? "ibv_post_send" : "ibv_post_recv", base + i,
                                   chain[i].wr_id, detail::opcode_of(chain[i]), qp_num());
        }
    }

    // submit of the whole `chain`, reporting as try_post does: ENOMEM (nothing posted) when a
    // checked QP's ledger cannot grow.
    template <class Wr, std::size_t N>
    RDMACXX_HOT post_result try_submit(std::array<Wr, N>& chain) noexcept {
        Wr* bad_wr = nullptr;
        std::uint64_t first = 0;
        int rc = 0;
        if constexpr (tracked) {
            try {
                rc = submit(chain.data(), N, bad_wr, first);
            } catch (...) {
                return {ENOMEM, 0};
            }
        } else {
            rc = submit(chain.data(), N, bad_wr, first);
        }
        if (rc != 0) [[unlikely]] {
            std::size_t const i = detail::index_of(chain, N, bad_wr);
            (void)refused<Wr>(chain[i].wr_id, i, first);
            return {rc, i};
        }
        return {};
    }

    // The extended API's post path, for plain and checked QPs alike: the requests written between
    // ibv_wr_start(3) and ibv_wr_complete(3), each with its tag (a checked QP's ledger tag, else
    // its wr_id). Returns ibv_wr_complete's value; a refused batch is dropped whole and forgotten.
    template <class... Wrs>
    RDMACXX_HOT int submit_extended(Wrs const&... wrs) noexcept(!tracked) {
        std::array<std::uint64_t, sizeof...(Wrs)> tags{wrs.wr_id()...};
        bool const recorded = record_extended(tags, wrs...); // first: nothing may throw after start
        ::ibv_wr_start(qpx_);
        std::size_t k = 0;
        (detail::write_extended<Transport>(qpx_, wrs, tags[k++]), ...);
        int const rc = ::ibv_wr_complete(qpx_);
        if (rc != 0) [[unlikely]]
            forget_extended(recorded, tags[0]);
        return rc;
    }

    // One chunk of `post(std::span)` through the extended API; wr_error's bad_index is `base`.
    template <class W>
    void submit_extended(std::span<W const> chunk, std::size_t base) {
        std::array<std::uint64_t, max_chain> tags;
        for (std::size_t i = 0; i < chunk.size(); ++i)
            tags[i] = chunk[i].wr_id();
        bool recorded = false;
        if constexpr (tracked) {
            if (tracking_) {
                std::size_t k = 0;
                try {
                    for (; k < chunk.size(); ++k)
                        tags[k] = tracking_->ledger().record_send(chunk[k]);
                } catch (...) {
                    if (k != 0) (void)tracking_->ledger().cancel_sends(tags[0]);
                    throw;
                }
                recorded = true;
            }
        }
        ::ibv_wr_start(qpx_);
        for (std::size_t i = 0; i < chunk.size(); ++i)
            detail::write_extended<Transport>(qpx_, chunk[i], tags[i]);
        if (int rc = ::ibv_wr_complete(qpx_); rc != 0) [[unlikely]] {
            forget_extended(recorded, tags[0]);
            detail::throw_post(rc, "ibv_wr_complete", base, chunk[0].wr_id(), W::opcode, qp_num());
        }
    }

    // A checked QP with a ledger records extended-API requests, their tags into `tags`: all or
    // none. False (tags untouched) for a plain QP or one without a ledger.
    template <std::size_t N, class... Wrs>
    bool record_extended([[maybe_unused]] std::array<std::uint64_t, N>& tags, [[maybe_unused]] Wrs const&... wrs) {
        if constexpr (tracked) {
            if (!tracking_) return false;
            std::size_t k = 0;
            try {
                ((tags[k] = tracking_->ledger().record_send(wrs), ++k), ...);
            } catch (...) {
                if (k != 0) (void)tracking_->ledger().cancel_sends(tags[0]);
                throw;
            }
            return true;
        } else {
            return false;
        }
    }
    // Forgets the recorded requests of a refused extended batch.
    void forget_extended([[maybe_unused]] bool recorded, [[maybe_unused]] std::uint64_t first_tag) noexcept {
        if constexpr (tracked)
            if (recorded) (void)tracking_->ledger().cancel_sends(first_tag);
    }

    // A checked QP about to be destroyed or reset: to ERR, its completions drained; the error
    // goes to the in-flight handler when `report` is set.
    void retire_in_flight(bool report) noexcept {
        if constexpr (tracked) {
            if (!tracking_ || !qp_) return;
            if (auto e = tracking_->drain(qp_.get(), Transport::name, Transport::connected, drain_timeout); e && report)
                detail::report_in_flight(*e);
        }
    }

public:
    /// How long destroying a `checked` QP waits for the flushed completions of its work in flight.
    static constexpr std::chrono::milliseconds drain_timeout{5000};

    /// Takes over `other`'s QP and the objects that use it (they follow it here); `other` is left
    /// empty.
    queue_pair(queue_pair&& other) noexcept
        : pd_(std::move(other.pd_)), tracking_(std::move(other.tracking_)), qp_(std::move(other.qp_)),
          qpx_(std::exchange(other.qpx_, {})), caps_(other.caps_), psn_(other.psn_),
          path_mtu_bytes_(other.path_mtu_bytes_), atomics_(other.atomics_), window_ops_(other.window_ops_),
          watch_(std::move(other.watch_)), anchor_(std::move(other.anchor_), this) {}
    /// Takes `other`'s QP; a `checked` QP first retires its own work in flight as the destructor
    /// does. The objects that used the QP held are orphaned (`orphaned_error`); those of `other`'s
    /// follow it here.
    queue_pair& operator=(queue_pair&& other) noexcept {
        if (this != &other) {
            void* const held = qp_.get();
            retire_in_flight(true);
            qp_.reset();                            // the QP held goes before the ledger that accounts for it
            if (held != nullptr) watch_.fire(held); // once it is gone (its handle only a key)
            pd_ = other.pd_;
            qp_ = std::move(other.qp_);
            qpx_ = std::exchange(other.qpx_, {});
            tracking_ = std::move(other.tracking_);
            caps_ = other.caps_;
            psn_ = other.psn_;
            path_mtu_bytes_ = other.path_mtu_bytes_;
            atomics_ = other.atomics_;
            window_ops_ = other.window_ops_;
            watch_ = std::move(other.watch_);
            anchor_.take(std::move(other.anchor_), this);
        }
        return *this;
    }
    /// Destroys the QP (ibv_destroy_qp(3)). A `checked` QP with work in flight is first moved to
    /// ERR and its completions drained from its CQs (up to `drain_timeout`), so that no buffer is
    /// written afterwards; when send requests were in flight, or some did not complete in time,
    /// an `in_flight_error` goes to the handler (see `set_in_flight_handler`). Destroy a checked
    /// QP on the thread that polls its CQs. The Asio dispatcher that routed its operations is told
    /// once the QP is gone (their handlers then run: rdmacxx/asio/dispatcher.hpp); destroy it on
    /// that dispatcher's thread.
    ~queue_pair() {
        void* const held = qp_.get();
        retire_in_flight(true);
        qp_.reset();
        if (held != nullptr) watch_.fire(held); // once it is gone: the device no longer touches its memory
    }

    /// Send-queue requests posted and not yet completed (`checked` QPs): a request is complete
    /// once its completion, or that of a later send, has been polled. Thread-safety: may be
    /// called from any thread (the ledger is locked).
    [[nodiscard]] std::uint64_t in_flight_sends() const noexcept requires(tracked) {
        return tracking_ ? tracking_->ledger().sends() : 0;
    }
    /// Receive requests posted to this QP's own receive queue and not yet completed (`checked` QPs).
    /// Thread-safety: as `in_flight_sends`.
    [[nodiscard]] std::uint64_t in_flight_recvs() const noexcept requires(tracked) {
        return tracking_ ? tracking_->ledger().recvs() : 0;
    }

    /// The QP number.
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp_->qp_num; }
    /// What the device gave at creation.
    [[nodiscard]] qp_capabilities const& capabilities() const noexcept { return caps_; }
    /// The first PSN this QP sends (random, 24 bits).
    [[nodiscard]] std::uint32_t psn() const noexcept { return psn_; }
    /// The path MTU in bytes fixed at RTR (the port's active MTU for UD); 0 before.
    [[nodiscard]] std::uint32_t path_mtu_bytes() const noexcept { return path_mtu_bytes_; }

    /// Posts `wrs` to the send queue as one chain, one doorbell, no heap allocation.
    /// @throws argument_error (nothing posted) for inline data over `max_inline_data`, a UD send
    ///         over the path MTU or without a destination; wr_error with `bad_index()` when
    ///         ibv_post_send(3) refuses a request (those before it were posted).
    template <class... Wrs>
        requires(sizeof...(Wrs) > 0 && (postable_on<Wrs, Transport> && ...))
    RDMACXX_HOT void post(Wrs const&... wrs) {
        check_all(wrs...);
        if constexpr (Post::extended) {
            if (int rc = submit_extended(wrs...); rc != 0) [[unlikely]]
                detail::throw_post(rc, "ibv_wr_complete", 0, detail::first_wr_id(wrs...),
                                   detail::first_opcode<Wrs...>(), qp_num());
        } else {
            std::array<ibv_send_wr, sizeof...(Wrs)> chain;       // link fills what providers read: no zeroing
            std::array<ibv_sge, detail::sge_total<Wrs...>> sges; // filled by link
            detail::link_send<Transport>(chain, sges, wrs...);
            if constexpr (detail::any_posted_effect<Wrs...>) {
                try {
                    submit_or_throw(chain);
                } catch (wr_error const& e) { // those before the refused one were posted
                    detail::apply_posted(e.bad_index(), wrs...);
                    throw;
                }
            } else {
                submit_or_throw(chain);
            }
        }
        if constexpr (detail::any_posted_effect<Wrs...>) detail::apply_posted(sizeof...(Wrs), wrs...);
    }

    /// Posts a run of requests of one type (a span of const or non-const requests, e.g.
    /// `std::span{vector}`), built on the stack and chained `max_chain` at a time (one doorbell
    /// per 64 requests, no heap allocation).
    /// @throws argument_error (nothing of that chunk posted) as `post(wrs…)`; wr_error whose
    ///         `bad_index()` counts from the start of `wrs` when ibv_post_send(3) refuses one.
    template <class W>
        requires postable_on<std::remove_const_t<W>, Transport>
    void post(std::span<W> requests) {
        std::span<std::remove_const_t<W> const> const wrs{requests};
        if constexpr (Post::extended) {
            for (std::size_t i = 0; i < wrs.size(); ++i)
                check_one(wrs[i], i);
            for (std::size_t base = 0; base < wrs.size(); base += max_chain) {
                std::size_t const n = std::min(max_chain, wrs.size() - base);
                submit_extended(wrs.subspan(base, n), base); // a refused chunk posts nothing
                detail::apply_posted_span(wrs, base, base + n);
            }
        } else {
            for (std::size_t base = 0; base < wrs.size(); base += max_chain) {
                std::size_t const n = std::min(max_chain, wrs.size() - base);
                std::array<ibv_send_wr, max_chain> chain;
                for (std::size_t i = 0; i < n; ++i) {
                    check_one(wrs[base + i], base + i);
                    wrs[base + i].template build<Transport>(chain[i]); // every field providers read: no zeroing
                    chain[i].next = i + 1 < n ? &chain[i + 1] : nullptr;
                }
                if constexpr (detail::has_posted_effect<W>) {
                    try {
                        submit_or_throw(chain, n, base);
                    } catch (wr_error const& e) { // its bad_index counts from the start of `wrs`
                        detail::apply_posted_span(wrs, base, e.bad_index());
                        throw;
                    }
                    detail::apply_posted_span(wrs, base, base + n);
                } else {
                    submit_or_throw(chain, n, base);
                }
            }
        }
    }

    /// Requests per doorbell of `post(std::span)` and `post_recv(std::span)`.
    static constexpr std::size_t max_chain = 64;

    /// Posts a run of receive requests of one type whose length is known only at run time (a
    /// span of const or non-const requests):
    /// built on the stack (no heap allocation) and chained `max_chain` at a time, so that up to
    /// 64 receives reach the device with one ibv_post_recv(3), one doorbell.
    /// @throws wr_error whose `bad_index()` counts from the start of `wrs` when ibv_post_recv(3)
    ///         refuses one (e.g. ENOMEM on a full receive queue): those before it were posted,
    ///         it and those after it were not.
    /// @see ibv_post_recv(3)
    template <class W>
        requires recv_work_request<std::remove_const_t<W>>
    void post_recv(std::span<W> requests) {
        std::span<std::remove_const_t<W> const> const wrs{requests};
        for (std::size_t base = 0; base < wrs.size(); base += max_chain) {
            std::size_t const n = std::min(max_chain, wrs.size() - base);
            std::array<ibv_recv_wr, max_chain> chain; // build and next set every field: no zeroing
            for (std::size_t i = 0; i < n; ++i) {
                wrs[base + i].build(chain[i]);
                chain[i].next = i + 1 < n ? &chain[i + 1] : nullptr;
            }
            submit_or_throw(chain, n, base);
        }
    }

    /// Any request the transport cannot carry lands here and fails to compile with the sentence
    /// of the operation (its `require_transport`).
    template <class... Wrs>
        requires(sizeof...(Wrs) > 0 && !(postable_on<Wrs, Transport> && ...))
    void post(Wrs const&...) {
        static_assert((send_work_request<Wrs> && ...),
                      "post() takes send-queue work requests; give receive requests to post_recv()");
        (detail::require_transport<Wrs, Transport>(), ...);
    }

    /// As `post`, but reports refusal instead of throwing: EINVAL with the index for a request
    /// refused before posting (nothing posted), or ibv_post_send(3)'s errno and bad index.
    template <class... Wrs>
        requires(sizeof...(Wrs) > 0 && (postable_on<Wrs, Transport> && ...))
    RDMACXX_HOT post_result try_post(Wrs const&... wrs)
    noexcept {
        if (std::size_t bad_check = first_refused(wrs...); bad_check != npos) [[unlikely]]
            return {EINVAL, bad_check};
        if constexpr (Post::extended) {
            int rc = 0;
            try {
                rc = submit_extended(wrs...);
            } catch (...) { // a checked QP's ledger could not grow: nothing was posted
                return {ENOMEM, 0};
            }
            if (rc != 0) [[unlikely]]
                return {rc, 0};
            if constexpr (detail::any_posted_effect<Wrs...>) detail::apply_posted(sizeof...(Wrs), wrs...);
            return {};
        } else {
            std::array<ibv_send_wr, sizeof...(Wrs)> chain;       // link fills what providers read: no zeroing
            std::array<ibv_sge, detail::sge_total<Wrs...>> sges; // filled by link
            detail::link_send<Transport>(chain, sges, wrs...);
            post_result const r = try_submit(chain);
            if constexpr (detail::any_posted_effect<Wrs...>)
                detail::apply_posted(r ? sizeof...(Wrs) : r.bad_index, wrs...);
            return r;
        }
    }

    /// Posts receive requests `wrs` as one chain.
    /// @throws wr_error with `bad_index()` when ibv_post_recv(3) refuses one.
    template <recv_work_request... Wrs>
        requires(sizeof...(Wrs) > 0)
    RDMACXX_HOT void post_recv(Wrs const&... wrs) {
        std::array<ibv_recv_wr, sizeof...(Wrs)> chain;       // link_recv sets every field: no zeroing
        std::array<ibv_sge, detail::sge_total<Wrs...>> sges; // filled by link_recv
        detail::link_recv(chain, sges, wrs...);
        submit_or_throw(chain);
    }

    /// As `post_recv`, reporting refusal instead of throwing.
    template <recv_work_request... Wrs>
        requires(sizeof...(Wrs) > 0)
    RDMACXX_HOT post_result try_post_recv(Wrs const&... wrs)
    noexcept {
        std::array<ibv_recv_wr, sizeof...(Wrs)> chain;       // link_recv sets every field: no zeroing
        std::array<ibv_sge, detail::sge_total<Wrs...>> sges; // filled by link_recv
        detail::link_recv(chain, sges, wrs...);
        return try_submit(chain);
    }

    /// The protection domain, wherever it has moved to.
    /// @throws orphaned_error when the protection domain was destroyed.
    [[nodiscard]] protection_domain& pd() const { return pd_.get("queue pair", "protection domain"); }

    /// @cond
    // The stable cell through which the objects that use this QP find it.
    [[nodiscard]] detail::link<queue_pair> anchor_cell() const noexcept { return anchor_.cell(); }
    // Who is told before the QP is destroyed (the Asio dispatcher that routes its operations).
    [[nodiscard]] detail::destruction_watch& destruction_watch() noexcept { return watch_; }
    /// @endcond
    /// The verbs handle.
    [[nodiscard]] ibv_qp* native_handle() const noexcept { return qp_.get(); }

private:
    static constexpr std::size_t npos = static_cast<std::size_t>(-1);

    // Why request `w` cannot be posted, or nullptr; `limit` receives the limit it broke.
    // Always inlined, as check_one: called out of line (GCC stops inlining within a chain of 16),
    // they take each request's address, which forces every typed request of the chain onto the
    // stack; inlined, the checks fold away and the requests stay in registers.
    template <class W>
    [[gnu::always_inline]] char const* refusal(W const& w, std::uint32_t& limit) const noexcept {
        if ((w.flags() & IBV_SEND_INLINE) != 0 && w.bytes() > caps_.max_inline_data) [[unlikely]] {
            limit = caps_.max_inline_data;
            return "is over the QP's max_inline_data";
        }
        if constexpr (tracked && detail::atomic_request<W>) {
            if (!atomics_) [[unlikely]] { // checked QPs only: the unchecked post path stays as verbs
                limit = 0;
                return "is an atomic, which the device does not support (atomic_cap IBV_ATOMIC_NONE)";
            }
        }
        if constexpr (Post::extended && (W::send_op & detail::window_send_ops) != 0) {
            if (!window_ops_) [[unlikely]] {
                limit = 0;
                return "is a memory-window operation, which this device's extended post API refused at "
                       "ibv_create_qp_ex (use legacy_post)";
            }
        }
        if constexpr (Transport::qp_type == IBV_QPT_UD) {
            if (w.bytes() > path_mtu_bytes_) [[unlikely]] {
                limit = path_mtu_bytes_;
                return "is over the UD path MTU";
            }
            if (w.destination().ah == nullptr) [[unlikely]] {
                limit = 0;
                return "has no destination: address a UD send with .to(ah, remote_qpn, remote_qkey)";
            }
        }
        return nullptr;
    }

    template <class... Wrs>
    RDMACXX_HOT void check_all(Wrs const&... wrs) const {
        std::size_t i = 0;
        (check_one(wrs, i++), ...);
    }
    template <class W>
    [[gnu::always_inline]] void check_one(W const& w, std::size_t index) const {
        std::uint32_t limit = 0;
        if (char const* why = refusal(w, limit); why != nullptr) [[unlikely]]
            detail::throw_refused(why, W::name, w.bytes(), limit, index, qp_num());
    }
    template <class... Wrs>
    std::size_t first_refused(Wrs const&... wrs) const noexcept {
        std::size_t i = 0, bad = npos;
        std::uint32_t limit = 0;
        ((bad == npos && refusal(wrs, limit) != nullptr ? bad = i : 0, ++i), ...);
        return bad;
    }

    detail::link<protection_domain> pd_; // the domain's stable cell: valid when the domain moves
    struct none {};                      // what an untracked QP tracks, or a legacy_post QP holds for its ibv_qp_ex
    // Before qp_: destroyed after it, so that the ledger outlives the ibv_qp it accounts for.
    [[no_unique_address]] std::conditional_t<tracked, std::unique_ptr<detail::qp_tracking>, none> tracking_{};
    std::unique_ptr<ibv_qp, detail::destroy_with<&::ibv_destroy_qp>> qp_;
    [[no_unique_address]] std::conditional_t<Post::extended, ibv_qp_ex*, none> qpx_{};
    qp_capabilities caps_{};
    std::uint32_t psn_ = 0;
    std::uint32_t path_mtu_bytes_ = 0;
    bool atomics_ = true;
    bool window_ops_ = true;            // false: an extended QP whose device refused the memory-window operations
    detail::destruction_watch watch_;   // told before the QP goes
    detail::anchor<queue_pair> anchor_; // after qp_: the QP is destroyed when it throws
};

} // namespace v0
} // namespace rdmacxx
