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
/// Accepting takes the QP from one of three sources: the connection's own (it makes its PD, CQ
/// and channel), `cm::resources` you own (a server's one PD, CQ, SRQ and channel for every
/// connection: make the PD on `cm_id().context()`, the listener's device), or a queue pair you
/// created (RC or UC, any post policy). Each is driven by a blocking call (`accept`) or by an
/// engine (`cm::accept(engine&, std::move(request), …)`); both run the one handshake of
/// cm/handshake.hpp.
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

    /// Accepts, blocking: moves the id to an event channel of its own, makes the PD, CQ and
    /// queue pair on its device, calls `before_accept(connection&)` (post receives there: a UD
    /// peer may send the moment it learns our QPN, and an unposted UD receive drops the
    /// datagram; bytes it returns — say a `remote_span` of memory registered there, encoded —
    /// are sent as the accept's private data instead of `opt.private_data`), accepts with `opt.settings` and
    /// `opt.private_data` and, for RC and UC, waits up to the accept deadline for `established`. The request is empty
    /// afterwards.
    /// @throws argument_error for private data over 196 bytes (TCP) or 136 (UDP), before anything
    ///         is sent; timeout_error naming `step::accept`, connect_error when `established`
    ///         does not come; sys_error when a call fails; whatever `before_accept` throws (the
    ///         request is then dropped).
    /// @see rdma_migrate_id(3), ibv_create_qp(3), rdma_init_qp_attr(3), rdma_accept(3)
    template <transport Transport, completion_strategy Completion, class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion> accept(connection_options const& opt = {},
                                                           BeforeAccept&& before_accept = {}) {
        return blocking<Transport, Completion, legacy_post>({}, opt, before_accept);
    }

    /// Accepts on resources you own, blocking: as `accept(opt, before_accept)`, the QP made in
    /// `r.pd` on `r.send_cq` and `r.recv_cq` (and `r.srq`), which the connection only borrows:
    /// they must outlive it.
    /// @throws as `accept(opt, before_accept)`; argument_error when the PD or a CQ is on another
    ///         device than the request's, or `r.channel` is not the CQs' channel (nothing sent).
    template <transport Transport, completion_strategy Completion, class BeforeAccept = no_preparation>
    [[nodiscard]] connection<Transport, Completion>
    accept(resources<Completion> const& r, connection_options const& opt = {}, BeforeAccept&& before_accept = {}) {
        return blocking<Transport, Completion, legacy_post>({.shared = r}, opt, before_accept);
    }

    /// Accepts for a QP you created, blocking (RC or UC, any post policy, `checked` or not, in
    /// RESET, in a PD on the request's device): moves the id to its own channel, moves the QP to
    /// INIT with the CM's attributes (rdma_init_qp_attr(3) + ibv_modify_qp(3)), calls
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
        return blocking<Transport, Completion, Post>({.user = qp.anchor_cell()}, opt, before_accept);
    }

    /// Rejects with `private_data` (at most 148 bytes on TCP, 136 on UDP) and destroys the id.
    /// @throws argument_error for private data over the limit; sys_error when rdma_reject(3) fails.
    void reject(std::span<std::byte const> private_data = {}) {
        id_.reject(private_data);
        id_ = cm::id{nullptr};
    }

    /// @cond
    // The passive handshake of this request on `eng`: the request is empty afterwards (when the
    // handshake refuses its input, it keeps its id and data: reject it yourself).
    template <transport Transport, completion_strategy Completion, post_policy Post, class BeforeAccept, class Done>
    void start(engine& eng, detail::qp_source<Transport, Completion, Post> src, connection_options opt,
               BeforeAccept before_accept, Done done) {
        using h = detail::handshake<Transport, Completion, Post, Done, BeforeAccept>;
        detail::launch(eng, std::make_unique<h>(eng, std::move(id_), private_data_, conn_, std::move(src),
                                                std::move(opt), std::move(before_accept), std::move(done)));
    }
    /// @endcond

