#pragma once
/// @file
/// `cm::connection`: one RDMA CM connection, which owns its id and either owns or borrows its PD,
/// CQs, SRQ, completion channel and queue pair; and `cm::connection_options`, what the flows make
/// one with. The flows that make one are the handshake of cm/handshake.hpp (`cm::connect`) and
/// cm/listener.hpp (`accept`); multicast is in cm/multicast.hpp (rdmacxx/cm.hpp includes them all).

#include "rdmacxx/ah.hpp"
#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/cm/id.hpp"
#include "rdmacxx/cm/monitor.hpp"
#include "rdmacxx/cm/resources.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/detail/callback.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/post_policy.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/transport.hpp"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// How long each step of the CM's flows may take before it throws `timeout_error` naming the
/// step (`step()`): each step's own field when set, else the general one (`resolve` for the two
/// resolutions, `event` for connect, accept and disconnect). Durations in milliseconds. Not
/// to be confused with the QP's `qp_settings::local_ack_timeout`, which governs retransmission.
struct deadlines {
    std::chrono::milliseconds resolve{2000};                    ///< address and route resolution, each
    std::chrono::milliseconds event{10000};                     ///< any other awaited event
    std::optional<std::chrono::milliseconds> resolve_address{}; ///< rdma_resolve_addr(3); else `resolve`
    std::optional<std::chrono::milliseconds> resolve_route{};   ///< rdma_resolve_route(3); else `resolve`
    std::optional<std::chrono::milliseconds> connect{};         ///< connect until established; else `event`
    std::optional<std::chrono::milliseconds> accept{};          ///< accept until established; else `event`
    std::optional<std::chrono::milliseconds> disconnect{};      ///< `disconnect()`'s wait; else `event`

    /// The time step `s` may take (its own field, else the general one).
    [[nodiscard]] std::chrono::milliseconds of(step s) const noexcept {
        switch (s) {
        case step::resolve_address:
            return resolve_address.value_or(resolve);
        case step::resolve_route:
            return resolve_route.value_or(resolve);
        case step::connect:
            return connect.value_or(event);
        case step::accept:
            return accept.value_or(event);
        case step::disconnect:
            return disconnect.value_or(event);
        case step::join:
        case step::other:
            break;
        }
        return event;
    }
};

/// What the CM's flows (`cm::connect`, `connect_request::accept`, the multicast group, the Asio
/// flows) make a connection with: the QP's queues and settings, the private data sent, the
/// deadline of every step, and the id's own options.
struct connection_options {
    qp_capabilities caps{}; ///< the queue pair's queues (made by the flow)
    int cq_entries = 256;   ///< entries of the connection's own CQ
    /// The QP's attributes (qp_settings.hpp: the same type, names and defaults as
    /// `queue_pair::connect`'s and the peer group's). Remote access is granted only as asked.
    qp_settings settings{};
    /// Sent to the peer with the connect request (active side) or the accept (passive side), at
    /// most `max_private_data` bytes (56 in a connect request and 196 in an accept on the TCP
    /// port space; 180 and 136 on UDP); `cm::to_private_data` encodes values. Copied: the
    /// options own it.
    std::vector<std::byte> private_data{};
    cm::deadlines deadlines{};       ///< how long each step may take
    std::optional<address> source{}; ///< local address to connect from
    /// Type of service (RFC 2474 DSCP << 2 | ECN) of the connection: on RoCE the QP's GRH traffic
    /// class unless `settings.traffic_class` is set. Set on the id before the route is resolved
    /// (`id::set_type_of_service`); empty: the kernel's default, 0.
    std::optional<std::uint8_t> type_of_service{};
    /// Share `source`'s port with other ids that ask for it too (`id::set_reuse_address`).
    bool reuse_address = false;
};

