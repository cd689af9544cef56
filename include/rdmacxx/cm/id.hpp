#pragma once
/// @file
/// `cm::id`: an RDMA CM identifier (`rdma_cm_id`), the CM's analogue of a socket, with the
/// active calls (resolve address and route, connect), the passive ones (bind, listen, accept,
/// reject), disconnect, multicast join and leave, and queue-pair creation on it.

#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/cm/verbs_context.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/transport.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

static_assert(rdmacxx::default_qkey == RDMA_UDP_QKEY, "qp_settings' default Q_Key is the CM's UDP port space's");

/// The port space of an id: which services it speaks and which events carry which data.
enum class port_space : int {
    tcp = RDMA_PS_TCP,     ///< reliable connected (RC) service: conn event data
    udp = RDMA_PS_UDP,     ///< unreliable datagram (UD) service and multicast: UD event data
    ipoib = RDMA_PS_IPOIB, ///< UD, sharing the IPoIB port space
    ib = RDMA_PS_IB,       ///< any QP type, AF_IB addresses
};

/// The port space a transport's ids use: UDP for UD, TCP for RC and UC.
template <transport Transport>
inline constexpr port_space port_space_for = Transport::connected ? port_space::tcp : port_space::udp;

/// The CM message that carries private data; its limit depends on it and on the port space.
enum class private_data_message {
    connect, ///< rdma_connect(3): 56 bytes on TCP, 180 on UDP
    accept,  ///< rdma_accept(3): 196 bytes on TCP, 136 on UDP
    reject,  ///< rdma_reject(3): 148 bytes on TCP, 136 on UDP
};

/// The most private data `message` may carry in port space `ps` over IP addressing (the CM
/// header takes the rest of the IB CM message): rdma_connect(3), rdma_accept(3).
[[nodiscard]] constexpr std::size_t max_private_data(private_data_message message, port_space ps) noexcept {
    bool const ud = ps == port_space::udp || ps == port_space::ipoib;
    switch (message) {
    case private_data_message::connect:
        return ud ? 180 : 56;
    case private_data_message::accept:
        return ud ? 136 : 196;
    case private_data_message::reject:
        return ud ? 136 : 148;
    }
    return 0;
}

/// Refuses private data over the limit of its message before anything is sent.
/// @throws argument_error naming the message, the port space, the length and the limit.
inline void check_private_data(std::span<std::byte const> data, private_data_message message, port_space ps) {
    std::size_t const limit = max_private_data(message, ps);
    if (data.size() > limit) [[unlikely]] {
        static constexpr char const* names[] = {"connect", "accept", "reject"};
        rdmacxx::detail::throw_argument(std::to_string(data.size()) + " bytes of private data for a " +
                                        names[static_cast<int>(message)] + " message on the " +
                                        (ps == port_space::tcp ? "TCP" : "UDP") + " port space exceed its limit of " +
                                        std::to_string(limit) + " bytes; nothing was sent");
    }
}

/// An RDMA CM identifier (`rdma_cm_id`): bound to an event channel, on which every event about
/// it arrives. Owns the id; move-only; rdma_destroy_id(3) on destruction, which blocks until its
/// reported events are acknowledged — a `cm::event` is acknowledged when taken from the channel,
/// so this never waits, even while such an event is still held. Destroy a
/// QP made on it (`create_qp`) first, through `destroy_qp`.
///
/// The asynchronous calls (`resolve_address`, `resolve_route`, `connect`, `accept`,
/// `disconnect`, `join_multicast`) return once started; their outcome is an event on the
/// channel. The flows in cm/connection.hpp wait for those events for you.
/// Thread-safety: calls on one id need the caller's serialisation.
/// @see rdma_create_id(3), rdma_cm(7)
class id {
public:
    /// Creates an id on `channel` in port space `ps`; `user_context` is stored in `id->context`.
    /// @throws sys_error when rdma_create_id(3) fails.
    id(event_channel& channel, port_space ps, void* user_context = nullptr) {
        rdma_cm_id* raw = nullptr;
        if (int rc = ::rdma_create_id(channel.native_handle(), &raw, user_context, static_cast<rdma_port_space>(ps));
            rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_create_id",
                                           "in port space " + std::to_string(static_cast<int>(ps)));
        handle_.reset(raw);
    }

