#pragma once
/// @file
/// The RDMA CM flows on top of `cm::id`: `cm::connect` (active side), `cm::listener` and
/// `cm::connect_request` (passive side), each handing back a ready `cm::connection` that owns its
/// id and queue pair; and `cm::multicast_group` (join, send to and receive from a group).

#include "rdmacxx/ah.hpp"
#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/cm/id.hpp"
#include "rdmacxx/cm/monitor.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/transport.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// Settings of the flows: queue sizes, connection parameters and the timeouts of every wait.
struct connection_options {
    qp_capabilities caps{};                          ///< the queue pair's queues
    int cq_entries = 256;                            ///< entries of the connection's CQ
    connection_parameters params{};                  ///< private data and RC settings sent
    std::chrono::milliseconds resolve_timeout{2000}; ///< address and route resolution, each
    std::chrono::milliseconds event_timeout{10000};  ///< any other awaited event
    std::optional<address> source{};                 ///< local address to connect from
    /// Type of service (RFC 2474 DSCP << 2 | ECN) of the connection: on RoCE the QP's GRH traffic
    /// class. Set on the id before the route is resolved (`id::set_type_of_service`); empty:
    /// the kernel's default, 0.
    std::optional<std::uint8_t> type_of_service{};
    /// Share `source`'s port with other ids that ask for it too (`id::set_reuse_address`).
    bool reuse_address = false;
};

/// Settings of a `listener`'s id, applied before it binds.
struct listener_options {
    int backlog = 16; ///< pending connect requests at most (rdma_listen(3))
    /// Share the port with other ids that ask for it too (`id::set_reuse_address`), as
    /// SO_REUSEADDR: a restarted server binds its port while ids of the old one linger.
    bool reuse_address = false;
    /// Type of service of the listening id (`id::set_type_of_service`); empty: the kernel's.
    std::optional<std::uint8_t> type_of_service{};
    /// IPv6 (or AF_IB) only (`id::set_address_family_only`); empty: the kernel's default.
    std::optional<bool> address_family_only{};
};

namespace detail {
/// Takes events from `channel` until one of type `want` comes: returns it; throws the
/// matching `cm_error` for a failure event, `cm_error` for another unexpected one, and
/// `timeout_error` when nothing came within `timeout`. Events of `ignore` type are dropped.
inline event expect(event_channel& channel, event_type want, std::chrono::milliseconds timeout, std::string const& what,
                    std::optional<event_type> ignore = std::nullopt) {
    auto const deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        auto const left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        auto e = channel.get(left.count() > 0 ? left : std::chrono::milliseconds{0});
        if (!e) [[unlikely]]
            throw timeout_error("no " + std::string{to_string(want)} + " event within " +
                                std::to_string(timeout.count()) + " ms while " + what);
        if (e->type() == want && e->status() == 0) return std::move(*e);
        if (ignore && e->type() == *ignore) continue;
        e->throw_if_failed(what);
        throw cm_error(e->type(), e->status(), "arrived while waiting for " + std::string{to_string(want)} + " " + what,
                       e->private_data_copy(), EPROTO);
    }
}
} // namespace detail

/// One RDMA CM connection (RC or UC over the TCP port space) or UD association (UDP port space):
/// owns its id, a protection domain and one completion queue on the id's device, and the queue
/// pair made on the id (`queue_pair<Transport, Completion>`), with the peer's private data and
/// parameters as they came.
///
/// Made by `cm::connect` (active side) or `connect_request::accept` (passive side). Move-only.
/// Destruction tears down in order: disconnect (if still connected), drain the CQ, destroy the
/// QP, the CQ, the PD, then the id and the connection's own event channel (if it has one).
///
/// A dead peer surfaces by itself: a connected (RC/UC) connection with its own event channel (the
/// default) has a monitor thread take that channel's events once it is established; when the CM
/// reports `disconnected` (the peer disconnected, or died: its kernel destroys its id and sends a
/// DREQ) or `device_removal`, the monitor moves the QP to ERR at once, so every WR in flight
/// completes with `IBV_WC_WR_FLUSH_ERR` and every thread waiting on the CQ wakes, answers the
/// peer's DREQ, and wakes `wait_disconnected`. Do not take events from `channel()` yourself
/// after establishment. A peer that vanishes without a DREQ (its host lost) is seen only by the
/// traffic: the next SEND, WRITE or READ fails after the ACK timeout × (retry count + 1) with
/// `IBV_WC_RETRY_EXC_ERR` (which moves the QP to ERR and flushes the rest), and the CM's own
/// `disconnected` follows when its DREQ times out; a connection that only has receives posted
/// learns nothing until it sends.
///
/// Register the memory you post with `pd()`. One accepted on a shared channel
/// (`connect_request::accept_shared`) is told its events by the caller's loop through `handle`,
/// which does the same on `disconnected`.
/// Thread-safety: one thread at a time per connection; `state()`, `wait_disconnected` and
/// `handle` may be called from other threads.
/// @see rdma_cm(7)
template <transport Transport, completion_strategy Completion>
class connection {
public:
    connection(connection&&) noexcept = default;
    connection& operator=(connection&&) = delete;