/// One RDMA CM connection (RC or UC over the TCP port space) or UD association (UDP port space):
/// owns its id and the queue pair made on it, and either owns or borrows the PD, the send and
/// receive CQs, the SRQ and the completion channel; keeps the peer's private data and
/// parameters as they came. `Post` is the post policy of the queue pair (a QP the flow makes is
/// `legacy_post`; one you made and connected with `cm::connect(dest, opt, cm::user_qp(qp))` may be any).
///
/// Three ways to make one, by `cm::connect` (active side) or `connect_request::accept`
/// (passive side):
/// - self-contained (the default): a PD, one CQ (with its own completion channel when the
///   strategy uses one) and the QP, all owned, on the device the CM resolved;
/// - on `cm::resources` you own (a server's one PD, registered memory, CQs, SRQ and channel):
///   only the QP is owned, the rest borrowed; they must outlive the connection (the device
///   refuses to free them while its QP exists);
/// - on a queue pair you created (`queue_pair<T, C, P>` of any post policy, `checked` or not):
///   nothing is owned but the id; the QP must outlive the connection (its monitor thread may move
///   the QP to ERR at any time); `cq()`, `send_cq()` and `recv_cq()` throw `argument_error`
///   (use your own CQs).
///
/// What it borrows may move while it lives (into a container, out of a function): it finds
/// each object through the object's cell, wherever it is now, and its accessors throw
/// `orphaned_error` for one that was destroyed (see docs/ownership.md). The connection itself
/// may move and be move-assigned.
///
/// Destruction tears down in order: disconnect (if still connected: the QP to ERR); with its
/// own CQ, drain it; destroy the QP it owns; then the CQ, channel and PD it owns, then the id and
/// its own event channel. It never polls a CQ it borrows: the flushed completions of its QP stay
/// there for your poller (see `cm::resources`).
///
/// A dead peer surfaces by itself: a connected (RC/UC) connection with its own event channel (the
/// default) has a monitor thread take that channel's events once it is established; when the CM
/// reports `disconnected` (the peer disconnected, or died: its kernel destroys its id and sends a
/// DREQ) or `device_removal`, the monitor moves the QP to ERR at once, so every WR in flight
/// completes with `IBV_WC_WR_FLUSH_ERR` and every thread waiting on the CQ wakes, answers the
/// peer's DREQ, and wakes `wait_disconnected`. Do not take events from `channel()` yourself
/// after establishment. A peer that vanishes without a DREQ (its host lost) is seen only by the
/// traffic: the next SEND, WRITE or READ fails after the ACK timeout × (retry count + 1) (with
/// the defaults 67.1 ms × 7, about 470 ms: `dead_peer_bound`) with `IBV_WC_RETRY_EXC_ERR`
/// (which moves the QP to ERR and flushes the rest), and the CM's own
/// `disconnected` follows when its DREQ times out; a connection that only has receives posted
/// learns nothing until it sends.
///
/// One made on a `cm::engine` (`cm::connect(engine&, …)`, `cm::accept(engine&, …)`) has no thread:
/// its id stays on the engine's channel, and the engine's `process()` does the same on
/// `disconnected` (`on_end` tells you). It keeps that channel open while it lives.
/// Thread-safety: one thread at a time per connection (for one made on an engine, the engine's);
/// `state()` and `wait_disconnected` may be called from other threads.
/// @see rdma_cm(7)
template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post>
class connection final {
public:
    /// The type of its queue pair.
    using qp_type = queue_pair<Transport, Completion, Post>;

    /// Takes `other`'s id, channel, monitor and everything it owns or borrows (all on the heap,
    /// or the caller's and followed through their cells, so what refers to them stays valid);
    /// `other` is left empty and its destructor does nothing.
    connection(connection&&) noexcept = default;
    /// Tears this connection down as the destructor does (its members depend on each other: the
    /// QP on the id and the PD and CQ, the id on the channel, the monitor thread on both; the
    /// destructor takes them apart in order), then takes over `other`'s as the move constructor
    /// does; self-move is a no-op.
    connection& operator=(connection&& other) noexcept {
        if (this != &other) {
            std::destroy_at(this); // final, never a subobject: transparently replaced
            std::construct_at(this, std::move(other));
        }
        return *this;
    }

