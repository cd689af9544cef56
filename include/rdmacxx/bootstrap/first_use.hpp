#pragma once
/// @file
/// Connections made on first use for a `peer_group` (`peer_group_options::connect_on_first_use`):
/// the handshake that brings up the RC QP to a peer when a rank first asks for it, carried over
/// one UD QP per rank (the control QP) whose endpoint every rank learned in the group's one
/// exchange, as MVAPICH's on-demand connections and UCX's wire-up do. And its error,
/// `peer_connect_error`.

#include "rdmacxx/ah.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/detail/wire.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/endpoint.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/work_completion.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

/// The RC QP to one peer of a `peer_group` built with `connect_on_first_use` could not be made
/// when this rank first asked for it. `peer()` names the peer. Its code says why:
/// `std::errc::timed_out` when the peer did not answer within `peer_group_options::first_use_timeout`
/// (a rank answers only while it calls into its group: `qp()`, `progress()`), or
/// `std::errc::connection_refused` when the peer answered that it could not make or connect
/// its side (or holds a QP connected to one this rank no longer has),
/// `std::errc::connection_aborted` when this rank could not connect its QP to the peer's. The
/// group stays usable: other peers are unaffected, and asking again retries the handshake with
/// this peer (this rank's QP for it keeps its QPN and PSN across attempts).
/// Thread-safety: as any exception object.
class peer_connect_error : public error {
public:
    /// @param peer     the rank the QP was for
    /// @param code     `std::errc::timed_out`, `connection_refused` or `connection_aborted`
    /// @param message  what happened, e.g. "peer_group: rank 3 did not answer rank 0's first-use handshake within 2000
    /// ms (…)"
    peer_connect_error(int peer, std::errc code, std::string const& message)
        : error(std::make_error_code(code), message), peer_(peer) {}
    /// The rank the QP was for.
    [[nodiscard]] int peer() const noexcept { return peer_; }

private:
    int peer_;
};

namespace detail {

/// One message of the first-use handshake (80 bytes, integers big-endian), sent over the
/// control UD QPs:
///
/// | offset | bytes | field |
/// |---|---|---|
/// | 0 | 4 | magic `"RXPC"` |
/// | 4 | 1 | version, 1 |
/// | 5 | 1 | kind: 1 request, 2 reply, 3 ready to use, 4 refused |
/// | 6 | 2 | attempt: the requester's attempt number, echoed in the reply and the refusal |
/// | 8 | 4 | sender's rank |
/// | 12 | 4 | receiver's rank |
/// | 16 | 32 | the sender's RC QP for the receiver (`endpoint`; zeros when refused) |
/// | 48 | 32 | the endpoint this message answers: the request's in a reply or a refusal, the reply's in a ready to use
/// (zeros in a request) |
///
/// The IB CM's exchange (REQ, REP, RTU): a request carries the requester's endpoint; the
/// receiver makes (or reuses) its QP for the requester, connects it (RTS) and replies with its
/// endpoint and the one it connected to, or refuses; the requester, waiting in `qp()`, connects
/// on a reply that names its current QP and sends ready to use; the receiver's side is usable
/// once that arrives. Answers name what they answer, so a late or repeated datagram never pairs
/// the wrong QPs: a reply to an endpoint the requester no longer has, or a refusal of an
/// earlier attempt, is dropped. When both sides request at once, each answers the other's
/// request, and each reply then confirms. A lost request or reply is sent again (after 20 ms,
/// then doubling up to 500 ms).
struct first_use_message {
    static constexpr std::array<char, 4> magic{'R', 'X', 'P', 'C'};
    static constexpr std::size_t bytes = 16 + 2 * endpoint::wire_size;
    enum kind : std::uint8_t { request = 1, reply = 2, ready = 3, refused = 4 };

    kind what = request;
    std::uint16_t attempt = 0;
    std::uint32_t from = 0;
    std::uint32_t to = 0;
    endpoint qp{};      // the sender's QP for the receiver
    endpoint answers{}; // what the message answers