    ~connection() {
        if (id_.native_handle() == nullptr) return;
        monitor_->stop();
        if constexpr (Transport::connected) (void)monitor_->disconnect();
        if (qp_) {
            std::array<work_completion, 16> drain;
            std::error_code ec;
            while (cq_->poll(std::span{drain}, ec) != 0) {}
            id_.destroy_qp(*qp_);
            qp_.reset();
        }
        peer_ah_.reset();
        cq_.reset();
        pd_.reset();
    }

    /// The queue pair (RTS once established; UD: at once).
    [[nodiscard]] queue_pair<Transport, Completion>& qp() noexcept { return *qp_; }
    /// The CQ of both queues.
    [[nodiscard]] completion_queue<Completion>& cq() noexcept { return *cq_; }
    /// The protection domain: register the memory you post here.
    [[nodiscard]] protection_domain& pd() noexcept { return *pd_; }
    /// The id.
    [[nodiscard]] cm::id& cm_id() noexcept { return id_; }
    /// The connection's own event channel; null when it shares its creator's. Once a connected
    /// connection is established its monitor takes the events of this channel.
    [[nodiscard]] event_channel* channel() noexcept { return channel_.get(); }
    /// The state.
    [[nodiscard]] connection_state state() const noexcept { return monitor_->state(); }
    /// The private data the peer sent: with `established` on the active side, with the connect
    /// request on the passive side (the whole buffer the CM delivered, zero padded).
    [[nodiscard]] std::span<std::byte const> peer_private_data() const noexcept { return peer_private_data_; }
    /// The peer's connection data (TCP port space): from `established` on the active side and from
    /// the connect request on the passive side.
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
                ::ibv_init_ah_from_wc(pd_->context().native_handle(), id_.port_num(), &copy,
                                      const_cast<ibv_grh*>(reinterpret_cast<ibv_grh const*>(buffer.data())), &attr);
            rc != 0) [[unlikely]]
            rdmacxx::detail::throw_sys(rc < 0 ? -rc : rc, "ibv_init_ah_from_wc");
        peer_ah_ = std::make_unique<address_handle>(*pd_, attr);
        peer_ud_.qp_num = wc.src_qp();
        peer_ud_.qkey = RDMA_UDP_QKEY;
    }

    /// Starts the disconnect (rdma_disconnect(3): the QP to ERR, a DREQ to the peer) and, with its
    /// own channel, waits up to `timeout` for the CM's `disconnected` (both sides see it). A
    /// second call, or a call after the peer disconnected, does nothing.
    /// @throws sys_error when rdma_disconnect(3) fails; timeout_error when `disconnected` does not
    ///         come in time (the connection is disconnected on our side all the same).
    void disconnect(std::chrono::milliseconds timeout = std::chrono::milliseconds{
                        10000}) requires(Transport::connected) {
        if (state() != connection_state::established) return;
        if (int err = monitor_->disconnect(); err != 0) [[unlikely]]
            rdmacxx::detail::throw_sys(err, "rdma_disconnect", "from " + peer_name());
        if (monitor_->watching() && !monitor_->wait_ended(timeout, false)) [[unlikely]]
            throw timeout_error("no disconnected event within " + std::to_string(timeout.count()) +
                                " ms while disconnecting from " + peer_name());
    }

    /// Waits at most `timeout` for the connection to end: the peer disconnects or dies (seen by
    /// the monitor thread, or, for a connection on a shared channel, by another thread's
    /// `handle`), or `disconnect` is called. Returns true when it ended — the QP is then in ERR
    /// and a peer's disconnect has been answered — and false when the timeout passed: the
    /// timeout is this distinct outcome, never an exception. Never blocks longer than `timeout`.
    [[nodiscard]] bool wait_disconnected(std::chrono::milliseconds timeout) requires(Transport::connected) {
        return state() == connection_state::disconnected || monitor_->wait_ended(timeout, true);
    }

    /// Updates the connection with `e`, an event for its id taken from a shared channel:
    /// `established` marks it established; `disconnected` (and `device_removal`) end it as the
    /// monitor of a connection with its own channel does: the QP to ERR (everything in flight
    /// completes with IBV_WC_WR_FLUSH_ERR), the peer's disconnect answered; `timewait_exit` is
    /// ignored. Safe to call while another thread waits in `wait_disconnected`.
    /// @throws the matching `cm_error` for a failure event (after ending the connection for
    ///         `device_removal`).
    void handle(event const& e) {
        if (e.type() == event_type::timewait_exit || (monitor_->apply(e.type()) && e.ok())) return;
        e.throw_if_failed("on the connection with " + peer_name());
    }

    /// "198.18.0.1:7471" — the peer's address.
    [[nodiscard]] std::string peer_name() const { return id_.peer_address().to_string(); }

