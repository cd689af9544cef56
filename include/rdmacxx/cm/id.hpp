#pragma once
/// @file
/// `cm::id`: an RDMA CM identifier (`rdma_cm_id`), the CM's analogue of a socket, with the
/// active calls (resolve address and route, connect), the passive ones (bind, listen, accept,
/// reject), disconnect, multicast join and leave, and queue-pair creation on it.

#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/transport.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

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

/// Parameters of `connect` and `accept`: private data and the RC transport's settings, each
/// saying which side it governs. The defaults, as `connect_options`' (qp_options.hpp): a peer
/// that died silently is detected on every provider (ACK timeout 67.1 ms, 6 retries: the
/// sender's request completes with IBV_WC_RETRY_EXC_ERR after about 470 ms, `dead_peer_bound`),
/// as many READs and atomics in flight as both devices allow (not 1), finite RNR retries and a
/// 1.28 ms RNR back-off (not the CM's 655 ms).
/// @see rdma_connect(3), rdma_accept(3), rdma_set_option(3)
struct connection_parameters {
    std::span<std::byte const> private_data{}; ///< sent to the peer, at most `max_private_data`
    /// This side as a **target** (RC): RDMA READs and atomics from the peer it accepts
    /// outstanding (`max_dest_rd_atomic`); RDMA_MAX_RESP_RES (255, the default) asks librdmacm
    /// for the device's `max_qp_rd_atom` (on accept, no more than the peer's initiator depth).
    std::uint8_t responder_resources = RDMA_MAX_RESP_RES;
    /// This side as an **initiator** (RC): RDMA READs and atomics it may have outstanding
    /// (`max_rd_atomic`); RDMA_MAX_INIT_DEPTH (255, the default) asks librdmacm for the device's
    /// `max_qp_init_rd_atom` (on accept, no more than the peer's responder resources).
    std::uint8_t initiator_depth = RDMA_MAX_INIT_DEPTH;
    std::uint8_t flow_control = 1; ///< hardware flow control offered
    /// **Both** sides as senders (RC): retransmissions after an ACK timeout (0 … 7). Sent in the
    /// connect request, which fixes it for both QPs; `accept` ignores it. Default 6
    /// (`default_retry_count`): 7 never runs out on rxe (see `max_retry_count`).
    std::uint8_t retry_count = default_retry_count;
    /// The **peer** as a sender (RC): how often the peer retries after an RNR NAK from this side
    /// (0 … 6; 7 = forever). The CM carries it across: what `connect` sets governs the passive
    /// side's sends, what `accept` sets the active side's. Default 6: a peer whose receiver never
    /// posts fails with IBV_WC_RNR_RETRY_EXC_ERR instead of hanging.
    std::uint8_t rnr_retry_count = 6;
    /// This side as a **sender** (RC, UC): its local ACK timeout, set with rdma_set_option(3)
    /// (RDMA_OPTION_ID_ACK_TIMEOUT) before connecting or accepting. Default
    /// `default_ack_timeout`, 67.1 ms (code 14), as on the verbs path; empty: the CM's own (from
    /// the path record's packet lifetime: code 19, 2.1 s per try, on rxe with Linux 6.1, so 15 s
    /// before a dead peer is noticed with 6 retries). Not set on the UDP port space (UD has no
    /// ACKs; the kernel refuses the option there).
    std::optional<rdmacxx::ack_timeout> timeout = default_ack_timeout;
    /// This side as a **receiver** (RC): the back-off its RNR NAKs ask of the peer (see
    /// `rdmacxx::rnr_timer`). The CM itself always sets code 0, 655.36 ms; the connection flows
    /// (`cm::connect`, `connect_request::accept`) set this once the QP is in RTS, with
    /// `id::set_min_rnr_timer`.
    rdmacxx::rnr_timer min_rnr_timer = std::chrono::microseconds{1280};
};