    void write(std::byte* out) const {
        wire::put_header(out, magic);
        wire::put<1>(out + 5, what);
        wire::put<2>(out + 6, attempt);
        wire::put<4>(out + 8, from);
        wire::put<4>(out + 12, to);
        std::array<std::byte, endpoint::wire_size> zeros{};
        auto const a = what == refused ? zeros : qp.to_bytes();
        auto const b = what == request ? zeros : answers.to_bytes();
        std::memcpy(out + 16, a.data(), a.size());
        std::memcpy(out + 16 + endpoint::wire_size, b.data(), b.size());
    }
    /// The message in `in`, or nothing when it is not one (another protocol, another version,
    /// corrupt): such datagrams are dropped.
    static std::optional<first_use_message> read(std::span<std::byte const> in) {
        if (!wire::header_fault(in, bytes, magic, "a first-use message").empty()) return std::nullopt;
        auto const k = wire::get<1>(in.data() + 5);
        if (k < request || k > refused) return std::nullopt;
        first_use_message m;
        m.what = static_cast<kind>(k);
        m.attempt = static_cast<std::uint16_t>(wire::get<2>(in.data() + 6));
        m.from = static_cast<std::uint32_t>(wire::get<4>(in.data() + 8));
        m.to = static_cast<std::uint32_t>(wire::get<4>(in.data() + 12));
        try {
            if (m.what != refused) m.qp = endpoint::from_bytes(in.subspan(16, endpoint::wire_size));
            if (m.what != request) m.answers = endpoint::from_bytes(in.subspan(16 + endpoint::wire_size));
        } catch (error const&) {
            return std::nullopt;
        }
        return m;
    }
};

/// The first-use side of a `peer_group<Completion>`: the control UD QP (its own CQ and
/// registered buffers, 64 receives and 16 sends of 128 bytes), every peer's control endpoint,
/// and the handshake's state per peer. The RC QPs it makes live in the group's vector, passed in
/// to each call (`qps`).
/// Thread-safety: `ensure` and `progress` serialise on one mutex; `ready` is one atomic load.
template <completion_strategy Completion>
class first_use {
public:
    using rc_queue_pair = queue_pair<rc, Completion>;
    using rc_qps = std::vector<std::optional<rc_queue_pair>>;

    static constexpr std::uint32_t receives = 64;
    static constexpr std::uint32_t sends = 16;
    static constexpr std::size_t buffer_bytes = 128; // a 40-byte GRH and an 80-byte message

    /// The control QP on `port`, in `pd`, brought up and with its receives posted; RC QPs will
    /// be made in `pd` on `send_cq`/`recv_cq` with `caps` and connected with `settings`; `qos`
    /// addresses the peers' control QPs.
    /// @throws sys_error when the device refuses the control CQ, QP or memory region.
    first_use(end_port const& port, protection_domain& pd, completion_queue<Completion>& send_cq,
              completion_queue<Completion>& recv_cq, qp_capabilities caps, qp_settings settings, address_qos qos,
              std::chrono::milliseconds timeout, int rank, int size)
        : port_(port), pd_(pd.anchor_cell()), send_cq_(send_cq.anchor_cell()), recv_cq_(recv_cq.anchor_cell()),
          caps_(caps), settings_(settings), qos_(qos), timeout_(timeout), rank_(rank),
          state_(std::make_unique<std::atomic<std::uint8_t>[]>(static_cast<std::size_t>(size))),
          buffer_((receives + sends) * buffer_bytes), mr_(pd.register_memory(std::span{buffer_}, access::local_write)),
          cq_(port.context(), static_cast<int>(receives + sends)),
          qp_(pd, cq_, cq_, qp_capabilities{.max_send_wr = sends, .max_recv_wr = receives}) {
        qp_.activate(port_, settings_);
        for (std::uint32_t i = 0; i < receives; ++i)
            post_receive(i);
        free_sends_.reserve(sends);
        for (std::uint32_t i = 0; i < sends; ++i)
            free_sends_.push_back(receives + i);
    }