private:
    template <transport T, completion_strategy C>
    friend connection<T, C> connect(address const& destination, connection_options const& opt);
    friend class connect_request;

    connection(std::unique_ptr<event_channel> channel, cm::id&& cm_id, int cq_entries)
        : channel_(std::move(channel)), id_(std::move(cm_id)),
          monitor_(std::make_unique<detail::connection_monitor>(id_.native_handle())),
          pd_(std::make_unique<protection_domain>(id_.context())),
          cq_(std::make_unique<completion_queue<Completion>>(id_.context(), cq_entries)) {}

    void create_qp(qp_capabilities const& caps) {
        qp_.emplace(id_.template create_qp<Transport, Completion>(*pd_, *cq_, *cq_, caps));
        monitor_->set_qp(qp_->native_handle());
    }

    // Established: a connected connection with its own channel starts its monitor thread.
    void established() {
        monitor_->established();
        if constexpr (Transport::connected)
            if (channel_) monitor_->watch(*channel_);
    }

    std::unique_ptr<event_channel> channel_;
    cm::id id_;
    std::unique_ptr<detail::connection_monitor> monitor_;
    std::unique_ptr<protection_domain> pd_;
    std::unique_ptr<completion_queue<Completion>> cq_;
    std::optional<queue_pair<Transport, Completion>> qp_;
    std::unique_ptr<address_handle> peer_ah_;
    std::vector<std::byte> peer_private_data_;
    connection_data peer_conn_{};
    ud_data peer_ud_{};
};