/// The `rdmacxx::context` wrapping a verbs context that librdmacm opened (`id->verbs`), so that
/// protection domains, CQs and memory can be made on it. librdmacm keeps its device contexts
/// open for the life of the process, so the wrapper is never destroyed and never closes it;
/// one wrapper per device, made on first use.
/// Thread-safety: thread-safe (a mutex guards the table).
[[nodiscard]] inline rdmacxx::context& verbs_context(ibv_context* verbs) {
    if (verbs == nullptr) [[unlikely]]
        rdmacxx::detail::throw_argument(
            "the CM id is not bound to an RDMA device yet: bind it or resolve an address first");
    // Never-destroyed storage: the contexts belong to librdmacm.
    struct borrowed {
        explicit borrowed(ibv_context* c) : ctx(c) {} // may throw std::bad_alloc (the context's anchor)
        borrowed(borrowed const&) = delete;
        borrowed& operator=(borrowed const&) = delete;
        ~borrowed() {} // NOLINT(modernize-use-equals-default): "= default" would be deleted (union member)
        union {
            rdmacxx::context ctx;
        };
    };
    static std::mutex mutex;
    static auto* const table = new std::map<ibv_context*, std::unique_ptr<borrowed>>;
    std::lock_guard lock{mutex};
    auto& slot = (*table)[verbs];
    if (!slot) slot = std::make_unique<borrowed>(verbs);
    return slot->ctx;
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
    /// @throws unsupported_error for an AF_IB address on a host with no InfiniBand port (RoCE
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
    /// `addr_error`), from `source` when given. `timeout` bounds the resolution (milliseconds).
    /// @throws unsupported_error for an AF_IB address on a host with no InfiniBand port, before
    ///         the call; route_not_found_error (ENETUNREACH, EHOSTUNREACH), address_error when the
    ///         call fails at once; sys_error otherwise.
    /// @see rdma_resolve_addr(3)
    void resolve_address(address destination, std::chrono::milliseconds timeout, address const* source = nullptr) {
        address src = source != nullptr ? *source : address{};
        check_address_family(destination, "rdma_resolve_addr");
        if (source != nullptr) check_address_family(src, "rdma_resolve_addr");
        if (int rc = ::rdma_resolve_addr(handle_.get(), source != nullptr ? src.native() : nullptr,
                                         destination.native(), static_cast<int>(timeout.count()));
            rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_resolve_addr", "for " + destination.to_string(), true);
    }

    /// Starts resolving the route to the resolved address (event `route_resolved` or
    /// `route_error`); `timeout` in milliseconds.
    /// @throws route_not_found_error (ENETUNREACH, EHOSTUNREACH), sys_error when
    ///         rdma_resolve_route(3) fails at once.
    /// @see rdma_resolve_route(3)
    void resolve_route(std::chrono::milliseconds timeout) {
        if (int rc = ::rdma_resolve_route(handle_.get(), static_cast<int>(timeout.count())); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_resolve_route", "to " + peer_address().to_string(), true);
    }

    /// Creates a queue pair of transport `Transport` on this id, in `pd` (which must be on this
    /// id's device: `verbs_context(native_handle()->verbs)`), with completions on `send_cq` and
    /// `recv_cq`. The CM moves it through its states: RC to INIT now and to RTS when connected;
    /// UD straight to RTS with Q_Key RDMA_UDP_QKEY. UC is made with ibv_create_qp(3) and moved
    /// to INIT here, to RTR and RTS by `accept` (passive) or `establish` (active, after
    /// `connect_response`) with the CM's attributes less RC's (the TCP port space's kernel
    /// attributes are RC's, which ibv_modify_qp(3) refuses on UC); it joins the id
    /// (`native_handle()->qp`) once connected. The queue pair must be destroyed through
    /// `destroy_qp` before this id.
    /// @throws sys_error when rdma_create_qp(3), ibv_create_qp(3), rdma_init_qp_attr(3) or
    ///         ibv_modify_qp(3) fails.
    /// @see rdma_create_qp(3)
    template <transport Transport, completion_strategy Completion>
    [[nodiscard]] queue_pair<Transport, Completion>
    create_qp(protection_domain& pd, completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq,
              qp_capabilities const& caps = {}) {
        return create_qp<Transport, Completion>(pd, send_cq, recv_cq, nullptr, caps);
    }

    /// As `create_qp` above, the QP taking its receive buffers from `srq` when not null (its own
    /// receive queue then has no entries: post receives to the SRQ).
    /// @throws sys_error when rdma_create_qp(3) fails.
    template <transport Transport, completion_strategy Completion>
    [[nodiscard]] queue_pair<Transport, Completion>
    create_qp(protection_domain& pd, completion_queue<Completion>& send_cq, completion_queue<Completion>& recv_cq,
              shared_receive_queue* srq, qp_capabilities const& caps = {}) {
        ibv_qp_init_attr init{};
        init.send_cq = send_cq.native_handle();
        init.recv_cq = recv_cq.native_handle();
        init.srq = srq != nullptr ? srq->native_handle() : nullptr;
        init.cap.max_send_wr = caps.max_send_wr;
        init.cap.max_recv_wr = srq != nullptr ? 0 : caps.max_recv_wr;
        init.cap.max_send_sge = caps.max_send_sge;
        init.cap.max_recv_sge = caps.max_recv_sge;
        init.cap.max_inline_data = caps.max_inline_data;
        init.qp_type = Transport::qp_type;
        ibv_qp* made = nullptr;
        if constexpr (Transport::qp_type == IBV_QPT_UC) {
            // Not rdma_create_qp: librdmacm would move an id's QP to RTR and RTS itself with the
            // kernel's attributes for the port space, which are RC's on the TCP port space, and
            // ibv_modify_qp refuses RC-only attributes on a UC QP. The QP stays off the id
            // (`native_handle()->qp` null) until connected; `connect`/`establish`/`accept` move
            // it with the CM's attributes, stripped to UC's.
            made = ::ibv_create_qp(pd.native_handle(), &init);
            if (made == nullptr) [[unlikely]]
                rdmacxx::detail::throw_errno("ibv_create_qp", "for a UC QP on a CM id");
            try {
                modify_qp(made, IBV_QPS_INIT);
            } catch (...) {
                (void)::ibv_destroy_qp(made);
                throw;
            }
            uc_.qp = made;
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
            return queue_pair<Transport, Completion>{adopt_qp,
                                                     pd,
                                                     made,
                                                     {init.cap.max_send_wr, init.cap.max_recv_wr, init.cap.max_send_sge,
                                                      init.cap.max_recv_sge, init.cap.max_inline_data},
                                                     mtu,
                                                     send_cq,
                                                     recv_cq};
        } catch (...) { // the ledger of a checked QP could not be made, and the QP is gone with it
            handle_->qp = nullptr;
            uc_.qp = nullptr;
            throw;
        }
    }

    /// Destroys `qp`, made by `create_qp` on this id, and detaches it from the id; `qp` is left
    /// empty (moved from).
    template <transport Transport, completion_strategy Completion>
    void destroy_qp(queue_pair<Transport, Completion>& qp) noexcept {
        if (handle_ && handle_->qp == qp.native_handle()) handle_->qp = nullptr;
        if (uc_.qp == qp.native_handle()) uc_.qp = nullptr;
        queue_pair<Transport, Completion> gone{std::move(qp)};
    }

    /// Starts connecting (RC: a connection; UD: a service lookup) with `params` (event
    /// `established`, or `rejected`, `unreachable`, `connect_error`; `connect_response` when no
    /// QP was created on the id, or it is UC: then call `establish`). Sets `params.timeout` first when given. The CM
    /// leaves an RC QP's minimum RNR timer at 655 ms: once `established` came, call `set_min_rnr_timer` with
    /// `params.min_rnr_timer` (`cm::connect` does).
    /// @throws argument_error for private data over the limit or a retry count over 7 (nothing
    ///         sent); unsupported_error when rdma_set_option(3) refuses the ACK timeout; sys_error when
    ///         rdma_connect(3) fails.
    /// @see rdma_connect(3)
    void connect(connection_parameters const& params = {}) {
        rdma_conn_param p = prepare(params, private_data_message::connect);
        if (uc_.qp != nullptr) p.qp_num = uc_.qp->qp_num; // the QP is not on the id (see create_qp)
        send_connect(p);
    }

    /// Starts connecting a QP that was not made on this id (`qp_num`, taking its receives from an
    /// SRQ when `srq`): the active side then gets `connect_response` instead of `established`,
    /// moves its QP to RTR and RTS itself (`modify_qp`) and calls `establish`. Otherwise as
    /// `connect(params)`.
    /// @throws as `connect(params)`.
    /// @see rdma_connect(3)
    void connect(connection_parameters const& params, std::uint32_t qp_num, bool srq) {
        rdma_conn_param p = prepare(params, private_data_message::connect);
        p.qp_num = qp_num;
        p.srq = srq ? 1 : 0;
        send_connect(p);
    }

    /// Accepts the connect request this id came with for a QP that was not made on this id
    /// (`qp_num`; `srq` when it takes its receives from an SRQ), which the caller has moved to
    /// RTS already (`modify_qp`, as librdmacm does for its own QPs before it accepts).
    /// @throws as `accept(params)`.
    /// @see rdma_accept(3)
    void accept(connection_parameters const& params, std::uint32_t qp_num, bool srq) {
        rdma_conn_param p = prepare(params, private_data_message::accept);
        p.qp_num = qp_num;
        p.srq = srq ? 1 : 0;
        send_accept(p);
    }

    /// Moves `qp`, a QP not made on this id, to `state` (INIT, RTR or RTS) with the attributes
    /// the CM knows for this connection (rdma_init_qp_attr(3): port, P_Key, access, path, PSNs,
    /// QPN, timeouts), then ibv_modify_qp(3). `rd_atomic`, when not 255, replaces the READ and
    /// atomic depth of the step (RTR: `max_dest_rd_atomic`; RTS: `max_rd_atomic`); with 255 the
    /// CM's value is kept, no more than the device's limit. A UC QP gets the attributes less
    /// RC's (READ and atomic depth, ACK timeout, retries, RNR timer; no READ or atomic access).
    /// @throws sys_error naming the state when rdma_init_qp_attr(3) or ibv_modify_qp(3) fails.
    /// @see rdma_init_qp_attr(3)
    void modify_qp(ibv_qp* qp, ibv_qp_state state, std::uint8_t rd_atomic = 255) {
        ibv_qp_attr attr{};
        attr.qp_state = state;
        int mask = 0;
        if (int rc = ::rdma_init_qp_attr(handle_.get(), &attr, &mask); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_init_qp_attr",
                                           std::string{"for state "} + rdmacxx::detail::qp_state_name(state));
        if (qp->qp_type == IBV_QPT_UC) {
            // The TCP port space's attributes are RC's; ibv_modify_qp(3) refuses RC-only ones on UC.
            mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER);
            attr.qp_access_flags &= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE; // no READ or atomics on UC
        } else if (state == IBV_QPS_RTR || state == IBV_QPS_RTS) {
            ibv_device_attr dev{};
            std::uint8_t& depth = state == IBV_QPS_RTR ? attr.max_dest_rd_atomic : attr.max_rd_atomic;
            if (rd_atomic != 255) {
                depth = rd_atomic;
            } else if (::ibv_query_device(qp->context, &dev) == 0) {
                int const limit = state == IBV_QPS_RTR ? dev.max_qp_rd_atom : dev.max_qp_init_rd_atom;
                if (depth > limit) depth = static_cast<std::uint8_t>(limit);
            }
        }
        if (int rc = ::ibv_modify_qp(qp, &attr, mask); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_sys(rc, "ibv_modify_qp",
                                       std::string{"moving QP "} + std::to_string(qp->qp_num) + " to " +
                                           rdmacxx::detail::qp_state_name(state) + " with the CM's attributes (" +
                                           rdmacxx::detail::qp_mask_names(mask) + ")");
    }

    /// Completes the active side's connection of a QP not made on this id, once
    /// `connect_response` came: a QP the caller made and moved to RTS (`modify_qp`), or a UC QP
    /// from `create_qp` (which is not on the id, so librdmacm reports `connect_response`, not
    /// `established`), which it moves to RTR and RTS itself with the CM's attributes less RC's.
    /// Then sends the RTU (rdma_establish(3)); `established` follows on this id. A UC QP from
    /// `create_qp` is the id's afterwards, so `disconnect` moves it to ERR. `cm::connect` calls it.
    /// @throws sys_error when rdma_init_qp_attr(3), ibv_modify_qp(3) or rdma_establish(3) fails.
    /// @see rdma_establish(3)
    void establish() {
        if (uc_.qp != nullptr) {
            modify_qp(uc_.qp, IBV_QPS_INIT); // INIT → INIT: the access flags the connection granted
            modify_qp(uc_.qp, IBV_QPS_RTR);
            modify_qp(uc_.qp, IBV_QPS_RTS);
        }
        if (int rc = ::rdma_establish(handle_.get()); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_establish", "to " + peer_address().to_string());
        if (uc_.qp != nullptr) handle_->qp = std::exchange(uc_.qp, nullptr);
    }

    /// Accepts the connect request this id came with (event `established` follows on RC and
    /// UC). Sets `params.timeout` first when given, and `params.min_rnr_timer` on the id's RC QP
    /// after (librdmacm has moved it to RTS); a UC QP from `create_qp` is moved to RTS first.
    /// @throws argument_error for private data over the limit or a retry count over 7 (nothing
    ///         sent); unsupported_error when rdma_set_option(3) refuses the ACK timeout; sys_error
    ///         when rdma_accept(3), rdma_init_qp_attr(3) or ibv_modify_qp(3) fails.
    /// @see rdma_accept(3)
    void accept(connection_parameters const& params = {}) {
        rdma_conn_param p = prepare(params, private_data_message::accept);
        if (uc_.qp != nullptr) { // UC: moved here, as librdmacm would with RC's attributes (see create_qp)
            modify_qp(uc_.qp, IBV_QPS_INIT);
            modify_qp(uc_.qp, IBV_QPS_RTR);
            modify_qp(uc_.qp, IBV_QPS_RTS);
            p.qp_num = uc_.qp->qp_num;
        }
        send_accept(p);
        if (uc_.qp != nullptr) handle_->qp = std::exchange(uc_.qp, nullptr);
        set_min_rnr_timer(params.min_rnr_timer); // librdmacm has moved an RC QP to RTS
    }

    /// Sets the local ACK timeout of the QP this id connects (RC), before `connect` or `accept`
    /// (which do so themselves when `connection_parameters::timeout` is set): a duration, rounded
    /// up to 4.096 µs × 2ⁿ (`rdmacxx::ack_timeout`), e.g. `set_ack_timeout(50ms)` sets code 14,
    /// 67.1 ms. It governs this side as a **sender** (requester): the CM puts it in the QP's
    /// RTS attributes (`timeout` in ibv_query_qp(3)).
    /// @throws unsupported_error when rdma_set_option(3) refuses the option (an old kernel).
    /// @see rdma_set_option(3)
    void set_ack_timeout(rdmacxx::ack_timeout timeout) {
        std::uint8_t code = timeout.code();
        set_option(RDMA_OPTION_ID_ACK_TIMEOUT, "RDMA_OPTION_ID_ACK_TIMEOUT", &code, sizeof code);
    }

    /// Sets `params.timeout` (`set_ack_timeout`) when it is not empty and this id is on the TCP
    /// port space (RC, UC); does nothing on the UDP and IPoIB port spaces, which have no ACKs (the
    /// kernel refuses the option there). `connect` and `accept` call it; a flow that moves a QP
    /// not made on this id to RTS itself (`modify_qp`) calls it before that.
    /// @throws unsupported_error when rdma_set_option(3) refuses the option (an old kernel).
    /// @see rdma_set_option(3)
    void apply_ack_timeout(connection_parameters const& params) {
        if (params.timeout && space() == port_space::tcp) set_ack_timeout(*params.timeout);
    }

    /// Sets the type of service (RFC 2474: DSCP in the upper 6 bits, ECN in the lower 2) of the
    /// connection this id makes, before `resolve_route` on the active side or `listen` on the
    /// passive one. On RoCE it becomes the GRH traffic class of the QP (`ah_attr.grh.
    /// traffic_class` in ibv_query_qp(3)), and the kernel may map it to a service level.
    /// @throws unsupported_error when rdma_set_option(3) refuses it.
    /// @see rdma_set_option(3) (RDMA_OPTION_ID_TOS)
    void set_type_of_service(std::uint8_t tos) {
        set_option(RDMA_OPTION_ID_TOS, "RDMA_OPTION_ID_TOS", &tos, sizeof tos);
    }

    /// Lets this id share its address and port with other ids that ask for it too, as
    /// SO_REUSEADDR does for sockets (several ids bound to one port; a listener's port taken
    /// again while connections from it linger). Call before `bind`; a listening id takes it no
    /// more (rdma_listen(3) claims the port alone).
    /// @throws unsupported_error when rdma_set_option(3) refuses it (EINVAL on a listening id).
    /// @see rdma_set_option(3) (RDMA_OPTION_ID_REUSEADDR)
    void set_reuse_address(bool on) {
        int v = on ? 1 : 0;
        set_option(RDMA_OPTION_ID_REUSEADDR, "RDMA_OPTION_ID_REUSEADDR", &v, sizeof v);
    }

    /// Binds an IPv6 (or AF_IB) id to its own address family only (true), or lets an IPv6
    /// wildcard also take IPv4 (false), as IPV6_V6ONLY does for sockets. Call before `bind`.
    /// @throws unsupported_error when rdma_set_option(3) refuses it.
    /// @see rdma_set_option(3) (RDMA_OPTION_ID_AFONLY)
    void set_address_family_only(bool on) {
        int v = on ? 1 : 0;
        set_option(RDMA_OPTION_ID_AFONLY, "RDMA_OPTION_ID_AFONLY", &v, sizeof v);
    }

    /// Sets the minimum RNR NAK timer of the RC QP made on this id (`create_qp`), which must be
    /// in RTS (after `accept`, or once `established` came on the active side): an RTS → RTS
    /// ibv_modify_qp(3). Does nothing without a QP or on UD.
    /// @throws sys_error when ibv_modify_qp(3) fails.
    void set_min_rnr_timer(rdmacxx::rnr_timer timer) { set_min_rnr_timer(timer, handle_->qp); }

    /// As `set_min_rnr_timer(timer)`, on `qp` (a QP connected through this id but not made on
    /// it, in RTS). Does nothing for a null or UD `qp`.
    /// @throws sys_error when ibv_modify_qp(3) fails.
    static void set_min_rnr_timer(rdmacxx::rnr_timer timer, ibv_qp* qp) {
        if (qp == nullptr || qp->qp_type != IBV_QPT_RC) return;
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RTS;
        attr.min_rnr_timer = timer.code();
        if (int rc = ::ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_sys(rc, "ibv_modify_qp",
                                       "setting the minimum RNR timer of QP " + std::to_string(qp->qp_num));
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
            throw unsupported_error(err, std::string{"rdma_set_option("} + option + ") refused" +
                                             (has_device() ? " on " + std::string{context().name()} : std::string{}));
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
        throw unsupported_error(EAFNOSUPPORT, std::string{call} + " refused before the call: the AF_IB address " +
                                                  a.to_string() + " needs an InfiniBand port, and this host has " +
                                                  (seen.empty() ? std::string{"no RDMA port"} : "only " + seen) +
                                                  "; RoCE ids take AF_INET or AF_INET6 addresses");
    }

    // What `connect` and `accept` do before the call: the checks (nothing is sent when one
    // fails), the ACK timeout when given, and the parameters in librdmacm's form.
    rdma_conn_param prepare(connection_parameters const& params, private_data_message message) {
        check_private_data(params.private_data, message, space());
        rdmacxx::detail::check_retry_counts(params.retry_count, params.rnr_retry_count, "rnr_retry_count",
                                            "; nothing was sent");
        apply_ack_timeout(params);
        return native_params(params);
    }

    void send_connect(rdma_conn_param& p) {
        if (int rc = ::rdma_connect(handle_.get(), &p); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_connect", "to " + peer_address().to_string());
    }

    void send_accept(rdma_conn_param& p) {
        if (int rc = ::rdma_accept(handle_.get(), &p); rc != 0) [[unlikely]]
            rdmacxx::detail::throw_cm_call(rc, "rdma_accept", "from " + peer_address().to_string());
    }

    static rdma_conn_param native_params(connection_parameters const& params) noexcept {
        rdma_conn_param p{};
        p.private_data = params.private_data.empty() ? nullptr : params.private_data.data();
        p.private_data_len = static_cast<std::uint8_t>(params.private_data.size());
        p.responder_resources = params.responder_resources;
        p.initiator_depth = params.initiator_depth;
        p.flow_control = params.flow_control;
        p.retry_count = params.retry_count;
        p.rnr_retry_count = params.rnr_retry_count;
        return p;
    }

    std::unique_ptr<rdma_cm_id, rdmacxx::detail::cm_id_deleter> handle_;
    // A UC QP made by create_qp and not yet connected (it joins the id once connected); the
    // pointer moves with the id.
    struct qp_cell {
        ibv_qp* qp = nullptr;
        qp_cell() noexcept = default;
        qp_cell(qp_cell&& o) noexcept : qp(std::exchange(o.qp, nullptr)) {}
        qp_cell& operator=(qp_cell&& o) noexcept {
            qp = std::exchange(o.qp, nullptr);
            return *this;
        }
        ~qp_cell() = default;
    };
    qp_cell uc_;
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