    /// The control QP's endpoint, for the group's exchange.
    [[nodiscard]] endpoint local_endpoint() const noexcept { return qp_.local_endpoint(port_); }
    /// Every rank's control endpoint, in rank order (this rank's own included), from the exchange.
    void set_peers(std::vector<endpoint> peers) {
        peers_ = std::move(peers);
        ahs_.resize(peers_.size());
        mine_.resize(peers_.size());
        theirs_.resize(peers_.size());
    }

    /// True once the QP to `peer` is connected on both sides (this rank's QP is RTS and the peer
    /// said its own is).
    [[nodiscard]] bool ready(int peer) const noexcept {
        return state_[static_cast<std::size_t>(peer)].load(std::memory_order_acquire) == usable;
    }

    /// Brings up the QP to `peer` in `qps` (making it when needed), answering every other
    /// rank's handshake meanwhile; returns once both sides are connected, within the timeout
    /// (which counts from the call, the wait for another thread's handshake included).
    /// @throws peer_connect_error (timed_out, connection_refused, connection_aborted), as the
    ///         class says; sys_error or argument_error when this rank cannot make its own QP;
    ///         wc_error when the control QP failed.
    void ensure(int peer, rc_qps& qps) {
        auto const start = std::chrono::steady_clock::now();
        auto const deadline = start + timeout_;
        std::unique_lock lock{mutex_, deadline};
        auto const p = static_cast<std::size_t>(peer);
        if (ready(peer)) return;
        if (!lock.owns_lock()) [[unlikely]]
            throw_timeout(peer, 0, " (another thread's handshake held the group)");
        own_qp(p, qps); // this rank's own failure throws to the caller, as it would without first use
        auto next = start;
        auto interval = std::chrono::milliseconds{20};
        int sent = 0;
        failure_.reset();
        asking_ = peer;
        ++attempt_;
        struct done_asking {
            int& asking;
            ~done_asking() { asking = -1; }
        } const reset{asking_};
        while (!ready(peer)) {
            auto const now = std::chrono::steady_clock::now();
            if (now >= deadline) [[unlikely]]
                throw_timeout(peer, sent, "");
            if (now >= next) {
                // Not connected: ask (again). Connected but not confirmed: the reply or the
                // peer's ready to use was lost; reply again, which the peer confirms.
                if (state(p) == answered)
                    send(p, first_use_message::reply, theirs_[p], 0);
                else
                    send(p, first_use_message::request, {}, attempt_);
                ++sent;
                next = now + interval;
                interval = std::min(interval * 2, std::chrono::milliseconds{500});
            }
            std::size_t const handled = poll(qps);
            if (failure_) throw peer_connect_error(peer, failure_->first, failure_->second);
            if (handled == 0) std::this_thread::yield();
        }
    }

    /// Answers the handshake messages that have arrived, at most `receives` of them, without
    /// waiting; nothing when another thread is in `ensure` (it answers them).
    /// @return how many messages were handled.
    /// @throws wc_error when the control QP failed; sys_error when its receives cannot be
    ///         posted again.
    std::size_t progress(rc_qps& qps) {
        std::unique_lock const lock{mutex_, std::try_to_lock};
        if (!lock.owns_lock()) return 0;
        std::size_t handled = 0;
        for (std::size_t n = 1; n != 0 && handled < receives;) {
            n = poll(qps);
            handled += n;
        }
        return handled;
    }

private:
    // Per peer: no connected QP; this rank's QP connected to the peer's, not yet confirmed; both sides connected.
    enum : std::uint8_t { none, answered, usable };

    [[nodiscard]] std::uint8_t state(std::size_t p) const noexcept { return state_[p].load(std::memory_order_relaxed); }
    void set_state(std::size_t p, std::uint8_t s) noexcept { state_[p].store(s, std::memory_order_release); }