/// Active side: connects to `destination` and returns an established connection of transport
/// `Transport` (RC or UC over the TCP port space, UD over the UDP port space) with its own event
/// channel: resolves the address and the route (each within `opt.resolve_timeout`), makes the
/// PD, CQ and QP on the resolved device, connects with `opt.params` (private data included) and
/// waits up to `opt.event_timeout` for `established`.
/// @throws address_error, route_not_found_error, route_error while resolving; rejected_error
///         (with the reject reason and the peer's private data: no listener is reason 8 on
///         RoCE), unreachable_error, connect_error while connecting; timeout_error when an
///         awaited event does not come in time; argument_error for private data over 56 bytes
///         (TCP) or 180 (UDP), before anything is sent; sys_error when a verb fails.
/// @see rdma_resolve_addr(3), rdma_resolve_route(3), rdma_create_qp(3), rdma_connect(3)
template <transport Transport, completion_strategy Completion>
[[nodiscard]] connection<Transport, Completion> connect(address const& destination,
                                                        connection_options const& opt = {}) {
    check_private_data(opt.params.private_data, private_data_message::connect, port_space_for<Transport>);
    std::string const what = "connecting to " + destination.to_string();
    auto channel = std::make_unique<event_channel>();
    cm::id cm_id{*channel, port_space_for<Transport>};
    if (opt.type_of_service) cm_id.set_type_of_service(*opt.type_of_service);
    if (opt.reuse_address) cm_id.set_reuse_address(true);
    cm_id.resolve_address(destination, opt.resolve_timeout, opt.source ? &*opt.source : nullptr);
    (void)detail::expect(*channel, event_type::addr_resolved, opt.resolve_timeout + std::chrono::milliseconds{1000},
                         "resolving the address of " + destination.to_string());
    cm_id.resolve_route(opt.resolve_timeout);
    (void)detail::expect(*channel, event_type::route_resolved, opt.resolve_timeout + std::chrono::milliseconds{1000},
                         "resolving the route to " + destination.to_string());
    connection<Transport, Completion> c{std::move(channel), std::move(cm_id), opt.cq_entries};
    c.create_qp(opt.caps);
    c.id_.connect(opt.params);
    // UC: librdmacm reports connect_response (its QP is not on the id) and `establish` finishes.
    constexpr bool uc = Transport::qp_type == IBV_QPT_UC;
    event e = detail::expect(*c.channel_, uc ? event_type::connect_response : event_type::established,
                             opt.event_timeout, what);
    if constexpr (uc) c.id_.establish();
    c.id_.set_min_rnr_timer(opt.params.min_rnr_timer); // the CM's RTR set 655 ms; the QP is in RTS now
    c.peer_private_data_ = e.private_data_copy();
    if constexpr (Transport::connected) {
        c.peer_conn_ = e.conn();
    } else {
        c.peer_ud_ = e.ud();
        c.peer_ah_ = std::make_unique<address_handle>(*c.pd_, c.peer_ud_.ah_attr);
    }
    c.established();
    return c;
}

/// The default `before_accept` of `connect_request::accept`: does nothing.
struct no_preparation {
    /// Does nothing with the connection.
    template <class Connection>
    void operator()(Connection&) const noexcept {}
};

/// A connect request taken by a `listener`: owns the new id until accepted or rejected, with a
/// copy of the peer's private data and parameters. Move-only; destroying it unanswered destroys
/// the id, which the peer sees as a reject or a timeout.
/// Thread-safety: one thread at a time.
class connect_request {
public:
    /// Takes the new id and data of a `connect_request` event `e` (already acknowledged; `e` may
    /// be kept or dropped).
    explicit connect_request(event const& e)
        : id_(e.id()), private_data_(e.private_data_copy()), conn_(e.conn()), ud_(e.ud()) {}

    /// The private data the peer sent with its request (the whole buffer the CM delivered,
    /// zero padded past what the peer wrote).
    [[nodiscard]] std::span<std::byte const> private_data() const noexcept { return private_data_; }
    /// The peer's connection data (TCP port space).
    [[nodiscard]] connection_data const& parameters() const noexcept { return conn_; }
    /// The peer's address.
    [[nodiscard]] address peer_address() const noexcept { return id_.peer_address(); }
    /// The new id.
    [[nodiscard]] cm::id& cm_id() noexcept { return id_; }

    /// Accepts: moves the id to its own event channel, makes the PD, CQ and queue pair on its
    /// device, calls `before_accept(connection&)` (post receives there: a UD peer may send the
    /// moment it learns our QPN, and an unposted UD receive drops the datagram), accepts with
    /// `opt.params` (private data included) and, for RC and UC, waits up to `opt.event_timeout`
    /// for `established`. The request is empty afterwards.
    /// @throws argument_error for private data over 196 bytes (TCP) or 136 (UDP), before anything
    ///         is sent; timeout_error, connect_error when `established` does not come; sys_error
    ///         when a call fails; whatever `before_accept` throws (the request is then dropped).
    /// @see rdma_migrate_id(3), rdma_create_qp(3), rdma_accept(3)
    template <transport Transport, completion_strategy Completion, class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion> accept(connection_options const& opt = {},
                                                           BeforeAccept&& before_accept = {}) {
        check_private_data(opt.params.private_data, private_data_message::accept, port_space_for<Transport>);
        auto channel = std::make_unique<event_channel>();
        id_.migrate(*channel);
        auto c = make<Transport, Completion>(std::move(channel), opt);
        before_accept(c);
        c.id_.accept(opt.params);
        if constexpr (Transport::connected) {
            (void)detail::expect(*c.channel_, event_type::established, opt.event_timeout, "accepting " + c.peer_name());
        }
        c.established();
        return c;
    }

