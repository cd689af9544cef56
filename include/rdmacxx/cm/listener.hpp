#pragma once
/// @file
/// The passive side of the RDMA CM flows: `cm::listener` (an id listening on an address) and
/// `cm::connect_request` (a request taken from it, accepted into a `cm::connection` that is
/// self-contained, built on `cm::resources` you own, or on a queue pair you created).

#include "rdmacxx/cm/connection.hpp"

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

/// The default `before_accept` of `connect_request::accept`: does nothing.
struct no_preparation {
    /// Does nothing with the connection.
    template <class Connection>
    void operator()(Connection&) const noexcept {}
};

/// A connect request taken by a `listener`: owns the new id until accepted or rejected, with a
/// copy of the peer's private data and parameters. Move-only; destroying it unanswered destroys
/// the id, which the peer sees as a reject or a timeout.
///
/// Every `accept` comes in three forms: self-contained (the connection makes its PD, CQ and
/// channel), on `cm::resources` you own (a server's one PD, CQ, SRQ and channel for every
/// connection: make the PD on `cm_id().context()`, the listener's device), and on a queue pair
/// you created (RC or UC, any post policy).
/// Thread-safety: one thread at a time.
class connect_request {
public:
    /// Takes the new id and data of a `connect_request` event `e` (already acknowledged; `e` may
    /// be kept or dropped).
    explicit connect_request(event const& e) : id_(e.id()), private_data_(e.private_data_copy()), conn_(e.conn()) {}

    /// The private data the peer sent with its request (the whole buffer the CM delivered,
    /// zero padded past what the peer wrote). Decode typed data with `cm::from_private_data`.
    [[nodiscard]] std::span<std::byte const> private_data() const noexcept { return private_data_; }
    /// The peer's connection data (TCP port space).
    [[nodiscard]] connection_data const& parameters() const noexcept { return conn_; }
    /// The peer's address.
    [[nodiscard]] address peer_address() const noexcept { return id_.peer_address(); }
    /// The new id (its `context()` is the device to make resources on).
    [[nodiscard]] cm::id& cm_id() noexcept { return id_; }

    /// Accepts: moves the id to its own event channel, makes the PD, CQ and queue pair on its
    /// device, calls `before_accept(connection&)` (post receives there: a UD peer may send the
    /// moment it learns our QPN, and an unposted UD receive drops the datagram), accepts with
    /// `opt.settings` and `opt.private_data` and, for RC and UC, waits up to the accept deadline
    /// for `established`. The request is empty afterwards.
    /// @throws argument_error for private data over 196 bytes (TCP) or 136 (UDP), before anything
    ///         is sent; timeout_error naming `step::accept`, connect_error when `established`
    ///         does not come; sys_error when a call fails; whatever `before_accept` throws (the
    ///         request is then dropped).
    /// @see rdma_migrate_id(3), ibv_create_qp(3), rdma_init_qp_attr(3), rdma_accept(3)
    template <transport Transport, completion_strategy Completion, class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion> accept(connection_options const& opt = {},
                                                           BeforeAccept&& before_accept = {}) {
        auto c = start<Transport, Completion, legacy_post>(std::make_unique<event_channel>(), opt);
        c.make_own(opt.cq_entries);
        c.create_qp(opt.caps);
        return finish(std::move(c), opt, before_accept);
    }

    /// Accepts on resources you own: as `accept(opt, before_accept)`, the QP made in `r.pd` on
    /// `r.send_cq` and `r.recv_cq` (and `r.srq`), which the connection only borrows: they must
    /// outlive it.
    /// @throws as `accept(opt, before_accept)`; argument_error when the PD or a CQ is on another
    ///         device than the request's, or `r.channel` is not the CQs' channel (nothing sent).
    template <transport Transport, completion_strategy Completion, class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion>
    accept(resources<Completion> const& r, connection_options const& opt = {}, BeforeAccept&& before_accept = {}) {
        auto c = start<Transport, Completion, legacy_post>(std::make_unique<event_channel>(), opt);
        c.borrow(r);
        c.create_qp(opt.caps);
        return finish(std::move(c), opt, before_accept);
    }