    ~connection() {
        if (id_.native_handle() == nullptr) return;
        monitor_->stop();
        if constexpr (Transport::connected) (void)monitor_->disconnect();
        if (own_qp_) {
            if (own_cq_) {
                std::array<work_completion, 16> drain;
                std::error_code ec;
                while (own_cq_->poll(std::span{drain}, ec) != 0) {}
            } else {
                monitor_->to_error(); // flushes for the borrowed CQ's poller
            }
            id_.destroy_qp(*own_qp_);
            own_qp_.reset();
        }
        own_regions_.clear(); // after the QP (see register_memory), before a PD of its own
        peer_ah_.reset();
        own_cq_.reset();
        own_comp_channel_.reset();
        own_pd_.reset();
    }

    /// The queue pair (RTS once established; UD: at once), wherever it has moved to.
    /// @throws orphaned_error when it was a QP you created and it was destroyed.
    [[nodiscard]] qp_type& qp() { return qp_.get("connection", "queue pair"); }
    /// The CQ of the send queue, which is also that of the receive queue when the connection
    /// made its own.
    /// @throws argument_error for a connection of a QP you created; orphaned_error when the CQ
    ///         was destroyed.
    [[nodiscard]] completion_queue<Completion>& cq() { return send_cq(); }
    /// The CQ of the send queue.
    /// @throws as `cq()`.
    [[nodiscard]] completion_queue<Completion>& send_cq() { return borrowed_cq(send_cq_, "send_cq"); }
    /// The CQ of the receive queue (or of the SRQ's receives for this QP).
    /// @throws as `cq()`.
    [[nodiscard]] completion_queue<Completion>& recv_cq() { return borrowed_cq(recv_cq_, "recv_cq"); }
    /// The protection domain: register the memory you post here.
    /// @throws orphaned_error when it was borrowed and was destroyed.
    [[nodiscard]] protection_domain& pd() { return pd_.get("connection", "protection domain"); }
    /// Registers `memory` (which must outlive the connection) in its PD with `rights`, and keeps
    /// the region: it is deregistered when the connection goes, after its QP — a `checked` QP
    /// drains its requests as it goes, so none in flight names the region then — and before a PD
    /// the connection owns. For a self-contained connection, whose PD goes with it, this is the
    /// region that outlives the QP; with a QP you created, destroy it first. The reference stays
    /// valid while the connection lives, moves included.
    /// @throws as `protection_domain::register_memory`; orphaned_error when a borrowed PD was
    ///         destroyed; std::bad_alloc
    /// @see ibv_reg_mr(3)
    template <class T>
    memory_region& register_memory(std::span<T> memory, access rights) {
        auto region = std::make_unique<memory_region>(pd().register_memory(memory, rights));
        own_regions_.push_back(std::move(region));
        return *own_regions_.back();
    }
    /// The SRQ the QP takes its receive buffers from; null when it has its own receive queue.
    /// @throws orphaned_error when the SRQ was destroyed.
    [[nodiscard]] shared_receive_queue* srq() const { return srq_.get_optional("connection", "SRQ"); }
    /// The completion channel the CQs deliver their events on (fd for epoll, non-blocking mode,
    /// `get_event`): the connection's own for a self-contained connection whose strategy uses a
    /// channel, the one given in `cm::resources` otherwise; null for `busy_poll` or when none
    /// was given.
    /// @throws orphaned_error when the channel given was destroyed.
    [[nodiscard]] completion_channel* cq_channel() const {
        return comp_channel_.get_optional("connection", "completion channel");
    }
    /// True when the connection made (and owns) its PD, CQ and channel.
    [[nodiscard]] bool owns_resources() const noexcept { return own_pd_ != nullptr; }
    /// The id.
    [[nodiscard]] cm::id& cm_id() noexcept { return id_; }
    /// The event channel its id lives on: its own (the blocking flows), whose events its monitor
    /// thread takes once a connected connection is established, or its engine's. Do not take its
    /// events yourself.
    [[nodiscard]] event_channel* channel() noexcept { return channel_.get(); }
    /// The state.
    [[nodiscard]] connection_state state() const noexcept { return monitor_->state(); }
    /// The private data the peer sent: with the connect response (UD: `established`) on the
    /// active side, with the connect request on the passive side (the whole buffer the CM
    /// delivered, zero padded). Decode typed data with `cm::from_private_data`.
    [[nodiscard]] std::span<std::byte const> peer_private_data() const noexcept { return peer_private_data_; }
    /// The peer's connection data (TCP port space): from the connect response on the active side
    /// and from the connect request on the passive side.
    [[nodiscard]] connection_data const& peer_parameters() const noexcept { return peer_conn_; }