    /// Accepts, keeping the id on the listener's channel: returns at once in state `connecting`
    /// (UD: `established`); the caller's event loop hands the connection its events (`handle`).
    /// `before_accept` as for `accept`.
    /// @throws as `accept`, without the wait.
    template <transport Transport, completion_strategy Completion, class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion> accept_shared(connection_options const& opt = {},
                                                                  BeforeAccept&& before_accept = {}) {
        check_private_data(opt.params.private_data, private_data_message::accept, port_space_for<Transport>);
        auto c = make<Transport, Completion>(nullptr, opt);
        before_accept(c);
        c.id_.accept(opt.params);
        if constexpr (!Transport::connected) c.monitor_->established();
        return c;
    }

    /// Rejects with `private_data` (at most 148 bytes on TCP, 136 on UDP) and destroys the id.
    /// @throws argument_error for private data over the limit; sys_error when rdma_reject(3) fails.
    void reject(std::span<std::byte const> private_data = {}) {
        id_.reject(private_data);
        id_ = cm::id{nullptr};
    }

private:
    template <transport Transport, completion_strategy Completion>
    connection<Transport, Completion> make(std::unique_ptr<event_channel> channel, connection_options const& opt) {
        connection<Transport, Completion> c{std::move(channel), std::move(id_), opt.cq_entries};
        c.peer_private_data_ = std::move(private_data_);
        c.peer_conn_ = conn_;
        c.create_qp(opt.caps);
        return c;
    }

    cm::id id_;
    std::vector<std::byte> private_data_;
    connection_data conn_;
    ud_data ud_;
};

/// Passive side: an event channel and an id listening on an address, for transport
/// `Transport` (TCP port space for RC/UC, UDP for UD). `get_request` takes the next connect
/// request; `accept` takes it and accepts it. Move-only.
///
/// For a server that serves several clients from this one channel, put `channel().fd()` in an
/// epoll set, take events with `channel().try_get()`, make a `connect_request` from each
/// `connect_request` event, `accept_shared` it, and hand every other event to the connection
/// whose id it names.
/// Thread-safety: one thread at a time.
/// @see rdma_bind_addr(3), rdma_listen(3)
template <transport Transport>
class listener {
public:
    /// Binds to `local` (port 0: a free port, see `port()`) and listens with `backlog`.
    /// @throws address_error when the address cannot be bound; sys_error when a call fails.
    explicit listener(address const& local, int backlog = 16) : listener(local, listener_options{.backlog = backlog}) {}

    /// Sets `opt`'s options on the id, binds to `local` and listens with `opt.backlog`.
    /// @throws unsupported_error when an option is refused; address_error when the address
    ///         cannot be bound (EADDRINUSE: the port is taken, or was just closed and
    ///         `reuse_address` is off); sys_error when a call fails.
    listener(address const& local, listener_options const& opt) : id_(channel_, port_space_for<Transport>) {
        if (opt.reuse_address) id_.set_reuse_address(true);
        if (opt.type_of_service) id_.set_type_of_service(*opt.type_of_service);
        if (opt.address_family_only) id_.set_address_family_only(*opt.address_family_only);
        id_.bind(local);
        id_.listen(opt.backlog);
    }

    /// The port listened on (host order).
    [[nodiscard]] std::uint16_t port() const noexcept { return id_.local_address().port(); }
    /// The channel the requests (and, for `accept_shared` connections, their events) arrive on.
    [[nodiscard]] event_channel& channel() noexcept { return channel_; }
    /// The listening id.
    [[nodiscard]] cm::id& cm_id() noexcept { return id_; }

    /// Waits up to `timeout` for the next connect request.
    /// @throws timeout_error when none comes; cm_error for another event on the channel.
    [[nodiscard]] connect_request get_request(std::chrono::milliseconds timeout) {
        event e = detail::expect(channel_, event_type::connect_request, timeout,
                                 "listening on " + id_.local_address().to_string());
        return connect_request{e};
    }

    /// Waits up to `timeout` for a connect request and accepts it (see `connect_request::accept`).
    /// @throws as `get_request` and `connect_request::accept`.
    template <completion_strategy Completion>
    [[nodiscard]] connection<Transport, Completion> accept(std::chrono::milliseconds timeout,
                                                           connection_options const& opt = {}) {
        return get_request(timeout).template accept<Transport, Completion>(opt);
    }

private:
    event_channel channel_;
    cm::id id_;
};