    /// Takes ownership of `raw`, e.g. the new id of a `connect_request` event.
    explicit id(rdma_cm_id* raw) noexcept : handle_(raw) {}

    id(id&&) noexcept = default;
    id& operator=(id&&) noexcept = default;
    ~id() = default;

    /// Binds to a local `addr` (port 0 picks a free one); a specific IP address also binds the
    /// id to that address's RDMA device.
    /// @throws not_supported_error for an AF_IB address on a host with no InfiniBand port (RoCE
    ///         only), before rdma_bind_addr(3) is called; address_error when the address is not
    ///         usable (EADDRINUSE, EADDRNOTAVAIL, ENODEV); sys_error when rdma_bind_addr(3) fails
    ///         otherwise.
    /// @see rdma_bind_addr(3)
    void bind(address addr) {
        check_address_family(addr, "rdma_bind_addr");
        if (int rc = ::rdma_bind_addr(handle_.get(), addr.native()); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_bind_addr", "for " + addr.to_string(), true);
    }

    /// Starts listening for connect requests (each a `connect_request` event with a new id);
    /// `backlog` pending requests at most.
    /// @throws sys_error when rdma_listen(3) fails.
    /// @see rdma_listen(3)
    void listen(int backlog = 16) {
        if (int rc = ::rdma_listen(handle_.get(), backlog); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_listen", "on " + local_address().to_string());
    }

    /// Starts resolving `destination` to a local RDMA device (event `addr_resolved` or
    /// `addr_error`), from `source` when given. `timeout` bounds the resolution (milliseconds; more than INT_MAX,
    /// about 24.8 days, is clamped to it).
    /// @throws not_supported_error for an AF_IB address on a host with no InfiniBand port, before
    ///         the call; route_not_found_error (ENETUNREACH, EHOSTUNREACH), address_error when the
    ///         call fails at once; sys_error otherwise.
    /// @see rdma_resolve_addr(3)
    void resolve_address(address destination, std::chrono::milliseconds timeout, address const* source = nullptr) {
        address src = source != nullptr ? *source : address{};
        check_address_family(destination, "rdma_resolve_addr");
        if (source != nullptr) check_address_family(src, "rdma_resolve_addr");
        if (int rc = ::rdma_resolve_addr(handle_.get(), source != nullptr ? src.native() : nullptr,
                                         destination.native(), rdmacxx::detail::clamp_ms(timeout));
            rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_resolve_addr", "for " + destination.to_string(), true);
    }

    /// Starts resolving the route to the resolved address (event `route_resolved` or
    /// `route_error`); `timeout` in milliseconds, clamped to INT_MAX.
    /// @throws route_not_found_error (ENETUNREACH, EHOSTUNREACH), sys_error when
    ///         rdma_resolve_route(3) fails at once.
    /// @see rdma_resolve_route(3)
    void resolve_route(std::chrono::milliseconds timeout) {
        if (int rc = ::rdma_resolve_route(handle_.get(), rdmacxx::detail::clamp_ms(timeout)); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_resolve_route", "to " + peer_address().to_string(), true);
    }

    /// Creates a queue pair of transport `Transport` for this id, in `pd` (which must be on this
    /// id's device: `context()`), with completions on `send_cq` and `recv_cq`. RC and UC are made
    /// with ibv_create_qp(3) and moved to INIT with the CM's attributes now (post receives from
    /// then on); `connect` + `establish` (active side) or `accept` (passive side) move them to
    /// RTR and RTS with the CM's attributes under the connection's `qp_settings`, and they join
    /// the id (`native_handle()->qp`) once connected, so that `disconnect` moves them to ERR. UD
    /// is made with rdma_create_qp(3), which moves it to RTS with Q_Key RDMA_UDP_QKEY. The queue
    /// pair must be destroyed through `destroy_qp` before this id.
    /// @throws sys_error when rdma_create_qp(3), ibv_create_qp(3), rdma_init_qp_attr(3) or
    ///         ibv_modify_qp(3) fails.
    /// @see rdma_create_qp(3), ibv_create_qp(3)
    template <transport Transport, completion_strategy Completion>
    [[nodiscard]] queue_pair<Transport, Completion>
    create_qp(protection_domain& pd, completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq,
              qp_capabilities const& caps = {}) {
        return create_qp<Transport, Completion>(pd, send_cq, recv_cq, nullptr, caps);
    }

    /// As `create_qp` above, the QP taking its receive buffers from `srq` when not null (its own
    /// receive queue then has no entries: post receives to the SRQ).
    /// @throws as `create_qp` above.
    template <transport Transport, completion_strategy Completion>
    [[nodiscard]] queue_pair<Transport, Completion>
    create_qp(protection_domain& pd, completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq,
              shared_receive_queue* srq, qp_capabilities const& caps = {}) {
        ibv_qp_init_attr init =
            rdmacxx::detail::qp_init_attributes(Transport::qp_type, send_cq.native_handle(), recv_cq.native_handle(),
                                                srq != nullptr ? srq->native_handle() : nullptr, caps);
        if constexpr (Transport::connected)
            if (pending_.get() != nullptr) [[unlikely]]
                rdmacxx::detail::throw_argument("a QP made on this CM id is not connected yet: an id connects one "
                                                "QP (destroy_qp it first)");
        ibv_qp* made = nullptr;
        if constexpr (Transport::connected) {
            // Not rdma_create_qp: librdmacm would move an id's QP to RTR and RTS itself with the
            // kernel's attributes alone (RC's on the TCP port space, which ibv_modify_qp refuses
            // on UC), leaving no place for the connection's settings.
            made = ::ibv_create_qp(pd.native_handle(), &init);
            if (made == nullptr) [[unlikely]]
                rdmacxx::detail::throw_errno("ibv_create_qp",
                                             [] { return std::string{"for a "} + Transport::name + " QP on a CM id"; });
            try {
                ibv_qp_attr attr{};
                attr.qp_state = IBV_QPS_INIT;
                int mask = 0;
                init_attributes(attr, mask);
                attr.qp_access_flags = 0; // granted when connected, as the settings ask
                modify(made, attr, mask | IBV_QP_ACCESS_FLAGS);
            } catch (...) {
                (void)::ibv_destroy_qp(made);
                throw;
            }
        } else {
            if (int rc = ::rdma_create_qp(handle_.get(), pd.native_handle(), &init); rc != 0) [[unlikely]]
                rdmacxx::detail::throw_cm_call(rc, "rdma_create_qp", std::string{"for a "} + Transport::name + " QP");
            made = handle_->qp;
        }
        std::uint32_t mtu = 0;
        if constexpr (!Transport::connected) {
            ibv_port_attr port{};
            if (::ibv_query_port(handle_->verbs, handle_->port_num, &port) == 0) mtu = mtu_bytes(port.active_mtu);
        }
        try {
            qp_capabilities const granted = rdmacxx::detail::granted(init);
            queue_pair<Transport, Completion> qp{adopt_qp, pd, made, granted, mtu, send_cq, recv_cq};
            if constexpr (Transport::connected) pending_.follow(qp); // its cell follows the return
            return qp;
        } catch (...) { // the ledger of a checked QP could not be made, and the QP is gone with it
            if constexpr (!Transport::connected) handle_->qp = nullptr;
            throw;
        }
    }

    /// Destroys `qp`, made by `create_qp` on this id, and detaches it from the id; `qp` is left
    /// empty (moved from).
    template <transport Transport, completion_strategy Completion>
    void destroy_qp(queue_pair<Transport, Completion>& qp) noexcept {
        if (handle_ && handle_->qp == qp.native_handle()) handle_->qp = nullptr;
        if (pending_.get() == qp.native_handle()) pending_.reset();
        queue_pair<Transport, Completion> gone{std::move(qp)};
    }

    /// Starts connecting with `settings` and `private_data` (RC, UC: a connection; UD: a
    /// service lookup). A QP from `create_qp` (RC, UC) is named in the request; the CM then
    /// reports `connect_response`, and `establish(settings)` finishes. UD: `established` (or
    /// `rejected`, `unreachable`, `connect_error`) comes by itself.
    /// @throws argument_error for private data over the limit or `settings` refused by
    ///         `detail::validate` (nothing sent); sys_error when rdma_connect(3) fails.
    /// @see rdma_connect(3)
    void connect(qp_settings const& settings = {}, std::span<std::byte const> private_data = {}) {
        rdma_conn_param p = prepare(settings, private_data, private_data_message::connect);
        if (ibv_qp* const qp = pending_.get(); qp != nullptr) {
            p.qp_num = qp->qp_num;
            p.srq = qp->srq != nullptr ? 1 : 0;
        }
        send_connect(p);
    }

    /// Starts connecting a QP that was not made on this id (`qp_num`, taking its receives from an
    /// SRQ when `srq`): the active side then gets `connect_response`, moves its QP to RTR and RTS
    /// (`modify_qp`) and calls `establish`. Otherwise as `connect(settings, private_data)`.
    /// @throws as `connect(settings, private_data)`.
    /// @see rdma_connect(3)
    void connect(qp_settings const& settings, std::span<std::byte const> private_data, std::uint32_t qp_num, bool srq) {
        rdma_conn_param p = prepare(settings, private_data, private_data_message::connect);
        p.qp_num = qp_num;
        p.srq = srq ? 1 : 0;
        send_connect(p);
    }

    /// Accepts the connect request this id came with, with `settings` and `private_data`: a QP
    /// from `create_qp` (RC, UC) is moved to RTR and RTS first (`modify_qp`) and joins the id;
    /// `established` follows on RC and UC.
    /// @throws argument_error for private data over the limit or `settings` refused by
    ///         `detail::validate` (nothing sent); sys_error when rdma_accept(3),
    ///         rdma_init_qp_attr(3) or ibv_modify_qp(3) fails.
    /// @see rdma_accept(3)
    void accept(qp_settings const& settings = {}, std::span<std::byte const> private_data = {}) {
        rdma_conn_param p = prepare(settings, private_data, private_data_message::accept);
        if (ibv_qp* const qp = pending_.get(); qp != nullptr) {
            modify_qp(qp, IBV_QPS_INIT, settings); // INIT → INIT: the access granted
            modify_qp(qp, IBV_QPS_RTR, settings);
            modify_qp(qp, IBV_QPS_RTS, settings);
            p.qp_num = qp->qp_num;
            p.srq = qp->srq != nullptr ? 1 : 0;
        }
        send_accept(p);
        if (pending_.get() != nullptr) join_pending();
    }

    /// Accepts the connect request this id came with for a QP that was not made on this id
    /// (`qp_num`; `srq` when it takes its receives from an SRQ), which the caller has moved to
    /// RTS already (`modify_qp`).
    /// @throws as `accept(settings, private_data)`.
    /// @see rdma_accept(3)
    void accept(qp_settings const& settings, std::span<std::byte const> private_data, std::uint32_t qp_num, bool srq) {
        rdma_conn_param p = prepare(settings, private_data, private_data_message::accept);
        p.qp_num = qp_num;
        p.srq = srq ? 1 : 0;
        send_accept(p);
    }

    /// Checks `settings` for a QP of type `type` on this id's device (`detail::validate`; on the
    /// UDP and IPoIB port spaces the Q_Key must be the CM's, RDMA_UDP_QKEY), before anything is
    /// made or sent; `after` ends the message. `connect` and `accept` call it; the flows call it
    /// before they make anything.
    /// @throws argument_error when a setting is refused, or the id has no device yet (resolve
    ///         or bind first); sys_error when ibv_query_device(3) fails.
    void check_settings(qp_settings const& settings, ibv_qp_type type, char const* after) const {
        if (handle_->verbs == nullptr) [[unlikely]]
            rdmacxx::detail::throw_argument(std::string{"the CM id is not bound to an RDMA device yet: resolve or "
                                                        "bind it first"} +
                                            after);
        std::string const what = "the connection with " + peer_address().to_string();
        rdmacxx::detail::validate(settings, type, rdmacxx::detail::query_device(handle_->verbs, what), what, after);
        if (datagram() && settings.qkey != RDMA_UDP_QKEY) [[unlikely]]
            rdmacxx::detail::throw_argument("Q_Key " + std::to_string(settings.qkey) + " for " + what +
                                            ": the CM's UDP port space uses RDMA_UDP_QKEY (0x01234567, "
                                            "rdmacxx::default_qkey)" +
                                            after);
    }

    /// Moves `qp`, a connected QP not made on this id by rdma_create_qp(3), to `state` (INIT,
    /// RTR or RTS) with the attributes the CM knows for this connection (rdma_init_qp_attr(3):
    /// port, P_Key, path, PSNs, QPN, RD-atomic depths, timers) under `settings`
    /// (`detail::apply`: what it sets replaces the CM's; the access granted is always its
    /// `remote_access`), then ibv_modify_qp(3). A UC QP gets the attributes less RC's.
    /// @throws argument_error when `settings` fails `detail::validate` (nothing changed);
    ///         sys_error naming the state when rdma_init_qp_attr(3) or ibv_modify_qp(3) fails.
    /// @see rdma_init_qp_attr(3)
    void modify_qp(ibv_qp* qp, ibv_qp_state state, qp_settings const& settings) {
        std::string const what = "QP " + std::to_string(qp->qp_num) + " on a CM id";
        ibv_device_attr const dev = rdmacxx::detail::query_device(qp->context, what);
        rdmacxx::detail::validate(settings, qp->qp_type, dev, what);
        ibv_qp_attr attr{};
        attr.qp_state = state;
        int mask = 0;
        init_attributes(attr, mask);
        rdmacxx::detail::apply(settings, qp->qp_type, dev, attr, mask);
        modify(qp, attr, mask);
    }

    /// Completes the active side's connection once `connect_response` came: a QP from
    /// `create_qp` is moved to RTR and RTS under `settings` (`modify_qp`) and joins the id; then
    /// the RTU is sent (rdma_establish(3)). The connection is established on return (no
    /// `established` event follows on this side). If a transition fails, the connect is
    /// rejected (the peer sees `rejected`) and the error leaves.
    /// @throws as `modify_qp`; sys_error when rdma_establish(3) fails.
    /// @see rdma_establish(3)
    void establish(qp_settings const& settings = {}) {
        if (ibv_qp* const qp = pending_.get(); qp != nullptr) {
            try {
                modify_qp(qp, IBV_QPS_INIT, settings); // INIT → INIT: the access granted
                modify_qp(qp, IBV_QPS_RTR, settings);
                modify_qp(qp, IBV_QPS_RTS, settings);
            } catch (...) {
                (void)::rdma_reject(handle_.get(), nullptr, 0);
                throw;
            }
        }
        if (int rc = ::rdma_establish(handle_.get()); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_establish", "to " + peer_address().to_string());
        if (pending_.get() != nullptr) join_pending();
    }

    /// Sets the type of service (RFC 2474: DSCP in the upper 6 bits, ECN in the lower 2) of the
    /// connection this id makes, before `resolve_route` on the active side or `listen` on the
    /// passive one. On RoCE it becomes the GRH traffic class of the QP (`ah_attr.grh.
    /// traffic_class` in ibv_query_qp(3)), and the kernel may map it to a service level.
    /// @throws not_supported_error when rdma_set_option(3) refuses it.
    /// @see rdma_set_option(3) (RDMA_OPTION_ID_TOS)
    void set_type_of_service(std::uint8_t tos) {
        set_option(RDMA_OPTION_ID_TOS, "RDMA_OPTION_ID_TOS", &tos, sizeof tos);
    }

    /// Lets this id share its address and port with other ids that ask for it too, as
    /// SO_REUSEADDR does for sockets (several ids bound to one port; a listener's port taken
    /// again while connections from it linger). Call before `bind`; a listening id takes it no
    /// more (rdma_listen(3) claims the port alone).
    /// @throws not_supported_error when rdma_set_option(3) refuses it (EINVAL on a listening id).
    /// @see rdma_set_option(3) (RDMA_OPTION_ID_REUSEADDR)
    void set_reuse_address(bool on) {
        int v = on ? 1 : 0;
        set_option(RDMA_OPTION_ID_REUSEADDR, "RDMA_OPTION_ID_REUSEADDR", &v, sizeof v);
    }

    /// Binds an IPv6 (or AF_IB) id to its own address family only (true), or lets an IPv6
    /// wildcard also take IPv4 (false), as IPV6_V6ONLY does for sockets. Call before `bind`.
    /// @throws not_supported_error when rdma_set_option(3) refuses it.
    /// @see rdma_set_option(3) (RDMA_OPTION_ID_AFONLY)
    void set_address_family_only(bool on) {
        int v = on ? 1 : 0;
        set_option(RDMA_OPTION_ID_AFONLY, "RDMA_OPTION_ID_AFONLY", &v, sizeof v);
    }

    /// Rejects the connect request this id came with, sending `private_data`; the peer sees
    /// `rejected` with reason 28 (consumer defined) on IB and RoCE.
    /// @throws argument_error for private data over the limit; sys_error when rdma_reject(3) fails.
    /// @see rdma_reject(3)
    void reject(std::span<std::byte const> private_data = {}) {
        check_private_data(private_data, private_data_message::reject, space());
        if (int rc = ::rdma_reject(handle_.get(), private_data.empty() ? nullptr : private_data.data(),
                                   static_cast<std::uint8_t>(private_data.size()));
            rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_reject", "from " + peer_address().to_string());
    }

    /// Starts disconnecting (moves the QP to ERR; both sides see `disconnected`).
    /// @throws sys_error when rdma_disconnect(3) fails (EINVAL when not connected).
    /// @see rdma_disconnect(3)
    void disconnect() {
        if (int rc = ::rdma_disconnect(handle_.get()); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_disconnect", "from " + peer_address().to_string());
    }

    /// Starts joining multicast group `group` (event `multicast_join` with the group's address
    /// handle attributes, QPN and Q_Key, or `multicast_error`). The id must be bound to a device
    /// (bind or resolve the group address first). `user_context` comes back in the event.
    /// @throws route_not_found_error, address_error, sys_error when rdma_join_multicast(3) fails.
    /// @see rdma_join_multicast(3)
    void join_multicast(address group, void* user_context = nullptr) {
        if (int rc = ::rdma_join_multicast(handle_.get(), group.native(), user_context); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_join_multicast", "for group " + group.to_string(), true);
    }

    /// Leaves multicast group `group`.
    /// @throws sys_error when rdma_leave_multicast(3) fails.
    /// @see rdma_leave_multicast(3)
    void leave_multicast(address group) {
        if (int rc = ::rdma_leave_multicast(handle_.get(), group.native()); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_leave_multicast", "for group " + group.to_string());
    }

    /// Moves the id to `channel`: its later events arrive there. (rdma_migrate_id(3) waits for
    /// the events already reported for it to be acknowledged: `cm::event`s are, on arrival.)
    /// @throws sys_error when rdma_migrate_id(3) fails.
    /// @see rdma_migrate_id(3)
    void migrate(event_channel& channel) {
        if (int rc = ::rdma_migrate_id(handle_.get(), channel.native_handle()); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_migrate_id", {});
    }

    /// The local address (after bind, resolve or a connect request).
    [[nodiscard]] address local_address() const noexcept {
        return {::rdma_get_local_addr(handle_.get()), sizeof(sockaddr_storage)};
    }
    /// The peer's address (after resolve or a connect request).
    [[nodiscard]] address peer_address() const noexcept {
        return {::rdma_get_peer_addr(handle_.get()), sizeof(sockaddr_storage)};
    }
    /// The port space.
    [[nodiscard]] port_space space() const noexcept { return static_cast<port_space>(handle_->ps); }
    /// True on the UDP and IPoIB port spaces, whose connections are UD.
    [[nodiscard]] bool datagram() const noexcept { return space() == port_space::udp || space() == port_space::ipoib; }
    /// True once the id is bound to an RDMA device (after bind to a device address, resolve, or
    /// for the id of a connect request).
    [[nodiscard]] bool has_device() const noexcept { return handle_->verbs != nullptr; }
    /// The device the id is bound to, as an `rdmacxx::context` to make PDs and CQs on.
    /// @throws argument_error when it is not bound to one yet.
    [[nodiscard]] rdmacxx::context& context() const { return verbs_context(handle_->verbs); }
    /// The 1-based port of the device the id uses (0 before it has one).
    [[nodiscard]] std::uint8_t port_num() const noexcept { return handle_->port_num; }
    /// The librdmacm id.
    [[nodiscard]] rdma_cm_id* native_handle() const noexcept { return handle_.get(); }
    /// Gives up ownership and returns the id.
    [[nodiscard]] rdma_cm_id* release() noexcept { return handle_.release(); }

private:
    void set_option(int name, char const* option, void* value, std::size_t size) {
        if (int rc = ::rdma_set_option(handle_.get(), RDMA_OPTION_ID, name, value, size); rc != 0) [[unlikely]] {
            int const err = rdmacxx::detail::cm_errno(rc);
            std::string what = std::string{option} + (has_device() ? " on " + std::string{context().name()} : "");
            if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == ENOPROTOOPT)
                throw rdmacxx::not_supported_error(err, "rdma_set_option", std::move(what));
            rdmacxx::detail::throw_cm_call(rc, "rdma_set_option", std::move(what));
        }
    }

    // AF_IB needs an InfiniBand port; on a RoCE-only host the CM would refuse it (ENODEV on
    // bind) or mis-resolve it, so it is refused here, naming the devices.
    static void check_address_family(address const& a, char const* call) {
        if (a.family() != AF_IB) return;
        std::string seen;
        try {
            for (rdmacxx::device const& dev : rdmacxx::device_list{}) {
                rdmacxx::context ctx = dev.open();
                for (std::uint8_t p = 1; p <= ctx.port_count(); ++p) {
                    bool const ethernet = ctx.query_port(p).is_ethernet();
                    if (!ethernet) return; // an InfiniBand port: AF_IB may work
                    seen += (seen.empty() ? "" : ", ") + std::string{dev.name()} + "/" + std::to_string(p) + " (RoCE)";
                }
            }
        } catch (rdmacxx::error const&) {
            return; // cannot tell: let the CM decide
        }
        throw rdmacxx::not_supported_error(EAFNOSUPPORT, call,
                                           "refused before the call: the AF_IB address " + a.to_string() +
                                               " needs an InfiniBand port, and this host has " +
                                               (seen.empty() ? std::string{"no RDMA port"} : "only " + seen) +
                                               "; RoCE ids take AF_INET or AF_INET6 addresses");
    }

    // What `connect` and `accept` do before the call: the checks (nothing is sent when one
    // fails), then the parameters in librdmacm's form. The depths left empty ask librdmacm for
    // the device's limits (255); the RNR retry count sent is what a peer whose QP is on its id
    // retries with, the same as this side's.
    rdma_conn_param prepare(qp_settings const& settings, std::span<std::byte const> private_data,
                            private_data_message message) {
        check_private_data(private_data, message, space());
        ibv_qp* const qp = pending_.get();
        check_settings(settings,
                       qp != nullptr ? qp->qp_type
                       : datagram()  ? IBV_QPT_UD
                                     : IBV_QPT_RC,
                       "; nothing was sent");
        rdma_conn_param p{};
        p.private_data = private_data.empty() ? nullptr : private_data.data();
        p.private_data_len = static_cast<std::uint8_t>(private_data.size());
        p.responder_resources = settings.responder_resources.value_or(RDMA_MAX_RESP_RES);
        p.initiator_depth = settings.initiator_depth.value_or(RDMA_MAX_INIT_DEPTH);
        p.flow_control = 1;
        p.retry_count = settings.retry_count;
        p.rnr_retry_count = settings.rnr_retry_count;
        return p;
    }

    // The CM's attributes of the transition to `attr.qp_state` for this id's connection.
    void init_attributes(ibv_qp_attr& attr, int& mask) {
        if (int rc = ::rdma_init_qp_attr(handle_.get(), &attr, &mask); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_init_qp_attr",
                                           std::string{"for state "} + rdmacxx::detail::qp_state_name(attr.qp_state));
    }

    static void modify(ibv_qp* qp, ibv_qp_attr& attr, int mask) {
        if (int rc = ::ibv_modify_qp(qp, &attr, mask); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_sys(rc, "ibv_modify_qp",
                                       "moving QP " + std::to_string(qp->qp_num) + " to " +
                                           rdmacxx::detail::qp_state_name(attr.qp_state) +
                                           " with the CM's attributes (" + rdmacxx::detail::qp_mask_names(mask) + ")");
    }

    void send_connect(rdma_conn_param& p) {
        if (int rc = ::rdma_connect(handle_.get(), &p); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_connect", "to " + peer_address().to_string());
    }

    void send_accept(rdma_conn_param& p) {
        if (int rc = ::rdma_accept(handle_.get(), &p); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_accept", "from " + peer_address().to_string());
    }

    std::unique_ptr<rdma_cm_id, rdmacxx::detail::cm_id_deleter> handle_;
    // A connected QP made by create_qp and not yet connected (it joins the id once connected):
    // followed through the queue_pair's cell, so a QP moved elsewhere is still found and one
    // destroyed otherwise than by destroy_qp is seen as gone, never read. Moves with the id.
    struct pending_qp {
        std::shared_ptr<void const> cell;         // the queue_pair's anchor cell, erased
        ibv_qp* (*native)(void const*) = nullptr; // its ibv_qp, or null once it is gone
        [[nodiscard]] ibv_qp* get() const noexcept { return cell ? native(cell.get()) : nullptr; }
        template <transport Transport, completion_strategy Completion>
        void follow(queue_pair<Transport, Completion> const& qp) {
            cell = qp.anchor_cell().erased();
            native = [](void const* c) -> ibv_qp* {
                auto const* q = rdmacxx::detail::link<queue_pair<Transport, Completion>>::follow(c);
                return q != nullptr ? q->native_handle() : nullptr;
            };
        }
        void reset() noexcept { cell.reset(); }
    };
    pending_qp pending_;
    // The pending QP that joins the id now that it is connected.
    void join_pending() noexcept {
        handle_->qp = pending_.get();
        pending_.reset();
    }
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