private:
    template <transport Transport, completion_strategy Completion, post_policy Post, class BeforeAccept>
    connection<Transport, Completion, Post> blocking(detail::qp_source<Transport, Completion, Post> src,
                                                     connection_options const& opt, BeforeAccept& before_accept) {
        return detail::run_blocking<connection<Transport, Completion, Post>>([&](engine& eng, auto done) {
            start<Transport, Completion, Post>(
                eng, std::move(src), opt, [&before_accept](auto& c) -> decltype(auto) { return before_accept(c); },
                std::move(done));
        });
    }

    cm::id id_;
    std::vector<std::byte> private_data_;
    connection_data conn_;
};

/// Passive side on an engine: accepts `request` (from a listener on `eng`, or any other: its id
/// then moves to the engine's channel) as `connect_request::accept(opt, before_accept)` does,
/// without blocking: the QP made (the connection's own resources), `before_accept(connection&)`
/// called, the accept sent; `done(std::exception_ptr, std::optional<connection<Transport,
/// Completion>>)` is called once from the engine's `process()` when `established` came (UD: at
/// once, before this returns), or with the error (`timeout_error` naming `step::accept` when
/// the accept deadline passed). The connection stays on the engine. `opt` is copied.
/// A call the device or the CM refuses on this request (a `sys_error`, such as the EINVAL of a
/// client that left before its QP was made) goes to `done`, before this returns: one client's
/// failure is that client's only.
/// @throws argument_error and what `before_accept` throws other than a sys_error, as `accept`
///         (before anything is sent, or with the request dropped) — `done` is then never called.
/// @see rdma_accept(3)
template <transport Transport, completion_strategy Completion, class Done, class BeforeAccept = no_preparation>
void accept(engine& eng, connect_request&& request, connection_options opt, Done&& done,
            BeforeAccept before_accept = {}) {
    request.start<Transport, Completion, legacy_post>(eng, {}, std::move(opt), std::move(before_accept),
                                                      std::decay_t<Done>(std::forward<Done>(done)));
}

/// As `accept(eng, request, opt, done, before_accept)`, the QP made on `r` (a server's one PD,
/// CQ, SRQ and channel), which the connection borrows.
template <transport Transport, completion_strategy Completion, class Done, class BeforeAccept = no_preparation>
void accept(engine& eng, connect_request&& request, resources<Completion> const& r, connection_options opt, Done&& done,
            BeforeAccept before_accept = {}) {
    request.start<Transport, Completion, legacy_post>(eng, {.shared = r}, std::move(opt), std::move(before_accept),
                                                      std::decay_t<Done>(std::forward<Done>(done)));
}

/// As `accept(eng, request, opt, done, before_accept)` for a QP you created (see
/// `connect_request::accept(qp, …)`), which the connection borrows; whatever fails, the QP is
/// in ERR when the error leaves or reaches `done`.
template <transport Transport, completion_strategy Completion, post_policy Post, class Done,
          class BeforeAccept = no_preparation>
    requires(Transport::connected)
void accept(engine& eng, connect_request&& request, queue_pair<Transport, Completion, Post>& qp, connection_options opt,
            Done&& done, BeforeAccept before_accept = {}) {
    request.start<Transport, Completion, Post>(eng, {.user = qp.anchor_cell()}, std::move(opt),
                                               std::move(before_accept), std::decay_t<Done>(std::forward<Done>(done)));
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
/// On its own channel, `get_request` takes the next connect request (blocking, bounded) and
/// `accept` takes it and accepts it. On an engine (`listener(eng, local, opt, on_request)`), the
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
    /// engine's channel open; `get_request` and `accept` are refused.
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

    /// Waits up to `timeout` for a connect request and accepts it (see `connect_request::accept`).
    /// @throws as `get_request` and `connect_request::accept`.
    template <completion_strategy Completion>
    [[nodiscard]] connection<Transport, Completion> accept(std::chrono::milliseconds timeout,
                                                           connection_options const& opt = {}) {
        return get_request(timeout).template accept<Transport, Completion>(opt);
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