    /// UD: the address handle of the peer (active side: from `established`; passive side: after
    /// `reply_to`). Null before.
    [[nodiscard]] address_handle const* peer_ah() const noexcept requires(!Transport::connected) {
        return peer_ah_.get();
    }
    /// UD: the peer's QP number.
    [[nodiscard]] std::uint32_t peer_qpn() const noexcept requires(!Transport::connected) { return peer_ud_.qp_num; }
    /// UD: the Q_Key to send to the peer with.
    [[nodiscard]] std::uint32_t peer_qkey() const noexcept requires(!Transport::connected) { return peer_ud_.qkey; }
    /// UD: makes the sender of the datagram `wc` (received into `buffer`, whose first 40 bytes are
    /// the GRH) the peer: address handle from the completion, its source QPN, the CM's Q_Key.
    /// @throws argument_error when `buffer` is shorter than the 40-byte GRH, or `wc` is not a
    ///         successful receive of at least 40 bytes (nothing is read then); sys_error when
    ///         ibv_init_ah_from_wc(3) or ibv_create_ah(3) fails.
    void reply_to(work_completion const& wc, std::span<std::byte const> buffer) requires(!Transport::connected) {
        constexpr std::size_t grh_bytes = sizeof(ibv_grh);
        static_assert(grh_bytes == 40);
        if (buffer.size() < grh_bytes) [[unlikely]]
            rdmacxx::detail::throw_argument("reply_to: the receive buffer holds " + std::to_string(buffer.size()) +
                                            " bytes, less than the 40-byte GRH in front of every UD receive");
        if (!wc.ok() || !wc.is_recv() || wc.byte_len() < grh_bytes) [[unlikely]]
            rdmacxx::detail::throw_argument(
                "reply_to: the completion is not a successful receive of at least the 40-byte GRH (" +
                std::to_string(wc.byte_len()) + " bytes)");
        ibv_ah_attr attr{};
        ibv_wc copy = wc.native();
        if (int rc =
                ::ibv_init_ah_from_wc(pd().context().native_handle(), id_.port_num(), &copy,
                                      const_cast<ibv_grh*>(reinterpret_cast<ibv_grh const*>(buffer.data())), &attr);
            rc != 0) [[unlikely]]
            rdmacxx::detail::throw_sys(rc == -1 ? errno : (rc < 0 ? -rc : rc), "ibv_init_ah_from_wc"); // -1 + errno
        peer_ah_ = std::make_unique<address_handle>(pd(), attr);
        peer_ud_.qp_num = wc.src_qp();
        peer_ud_.qkey = RDMA_UDP_QKEY;
    }

    /// Starts the disconnect (rdma_disconnect(3): the QP to ERR, a DREQ to the peer) and, with its
    /// own channel, waits up to `timeout` for the CM's `disconnected` (both sides see it: the
    /// peer's answer, or the CM giving up on its DREQ). A second call, or a call after the peer
    /// disconnected, does nothing.
    /// @throws sys_error when rdma_disconnect(3) fails; timeout_error naming `step::disconnect`
    ///         when `disconnected` does not come in time (the connection is disconnected on our
    ///         side all the same).
    void disconnect(std::chrono::milliseconds timeout) requires(Transport::connected) {
        if (state() != connection_state::established) return;
        if (int err = monitor_->disconnect(); err != 0) [[unlikely]]
            rdmacxx::detail::throw_sys(err, "rdma_disconnect", "from " + peer_name());
        if (monitor_->watching() && !monitor_->wait_ended(timeout, false)) [[unlikely]]
            throw timeout_error(step::disconnect, "no disconnected event within " + std::to_string(timeout.count()) +
                                                      " ms while disconnecting from " + peer_name());
    }
    /// As `disconnect(timeout)` with the options' disconnect deadline (`deadlines::of(step::disconnect)`).
    /// @throws as `disconnect(timeout)`.
    void disconnect() requires(Transport::connected) { disconnect(disconnect_timeout_); }

