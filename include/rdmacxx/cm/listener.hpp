#pragma once
/// @file
/// The passive side of the RDMA CM flows: `cm::listener` (an id listening on an address) and
/// `cm::connect_request` (a request taken from it, accepted into a `cm::connection` that is
/// self-contained, built on `cm::resources` you own, or on a queue pair you created).

#include "rdmacxx/cm/handshake.hpp"
#include "rdmacxx/detail/callback.hpp"

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

/// A connect request taken by a `listener`: owns the new id until accepted or rejected, with a
/// copy of the peer's private data and parameters. Move-only; destroying it unanswered destroys
/// the id, which the peer sees as a reject or a timeout.
///
/// Accepting takes the QP from one of three sources (`qp_source`): the connection's own (it
/// makes its PD, CQ and channel), `cm::resources` you own (a server's one PD, CQ, SRQ and channel
/// for every connection: make the PD on `cm_id().context()`, the listener's device), or a queue
/// pair you created (RC or UC, any post policy). One accept, two drivers here: blocking
/// (`accept`) or an engine (`cm::accept(engine&, std::move(request), …)`); both run the one
/// handshake of cm/handshake.hpp.
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

    /// Accepts, blocking: moves the id to an event channel of its own, takes the QP from
    /// `source` (see `qp_source`: the connection's own PD, CQ and QP by default; `shared_qp`,
    /// `user_qp`), calls `before_accept(connection&)` (post receives there: the peer may send the
    /// moment it learns our QPN, and an unposted receive drops a UD datagram or RNR-NAKs an RC
    /// SEND; bytes it returns — say a `remote_span` of memory registered there, encoded — are
    /// sent as the accept's private data instead of `opt.private_data`), moves a user's QP to RTR
    /// and RTS under `opt.settings`, accepts with `opt.settings` and, for RC and UC, waits up to
    /// the accept deadline for `established`. The request is empty afterwards. Spelled
    /// `request.accept<rc, busy_poll>(opt)`, `request.accept(opt, cm::shared_qp<rc>(r), fn)`.
    /// @throws argument_error for private data over 196 bytes (TCP) or 136 (UDP), settings the
    ///         device refuses, or a QP source the handshake cannot use (`check_source`), before
    ///         anything is sent (the request keeps its id: reject it yourself); argument_error
    ///         for a PD, CQ or QP on another device or a user's QP not in RESET (found once the
    ///         id is the handshake's: the request is dropped, the peer sees a reject); timeout_error
    ///         naming `step::accept`, connect_error when `established` does not come; sys_error
    ///         when a call fails; whatever `before_accept` throws (the request is then dropped).
    ///         A user's QP is in ERR when an error leaves.
    /// @see rdma_migrate_id(3), ibv_create_qp(3), rdma_init_qp_attr(3), rdma_accept(3)
    template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post,
              class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion, Post> accept(connection_options const& opt = {},
                                                                 qp_source<Transport, Completion, Post> source = {},
                                                                 BeforeAccept&& before_accept = {}) {
        return detail::run_blocking<connection<Transport, Completion, Post>>([&](engine& eng, auto done) {
            start<Transport, Completion, Post>(
                eng, std::move(source), opt, [&before_accept](auto& c) -> decltype(auto) { return before_accept(c); },
                std::move(done));
        });
    }

    /// Rejects with `private_data` (at most 148 bytes on TCP, 136 on UDP) and destroys the id.
    /// @throws argument_error for private data over the limit, or a request already accepted,
    ///         rejected or dropped (its id gone); sys_error when rdma_reject(3) fails.
    void reject(std::span<std::byte const> private_data = {}) {
        if (id_.native_handle() == nullptr) [[unlikely]]
            rdmacxx::detail::throw_argument("connect_request::reject: the request was accepted, rejected or dropped "
                                            "already");
        id_.reject(private_data);
        id_ = cm::id{nullptr};
    }

    /// @cond
    // The passive handshake of this request on `eng`: the request is empty afterwards (when the
    // handshake refuses its input, it keeps its id and data: reject it yourself).
    template <transport Transport, completion_strategy Completion, post_policy Post, class BeforeAccept, class Done>
    void start(engine& eng, qp_source<Transport, Completion, Post> src, connection_options opt,
               BeforeAccept before_accept, Done done) {
        using h = detail::handshake<Transport, Completion, Post, Done, BeforeAccept>;
        detail::launch(eng, std::make_unique<h>(eng, std::move(id_), private_data_, conn_, std::move(src),
                                                std::move(opt), std::move(before_accept), std::move(done)));
    }
    /// @endcond