    [[noreturn]] void throw_timeout(int peer, int sent, char const* why) const {
        throw peer_connect_error(peer, std::errc::timed_out,
                                 "peer_group: rank " + std::to_string(peer) + " did not answer rank " +
                                     std::to_string(rank_) + "'s first-use handshake within " +
                                     std::to_string(timeout_.count()) + " ms" + why + " (" + std::to_string(sent) +
                                     " messages sent; a rank answers while it calls into its group: qp(), "
                                     "progress())");
    }

    rc_queue_pair& own_qp(std::size_t p, rc_qps& qps) {
        if (!qps[p]) {
            qps[p].emplace(pd_.get("peer group", "protection domain"), send_cq_.get("peer group", "send CQ"),
                           recv_cq_.get("peer group", "receive CQ"), caps_);
            mine_[p] = qps[p]->local_endpoint(port_, settings_);
        }
        return *qps[p];
    }

    void post_receive(std::uint32_t slot) {
        qp_.post_recv(recv{mr_.span().subspan(slot * buffer_bytes, buffer_bytes)}.id(slot));
    }

    // Polls the control CQ once: send buffers come back and every receive is posted again
    // first, then the messages are handled, each on its own (one that cannot be answered is
    // dropped, as a lost datagram is). Returns how many were handled.
    // @throws wc_error when a send or receive of the control QP failed (it is in ERR).
    std::size_t poll(rc_qps& qps) {
        std::array<work_completion, 16> wcs;
        std::size_t const n = cq_.poll(wcs);
        std::array<std::optional<first_use_message>, 16> got;
        std::optional<ibv_wc> failed;
        for (std::size_t i = 0; i < n; ++i) {
            auto const slot = static_cast<std::uint32_t>(wcs[i].wr_id());
            if (!wcs[i].ok()) {
                if (!failed) failed = wcs[i].native();
            } else if (slot < receives) {
                auto const in = std::span<std::byte const>{buffer_}.subspan(slot * buffer_bytes, buffer_bytes);
                if (wcs[i].byte_len() >= 40 + first_use_message::bytes)
                    got[i] = first_use_message::read(ud_payload(in, wcs[i]));
                if (got[i] && !from_a_peer(*got[i], wcs[i])) got[i].reset();
            }
            if (slot < receives)
                post_receive(slot);
            else
                free_sends_.push_back(slot);
        }
        if (failed) [[unlikely]]
            throw detail::failed_completion_error(*failed);
        std::size_t handled = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (!got[i]) continue;
            try {
                handle(*got[i], qps);
                ++handled;
            } catch (error const&) { // dropped: the peer sends again, or times out naming this rank
            }
        }
        return handled;
    }

    [[nodiscard]] bool from_a_peer(first_use_message const& m, work_completion const& wc) const noexcept {
        return m.to == static_cast<std::uint32_t>(rank_) && m.from < peers_.size() &&
               m.from != static_cast<std::uint32_t>(rank_) && wc.src_qp() == peers_[m.from].qpn;
    }

    void handle(first_use_message const& m, rc_qps& qps) {
        std::size_t const p = m.from;
        using k = first_use_message;
        switch (m.what) {
        case k::request:
            if (state(p) == usable && theirs_[p] != m.qp) return send(p, k::refused, m.qp, m.attempt); // a stale QP
            if (state(p) == none || theirs_[p] != m.qp) { // first, or the peer's QP changed before it confirmed
                if (!connect(p, m.qp, qps)) return send(p, k::refused, m.qp, m.attempt);
                set_state(p, answered);
            }
            return send(p, k::reply, m.qp, m.attempt); // again when the first reply was lost
        case k::reply: // the peer's QP is connected to `answers`: this rank's, when it is its current one
            if (!qps[p] || m.answers != mine_[p]) return;
            if (state(p) == none) {
                if (!connect(p, m.qp, qps)) {
                    if (static_cast<int>(p) == asking_)
                        failure_.emplace(std::errc::connection_aborted, "peer_group: rank " + std::to_string(rank_) +
                                                                            " could not connect its QP to rank " +
                                                                            std::to_string(p) + "'s");
                    return;
                }
            } else if (theirs_[p] != m.qp) {
                return;
            }
            set_state(p, usable);
            return send(p, k::ready, m.qp, 0); // again when the first was lost
        case k::ready:
            if (state(p) == answered && qps[p] && m.answers == mine_[p] && m.qp == theirs_[p]) set_state(p, usable);
            return;
        case k::refused:
            if (static_cast<int>(p) == asking_ && m.attempt == attempt_ && qps[p] && m.answers == mine_[p])
                failure_.emplace(std::errc::connection_refused, "peer_group: rank " + std::to_string(p) +
                                                                    " refused rank " + std::to_string(rank_) +
                                                                    "'s first-use handshake: it could not make or "
                                                                    "connect its QP, or holds one connected to "
                                                                    "another QP of this rank's");
            return;
        }
    }