    /// Waits at most `timeout` for the connection to end: the peer disconnects or dies (seen by
    /// the monitor thread, or, for a connection on an engine, by the engine's `process()` in
    /// another thread's loop), `disconnect` is called, or a failure event ended it (`connection_state::failed`).
    /// Returns true when it ended — the QP is then in ERR and a peer's disconnect has been
    /// answered — and false when the timeout passed: the timeout is this distinct outcome, never
    /// an exception. Never blocks longer than `timeout` (`milliseconds::max()`: for ever).
    [[nodiscard]] bool wait_disconnected(std::chrono::milliseconds timeout) requires(Transport::connected) {
        connection_state const now = state();
        return now == connection_state::disconnected || now == connection_state::failed ||
               monitor_->wait_ended(timeout, true);
    }

    /// Calls `fn(state)` once when the CM ends the connection (`disconnected`, `device_removal`:
    /// the peer left or died), after the QP went to ERR: from the engine's `process()` for a
    /// connection on an engine, from the monitor thread otherwise. `fn` may destroy the
    /// connection. Not called for our own `disconnect()`, nor for an end before it was set.
    void on_end(rdmacxx::detail::callback<void(connection_state)> fn) { monitor_->on_end(std::move(fn)); }

    /// "198.18.0.1:7471" — the peer's address.
    [[nodiscard]] std::string peer_name() const { return id_.peer_address().to_string(); }

    /// @cond
    // The pieces the flows (cm::connect, connect_request) assemble a connection from.
    connection(std::shared_ptr<event_channel> channel, cm::id&& cm_id, std::chrono::milliseconds disconnect_timeout)
        : channel_(std::move(channel)), id_(std::move(cm_id)),
          monitor_(std::make_unique<detail::connection_monitor>(id_.native_handle())),
          disconnect_timeout_(disconnect_timeout) {}

    // Self-contained: a PD, a channel (if the strategy uses one) and one CQ of its own.
    void make_own(int cq_entries) {
        own_pd_ = std::make_unique<protection_domain>(id_.context());
        if constexpr (Completion::uses_channel) {
            own_comp_channel_ = std::make_unique<completion_channel>(id_.context());
            own_cq_ = std::make_unique<completion_queue<Completion>>(id_.context(), cq_entries, *own_comp_channel_);
        } else {
            own_cq_ = std::make_unique<completion_queue<Completion>>(id_.context(), cq_entries);
        }
        pd_ = own_pd_->anchor_cell();
        send_cq_ = recv_cq_ = own_cq_->anchor_cell();
        if (own_comp_channel_) comp_channel_ = own_comp_channel_->anchor_cell();
    }

    // Borrows `r`, after checking that it is on the id's device.
    void borrow(resources<Completion> const& r) {
        detail::check_resources(r, id_.native_handle()->verbs, "connecting " + peer_name());
        pd_ = r.pd.anchor_cell();
        send_cq_ = r.send_cq.anchor_cell();
        recv_cq_ = r.recv_cq.anchor_cell();
        if (r.srq != nullptr) srq_ = r.srq->anchor_cell();
        if (r.channel != nullptr) comp_channel_ = r.channel->anchor_cell();
    }

    // The QP made on the id with the PD, CQs and SRQ chosen.
    void create_qp(qp_capabilities const& caps) requires(std::is_same_v<Post, legacy_post>) {
        own_qp_ = std::make_unique<queue_pair<Transport, Completion>>(
            id_.template create_qp<Transport, Completion>(pd(), send_cq(), recv_cq(), srq(), caps));
        qp_ = own_qp_->anchor_cell();
        monitor_->set_qp(own_qp_->native_handle());
    }