private:
    cm::id id_;
    std::vector<std::byte> private_data_;
    connection_data conn_;
};

/// Passive side on an engine: accepts `request` (from a listener on `eng`, or any other: its id
/// then moves to the engine's channel) as `connect_request::accept(opt, source, before_accept)`
/// does, without blocking: the QP taken from `source`, `before_accept(connection&)` called, the
/// accept sent; `done(std::exception_ptr, std::optional<connection<Transport, Completion,
/// Post>>)` is called once from the engine's `process()` when `established` came (UD: at once,
/// before this returns), or with the error (`timeout_error` naming `step::accept` when the
/// accept deadline passed). The connection stays on the engine. `opt` is copied. A call the
/// device or the CM refuses on this request (a `sys_error`, such as the EINVAL of a client that
/// left before its QP was made) goes to `done`, before this returns: one client's failure is
/// that client's only. Spelled `cm::accept<rc, busy_poll>(eng, std::move(r), opt, {}, {}, done)`
/// for a QP of the connection's own and no preparation.
/// @throws argument_error and what `before_accept` throws other than a sys_error, as `accept`
///         (before anything is sent, or with the request dropped) — `done` is then never called.
/// @see rdma_accept(3)
template <transport Transport, completion_strategy Completion, post_policy Post = legacy_post,
          class BeforeAccept = no_preparation, class Done>
void accept(engine& eng, connect_request&& request, connection_options opt,
            qp_source<Transport, Completion, Post> source, BeforeAccept before_accept, Done&& done) {
    request.start<Transport, Completion, Post>(eng, std::move(source), std::move(opt), std::move(before_accept),
                                               std::decay_t<Done>(std::forward<Done>(done)));
}

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
/// What takes a listener's connect requests from an engine: hands each to the listener's
/// callback as a `connect_request`. Leaves the engine when destroyed.
class request_target final : public event_target {
public:
    request_target(engine& eng, rdma_cm_id* id, rdmacxx::detail::callback<void(connect_request)> on_request)
        : engine_(eng.cell()), id_(id), on_request_(std::move(on_request)) {
        eng.add(id_, this);
    }
    request_target(request_target const&) = delete;
    request_target& operator=(request_target const&) = delete;
    ~request_target() {
        if (engine* const eng = engine_.get_if()) eng->remove(id_);
    }

    void take(event const& e) override {
        if (e.type() != event_type::connect_request) return; // the listening id's own events
        on_request_(connect_request{e});
    }

private:
    rdmacxx::detail::link<engine> engine_;
    rdma_cm_id* id_;
    rdmacxx::detail::callback<void(connect_request)> on_request_;
};
} // namespace detail

/// Passive side: an id listening on an address, for transport `Transport` (TCP port space for
/// RC/UC, UDP for UD), on an event channel of its own or on an engine's.
///
/// On its own channel, `get_request` takes the next connect request (blocking, bounded), to
/// accept (`connect_request::accept`) or reject. On an engine (`listener(eng, local, opt, on_request)`), the
/// engine's `process()` hands each connect request to `on_request`, which accepts it
/// (`cm::accept(eng, std::move(request), …)`: no blocking, no thread) or rejects it: the shape of a
/// server of many clients on one event channel, one loop and one thread.
///
/// Move-only: a move keeps the channel and the id together; a move assignment destroys this
/// listener's id (closing its port) before its channel, then takes the other's.
/// Thread-safety: one thread at a time (on an engine: the engine's).
/// @see rdma_bind_addr(3), rdma_listen(3)
template <transport Transport>
class listener {
public:
    /// Binds to `local` (port 0: a free port, see `port()`) and listens with `backlog`, on an
    /// event channel of its own.
    /// @throws address_error when the address cannot be bound; sys_error when a call fails.
    explicit listener(address const& local, int backlog = 16) : listener(local, listener_options{.backlog = backlog}) {}