    /// Accepts for a QP you created (RC or UC, any post policy, `checked` or not, in RESET, in a
    /// PD on the request's device): moves the id to its own channel, moves the QP to INIT with
    /// the CM's attributes (rdma_init_qp_attr(3) + ibv_modify_qp(3)), calls
    /// `before_accept(connection&)` (post receives there), moves it to RTR and RTS the same way
    /// under `opt.settings`, accepts naming its QPN and waits up to the accept deadline for
    /// `established`. The connection borrows the QP, which must outlive it. Whatever fails, the
    /// QP is in ERR when the error leaves (its posted receives complete flushed; `reset()` it to
    /// connect again).
    /// @throws as `accept(opt, before_accept)`; argument_error when the QP is on another device
    ///         or not in RESET (nothing sent); sys_error naming the state when a transition fails.
    template <transport Transport, completion_strategy Completion, post_policy Post,
              class BeforeAccept = no_preparation>
        requires(Transport::connected)
    [[nodiscard]] connection<Transport, Completion, Post> accept(queue_pair<Transport, Completion, Post>& qp,
                                                                 connection_options const& opt = {},
                                                                 BeforeAccept&& before_accept = {}) {
        auto c = start<Transport, Completion, Post>(std::make_unique<event_channel>(), opt);
        c.adopt(qp);
        auto& cm_id = c.cm_id();
        try {
            cm_id.modify_qp(qp.native_handle(), IBV_QPS_INIT, opt.settings);
            before_accept(c);
            cm_id.modify_qp(qp.native_handle(), IBV_QPS_RTR, opt.settings);
            cm_id.modify_qp(qp.native_handle(), IBV_QPS_RTS, opt.settings);
            cm_id.accept(opt.settings, opt.private_data, qp.qp_num(), qp.native_handle()->srq != nullptr);
            (void)detail::expect(*c.channel(), event_type::established, opt.deadlines.of(step::accept),
                                 "accepting " + c.peer_name(), step::accept);
        } catch (...) {
            detail::fail_qp(qp);
            throw;
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
        auto c = start<Transport, Completion, legacy_post>(nullptr, opt);
        c.make_own(opt.cq_entries);
        c.create_qp(opt.caps);
        return finish_shared(std::move(c), opt, before_accept);
    }

    /// As `accept_shared(opt, before_accept)`, on resources you own (see `accept(r, …)`): the
    /// shape of a server with one event channel, one PD, one SRQ and one CQ for every connection.
    /// @throws as `accept(r, opt, before_accept)`, without the wait.
    template <transport Transport, completion_strategy Completion, class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion> accept_shared(resources<Completion> const& r,
                                                                  connection_options const& opt = {},
                                                                  BeforeAccept&& before_accept = {}) {
        auto c = start<Transport, Completion, legacy_post>(nullptr, opt);
        c.borrow(r);
        c.create_qp(opt.caps);
        return finish_shared(std::move(c), opt, before_accept);
    }

    /// Rejects with `private_data` (at most 148 bytes on TCP, 136 on UDP) and destroys the id.
    /// @throws argument_error for private data over the limit; sys_error when rdma_reject(3) fails.
    void reject(std::span<std::byte const> private_data = {}) {
        id_.reject(private_data);
        id_ = cm::id{nullptr};
    }

private:
    // The connection of this request's id (on `channel`, or on the listener's when null).
    template <transport Transport, completion_strategy Completion, post_policy Post>
    connection<Transport, Completion, Post> start(std::unique_ptr<event_channel> channel,
                                                  connection_options const& opt) {
        check_private_data(opt.private_data, private_data_message::accept, port_space_for<Transport>);
        id_.check_settings(opt.settings, Transport::qp_type, "; nothing was sent (reject the request yourself)");
        if (channel) id_.migrate(*channel);
        connection<Transport, Completion, Post> c{std::move(channel), std::move(id_),
                                                  opt.deadlines.of(step::disconnect)};
        c.set_peer(std::move(private_data_), conn_);
        return c;
    }

    template <transport Transport, completion_strategy Completion, class BeforeAccept>
    static connection<Transport, Completion> finish(connection<Transport, Completion> c, connection_options const& opt,
                                                    BeforeAccept& before_accept) {
        before_accept(c);
        c.cm_id().accept(opt.settings, opt.private_data);
        if constexpr (Transport::connected)
            (void)detail::expect(*c.channel(), event_type::established, opt.deadlines.of(step::accept),
                                 "accepting " + c.peer_name(), step::accept);
        c.established();
        return c;
    }

    template <transport Transport, completion_strategy Completion, class BeforeAccept>
    static connection<Transport, Completion> finish_shared(connection<Transport, Completion> c,
                                                           connection_options const& opt, BeforeAccept& before_accept) {
        before_accept(c);
        c.cm_id().accept(opt.settings, opt.private_data);
        if constexpr (!Transport::connected) c.monitor().established();
        return c;
    }

    cm::id id_;
    std::vector<std::byte> private_data_;
    connection_data conn_;
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

/// Passive side: an event channel and an id listening on an address, for transport
/// `Transport` (TCP port space for RC/UC, UDP for UD). `get_request` takes the next connect
/// request; `accept` takes it and accepts it. Move-only.
///
/// For a server that serves several clients from this one channel, put `channel().fd()` in an
/// epoll set, take events with `channel().try_get()`, make a `connect_request` from each
/// `connect_request` event, `accept_shared` it (on `cm::resources` to share one PD, CQ, SRQ and
/// completion channel), and hand every other event to the connection whose id it names.
///
/// Its id lives on its channel, so it writes its moves: a move keeps the pair together, and a
/// move assignment destroys this listener's id (closing its port) before its channel, then
/// takes the other's channel and id. Connections accepted on the channel (`accept_shared`) stay
/// on it: move a listener with such connections alive only by construction, never assign over it.
/// Thread-safety: one thread at a time.
/// @see rdma_bind_addr(3), rdma_listen(3)
template <transport Transport>
class listener {
public:
    /// Binds to `local` (port 0: a free port, see `port()`) and listens with `backlog`.
    /// @throws address_error when the address cannot be bound; sys_error when a call fails.
    explicit listener(address const& local, int backlog = 16) : listener(local, listener_options{.backlog = backlog}) {}

    /// Sets `opt`'s options on the id, binds to `local` and listens with `opt.backlog`.
    /// @throws not_supported_error when an option is refused; address_error when the address
    ///         cannot be bound (EADDRINUSE: the port is taken, or was just closed and
    ///         `reuse_address` is off); sys_error when a call fails.
    listener(address const& local, listener_options const& opt) : id_(channel_, port_space_for<Transport>) {
        if (opt.reuse_address) id_.set_reuse_address(true);
        if (opt.type_of_service) id_.set_type_of_service(*opt.type_of_service);
        if (opt.address_family_only) id_.set_address_family_only(*opt.address_family_only);
        id_.bind(local);
        id_.listen(opt.backlog);
    }

    /// Takes `other`'s channel and the id on it; `other` is left empty (only destroyed or assigned to).
    listener(listener&& other) noexcept : channel_(std::move(other.channel_)), id_(std::move(other.id_)) {}

    /// Destroys this listener's id and then its channel (the id lives on the channel:
    /// rdma_destroy_id(3) reads it), then takes `other`'s channel and id; `other` is left empty.
    listener& operator=(listener&& other) noexcept {
        if (this != &other) {
            id_ = cm::id{nullptr};
            channel_ = std::move(other.channel_);
            id_ = std::move(other.id_);
        }
        return *this;
    }

    listener(listener const&) = delete;
    listener& operator=(listener const&) = delete;

    /// Destroys the id, then the channel (members in reverse order).
    ~listener() = default;

    /// The port listened on (host order).
    [[nodiscard]] std::uint16_t port() const noexcept { return id_.local_address().port(); }
    /// The channel the requests (and, for `accept_shared` connections, their events) arrive on.
    [[nodiscard]] event_channel& channel() noexcept { return channel_; }
    /// The listening id. Bound to a device address, its `context()` is the device to make a
    /// server's shared PD, CQs and SRQ on.
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

} // namespace cm
} // namespace v0
} // namespace rdmacxx