    // Makes (when needed) and connects this rank's QP for peer p to `remote`; false when it could
    // not: the QP goes back to RESET with its QPN and PSN (so that what the peer knows of it
    // holds), or is dropped when even that fails.
    bool connect(std::size_t p, endpoint const& remote, rc_qps& qps) {
        try {
            rc_queue_pair& qp = own_qp(p, qps);
            if (state(p) != none) qp.reset(); // connected to another QP of the peer's, never confirmed
            set_state(p, none);
            qp.connect(port_, remote, settings_);
            theirs_[p] = remote;
            return true;
        } catch (error const&) {
            try {
                if (qps[p]) qps[p]->reset();
            } catch (error const&) {
                qps[p].reset();
                mine_[p] = {};
            }
            theirs_[p] = {};
            return false;
        }
    }

    // Sends `what` to peer p, answering `answers` (`attempt` echoed); dropped when every send
    // buffer is still posted (the handshake sends again, as for a datagram lost on the wire).
    void send(std::size_t p, first_use_message::kind what, endpoint const& answers, std::uint16_t attempt) {
        if (!ahs_[p])
            ahs_[p].emplace(pd_.get("peer group", "protection domain"), port_, peers_[p].lid, peers_[p].gid, qos_);
        if (free_sends_.empty()) [[unlikely]]
            return;
        std::uint32_t const slot = free_sends_.back();
        first_use_message const m{what,     attempt, static_cast<std::uint32_t>(rank_), static_cast<std::uint32_t>(p),
                                  mine_[p], answers};
        m.write(buffer_.data() + slot * buffer_bytes);
        qp_.post(rdmacxx::send{mr_.span<std::byte const>().subspan(slot * buffer_bytes, first_use_message::bytes)}
                     .id(slot)
                     .to(*ahs_[p], peers_[p].qpn, settings_.qkey));
        free_sends_.pop_back(); // posted: back with its completion
    }

    end_port port_;
    link<protection_domain> pd_;
    link<completion_queue<Completion>> send_cq_;
    link<completion_queue<Completion>> recv_cq_;
    qp_capabilities caps_;
    qp_settings settings_;
    address_qos qos_;
    std::chrono::milliseconds timeout_;
    int rank_;
    std::unique_ptr<std::atomic<std::uint8_t>[]> state_; // per peer: none, answered, usable
    std::timed_mutex mutex_;
    int asking_ = -1;                                          // the peer ensure() waits for
    std::uint16_t attempt_ = 0;                                // ensure()'s attempts, echoed in answers
    std::optional<std::pair<std::errc, std::string>> failure_; // that peer refused, or connecting to it failed
    std::vector<endpoint> peers_;                              // every rank's control QP
    std::vector<endpoint> mine_;                               // this rank's RC QP for each peer, once made
    std::vector<endpoint> theirs_;                             // the peer's QP this rank's is connected to
    std::vector<std::optional<address_handle>> ahs_;
    std::vector<std::uint32_t> free_sends_;
    std::vector<std::byte> buffer_;
    memory_region mr_;
    completion_queue<busy_poll> cq_;
    queue_pair<ud, busy_poll> qp_; // last: destroyed first, before its CQ and memory
};

} // namespace detail
} // namespace v0
} // namespace rdmacxx