    /// Sets `opt`'s options on the id, binds to `local` and listens with `opt.backlog`, on an
    /// event channel of its own.
    /// @throws not_supported_error when an option is refused; address_error when the address
    ///         cannot be bound (EADDRINUSE: the port is taken, or was just closed and
    ///         `reuse_address` is off); sys_error when a call fails.
    listener(address const& local, listener_options const& opt)
        : channel_(std::make_shared<event_channel>()), id_(*channel_, port_space_for<Transport>) {
        start(local, opt);
    }

    /// Listens on `local` as above, on `eng`'s channel: `eng.process()` calls
    /// `on_request(connect_request)` for each connect request (accept it with `cm::accept(eng,
    /// std::move(request), …)`, reject it, or drop it (the peer then sees a reject). What
    /// `on_request` throws drops the request and leaves `process()`. The listener keeps the
    /// engine's channel open; `get_request` is refused.
    /// @throws as the constructor above.
    listener(engine& eng, address const& local, listener_options const& opt,
             rdmacxx::detail::callback<void(connect_request)> on_request)
        : channel_(eng.shared_channel()), id_(*channel_, port_space_for<Transport>) {
        start(local, opt);
        target_ = std::make_unique<detail::request_target>(eng, id_.native_handle(), std::move(on_request));
    }

    /// Takes `other`'s channel and the id on it; `other` is left empty (only destroyed or assigned to).
    listener(listener&& other) noexcept
        : channel_(std::move(other.channel_)), id_(std::move(other.id_)), target_(std::move(other.target_)) {}

    /// Destroys this listener's id and then its channel (the id lives on the channel:
    /// rdma_destroy_id(3) reads it), then takes `other`'s channel and id; `other` is left empty.
    listener& operator=(listener&& other) noexcept {
        if (this != &other) {
            target_.reset();
            id_ = cm::id{nullptr};
            channel_ = std::move(other.channel_);
            id_ = std::move(other.id_);
            target_ = std::move(other.target_);
        }
        return *this;
    }

    listener(listener const&) = delete;
    listener& operator=(listener const&) = delete;

    /// Leaves the engine (if on one), destroys the id, then lets go of the channel.
    ~listener() = default;

    /// The port listened on (host order).
    [[nodiscard]] std::uint16_t port() const noexcept { return id_.local_address().port(); }
    /// The channel the requests arrive on (its own, or the engine's).
    [[nodiscard]] event_channel& channel() noexcept { return *channel_; }
    /// The listening id. Bound to a device address, its `context()` is the device to make a
    /// server's shared PD, CQs and SRQ on.
    [[nodiscard]] cm::id& cm_id() noexcept { return id_; }

    /// Waits up to `timeout` for the next connect request (a listener on its own channel).
    /// @throws timeout_error when none comes; cm_error for another event on the channel;
    ///         argument_error for a listener on an engine (its requests go to `on_request`).
    [[nodiscard]] connect_request get_request(std::chrono::milliseconds timeout) {
        if (target_) [[unlikely]]
            rdmacxx::detail::throw_argument("listener::get_request on a listener made on an engine: its connect "
                                            "requests go to its on_request callback from engine::process()");
        event e = detail::expect(*channel_, event_type::connect_request, timeout,
                                 "listening on " + id_.local_address().to_string());
        return connect_request{e};
    }

private:
    void start(address const& local, listener_options const& opt) {
        if (opt.reuse_address) id_.set_reuse_address(true);
        if (opt.type_of_service) id_.set_type_of_service(*opt.type_of_service);
        if (opt.address_family_only) id_.set_address_family_only(*opt.address_family_only);
        id_.bind(local);
        id_.listen(opt.backlog);
    }

    std::shared_ptr<event_channel> channel_;
    cm::id id_;
    std::unique_ptr<detail::request_target> target_;
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