/// A multicast group joined through the CM, with a UD queue pair attached to it: what `mckey`
/// does. Owns its event channel, id, PD, CQ, QP and the group's address handle; leaves the group
/// on destruction. Send with `qp().post(send{…}.to(ah(), qpn(), qkey()))`; receive (with the
/// 40-byte GRH in front) on the same QP.
/// Thread-safety: one thread at a time.
/// @see rdma_join_multicast(3), rdma_leave_multicast(3), mckey(1)
template <completion_strategy Completion>
class multicast_group {
public:
    /// Resolves `group` from `local` (the address of the RDMA device to use) within
    /// `opt.resolve_timeout`, makes the PD, CQ and UD QP, joins and waits up to
    /// `opt.event_timeout` for `multicast_join`.
    /// @throws address_error, route_not_found_error when resolving fails; multicast_error when the
    ///         join fails; timeout_error; sys_error when a call fails. Exception-safe: whatever
    ///         throws after the join, the group is left (which detaches the QP) and the QP, CQ
    ///         and PD are released in reverse order before the exception leaves.
    multicast_group(address const& local, address const& group, connection_options const& opt = {})
        : group_(group), id_(channel_, port_space::udp) {
        try {
            id_.resolve_address(group, opt.resolve_timeout, &local);
            (void)detail::expect(channel_, event_type::addr_resolved,
                                 opt.resolve_timeout + std::chrono::milliseconds{1000},
                                 "resolving multicast group " + group.to_string());
            pd_ = std::make_unique<protection_domain>(id_.context());
            cq_ = std::make_unique<completion_queue<Completion>>(id_.context(), opt.cq_entries);
            qp_.emplace(id_.template create_qp<ud, Completion>(*pd_, *cq_, *cq_, opt.caps));
            id_.join_multicast(group);
            joined_ = true;
            event e = detail::expect(channel_, event_type::multicast_join, opt.event_timeout,
                                     "joining multicast group " + group.to_string());
            ud_ = e.ud();
            ah_ = std::make_unique<address_handle>(*pd_, ud_.ah_attr);
        } catch (...) {
            release();
            throw;
        }
    }

    multicast_group(multicast_group const&) = delete;
    multicast_group& operator=(multicast_group const&) = delete;

    ~multicast_group() { release(); }

    /// Leaves the group now (the QP stops receiving from it).
    /// @throws sys_error when rdma_leave_multicast(3) fails.
    void leave() {
        if (!joined_) return;
        joined_ = false;
        id_.leave_multicast(group_);
    }

    /// The UD queue pair attached to the group.
    [[nodiscard]] queue_pair<ud, Completion>& qp() noexcept { return *qp_; }
    /// Its CQ (sends and receives).
    [[nodiscard]] completion_queue<Completion>& cq() noexcept { return *cq_; }
    /// The PD: register the memory you post here.
    [[nodiscard]] protection_domain& pd() noexcept { return *pd_; }
    /// The group's address handle.
    [[nodiscard]] address_handle const& ah() const noexcept { return *ah_; }
    /// The group's QPN (0xffffff).
    [[nodiscard]] std::uint32_t qpn() const noexcept { return ud_.qp_num; }
    /// The group's Q_Key.
    [[nodiscard]] std::uint32_t qkey() const noexcept { return ud_.qkey; }
    /// The join event's UD data.
    [[nodiscard]] ud_data const& join_data() const noexcept { return ud_; }

private:
    // Leaves the group (librdmacm detaches the QP from it; an attached QP cannot be destroyed),
    // then releases the AH, QP, CQ and PD, newest first.
    void release() noexcept {
        ah_.reset();
        if (joined_) (void)::rdma_leave_multicast(id_.native_handle(), group_.native());
        joined_ = false;
        if (qp_) {
            id_.destroy_qp(*qp_);
            qp_.reset();
        }
        cq_.reset();
        pd_.reset();
    }

    address group_;
    event_channel channel_;
    cm::id id_;
    std::unique_ptr<protection_domain> pd_;
    std::unique_ptr<completion_queue<Completion>> cq_;
    std::optional<queue_pair<ud, Completion>> qp_;
    std::unique_ptr<address_handle> ah_;
    ud_data ud_{};
    bool joined_ = false;
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