    // A QP the user made: borrowed, after checking that it is on the id's device.
    void adopt(qp_type& qp) {
        if (qp.native_handle()->context != id_.native_handle()->verbs) [[unlikely]]
            rdmacxx::detail::throw_argument(
                "connecting QP " + std::to_string(qp.qp_num()) + " through the CM to " + peer_name() +
                ": the QP is on device " + ::ibv_get_device_name(qp.native_handle()->context->device) +
                ", the CM resolved device " + ::ibv_get_device_name(id_.native_handle()->verbs->device) +
                "; make its PD on the id's context (cm::id::context())");
        if (qp.state() != IBV_QPS_RESET) [[unlikely]]
            rdmacxx::detail::throw_argument("connecting QP " + std::to_string(qp.qp_num()) +
                                            " through the CM: it must be in RESET, it is in " +
                                            rdmacxx::detail::qp_state_name(qp.state()));
        qp_ = qp.anchor_cell();
        pd_ = qp.pd().anchor_cell();
        srq_ = {};
        monitor_->set_qp(qp.native_handle());
    }

    // A connected connection alone on its channel (the blocking flows): its monitor thread takes
    // the channel's events from now on.
    void watch_own_channel() {
        if constexpr (Transport::connected) monitor_->watch(*channel_);
    }

    void set_peer(std::vector<std::byte> private_data, connection_data const& conn) {
        peer_private_data_ = std::move(private_data);
        peer_conn_ = conn;
    }
    void set_peer_ud(ud_data const& ud) requires(!Transport::connected) {
        peer_ud_ = ud;
        peer_ah_ = std::make_unique<address_handle>(pd(), peer_ud_.ah_attr);
    }
    [[nodiscard]] detail::connection_monitor& monitor() noexcept { return *monitor_; }
    /// @endcond

private:
    completion_queue<Completion>& borrowed_cq(rdmacxx::detail::link<completion_queue<Completion>> const& cq,
                                              char const* which) const {
        completion_queue<Completion>* const found = cq.get_optional("connection", "CQ");
        if (found == nullptr) [[unlikely]]
            rdmacxx::detail::throw_argument(std::string{"cm::connection::"} + which +
                                            ": a connection of a queue pair you created has no CQ of its own "
                                            "(use the CQs you made the queue pair with)");
        return *found;
    }

    std::shared_ptr<event_channel> channel_; // its own, or its engine's (kept open while the id is on it)
    cm::id id_;
    std::unique_ptr<detail::connection_monitor> monitor_;
    // Owned by a self-contained connection (null when borrowed); destroyed in reverse order.
    std::unique_ptr<protection_domain> own_pd_;
    std::unique_ptr<completion_channel> own_comp_channel_;
    std::unique_ptr<completion_queue<Completion>> own_cq_;
    std::unique_ptr<queue_pair<Transport, Completion>> own_qp_;
    std::vector<std::unique_ptr<memory_region>> own_regions_; // register_memory: deregistered after the QP
    // What the connection uses, owned or borrowed, through their cells (see docs/ownership.md):
    // followed when the caller moves them, refused (orphaned_error) when the caller destroyed
    // them; empty when there is none (no CQs for a QP you created, no SRQ, no channel).
    rdmacxx::detail::link<protection_domain> pd_;
    rdmacxx::detail::link<completion_queue<Completion>> send_cq_;
    rdmacxx::detail::link<completion_queue<Completion>> recv_cq_;
    rdmacxx::detail::link<shared_receive_queue> srq_;
    rdmacxx::detail::link<completion_channel> comp_channel_;
    rdmacxx::detail::link<qp_type> qp_;
    std::unique_ptr<address_handle> peer_ah_;
    std::vector<std::byte> peer_private_data_;
    connection_data peer_conn_{};
    ud_data peer_ud_{};
    std::chrono::milliseconds disconnect_timeout_;
};

namespace detail {
/// A caller's QP whose connection failed: to ERR, so that whatever was posted completes
/// (flushed) instead of being dropped; `reset()` makes it connectable again.
template <class QueuePair>
void fail_qp(QueuePair& qp) noexcept {
    try {
        qp.to_error();
    } catch (...) { // NOLINT(bugprone-empty-catch): the connection's own error is what matters
    }
}
} // namespace detail

} // namespace cm
} // namespace v0
} // namespace rdmacxx
