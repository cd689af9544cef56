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
/// its side, `std::errc::connection_aborted` when this rank could not connect its QP to the
/// peer's (the reason is in the message). The group stays usable: other peers are
/// unaffected, and asking again retries the handshake with this peer.
/// Thread-safety: as any exception object.
class peer_connect_error : public error {
public:
    /// @param peer     the rank the QP was for
    /// @param code     `std::errc::timed_out`, `connection_refused` or `connection_aborted`
    /// @param message  what happened, e.g. "rank 3 did not answer within 2000 ms (5 requests sent)"
    peer_connect_error(int peer, std::errc code, std::string const& message)
        : error(std::make_error_code(code), message), peer_(peer) {}
    /// The rank the QP was for.
    [[nodiscard]] int peer() const noexcept { return peer_; }

private:
    int peer_;
};

namespace detail {

/// One message of the first-use handshake (48 bytes, integers big-endian), sent over the
/// control UD QPs:
///
/// | offset | bytes | field |
/// |---|---|---|
/// | 0 | 4 | magic `"RXPC"` |
/// | 4 | 1 | version, 1 |
/// | 5 | 1 | kind: 1 request, 2 reply, 3 refused |
/// | 6 | 2 | reserved, 0 |
/// | 8 | 4 | sender's rank |
/// | 12 | 4 | receiver's rank |
/// | 16 | 32 | the sender's RC QP for the receiver (`endpoint`; zeros when refused) |
///
/// A request carries the requester's endpoint; the receiver makes (or reuses) its QP for the
/// requester, connects it (RTS) and replies with its own endpoint, or says it refused; the
/// requester, waiting in `qp()`, connects on the reply at once. The receiver's first packets
/// may reach the requester's QP in the moment before that: RC's transport retries (the
/// settings' retry count and ACK timeout) carry them over it. When both sides request at once,
/// each answers the other's request, so one QP pair results. A lost request is sent again
/// (20 ms, then doubling to 500 ms); a repeated request is answered with the same reply.
struct first_use_message {
    static constexpr std::array<char, 4> magic{'R', 'X', 'P', 'C'};
    static constexpr std::size_t bytes = 16 + endpoint::wire_size;
    enum kind : std::uint8_t { request = 1, reply = 2, refused = 3 };

    kind what = request;
    std::uint32_t from = 0;
    std::uint32_t to = 0;
    endpoint qp{};

    void write(std::byte* out) const {
        wire::put_header(out, magic);
        wire::put<1>(out + 5, what);
        wire::put<2>(out + 6, 0);
        wire::put<4>(out + 8, from);
        wire::put<4>(out + 12, to);
        std::array<std::byte, endpoint::wire_size> ep{};
        if (what == request || what == reply) ep = qp.to_bytes();
        std::memcpy(out + 16, ep.data(), ep.size());
    }
    /// The message in `in`, or nothing when it is not one (another protocol, another version,
    /// corrupt): such datagrams are dropped.
    static std::optional<first_use_message> read(std::span<std::byte const> in) noexcept {
        if (!wire::header_fault(in, bytes, magic, "a first-use message").empty()) return std::nullopt;
        auto const k = wire::get<1>(in.data() + 5);
        if (k < request || k > refused || wire::get<2>(in.data() + 6) != 0) return std::nullopt;
        first_use_message m;
        m.what = static_cast<kind>(k);
        m.from = static_cast<std::uint32_t>(wire::get<4>(in.data() + 8));
        m.to = static_cast<std::uint32_t>(wire::get<4>(in.data() + 12));
        if (m.what == request || m.what == reply) {
            try {
                m.qp = endpoint::from_bytes(in.subspan(16, endpoint::wire_size));
            } catch (...) {
                return std::nullopt;
            }
        }
        return m;
    }
};

/// The first-use side of a `peer_group<Completion>`: the control UD QP (its own CQ and
/// registered slots, 64 receives and 16 sends of 128 bytes), every peer's control endpoint, and
/// the handshake's state per peer. The RC QPs it makes live in the group's vector, passed in.
/// Thread-safe: `ensure` and `progress` serialise on one mutex; `ready` is one atomic load.
template <completion_strategy Completion>
class first_use {
public:
    using rc_queue_pair = queue_pair<rc, Completion>;
    using slots = std::vector<std::optional<rc_queue_pair>>;

    static constexpr std::uint32_t receives = 64;
    static constexpr std::uint32_t sends = 16;
    static constexpr std::size_t slot_bytes = 128; // a 40-byte GRH and a 48-byte message

    /// The control QP on `port`, in `pd`, brought up and with its receives posted; RC QPs will
    /// be made in `pd` on `send_cq`/`recv_cq` with `caps` and connected with `settings`.
    /// @throws sys_error when the device refuses the control CQ, QP or memory region.
    first_use(end_port const& port, protection_domain& pd, completion_queue<Completion>& send_cq,
              completion_queue<Completion>& recv_cq, qp_capabilities caps, qp_settings settings,
              std::chrono::milliseconds timeout, int rank, int size)
        : port_(port), pd_(pd.anchor_cell()), send_cq_(send_cq.anchor_cell()), recv_cq_(recv_cq.anchor_cell()),
          caps_(caps), settings_(std::move(settings)), timeout_(timeout), rank_(rank),
          state_(std::make_unique<std::atomic<std::uint8_t>[]>(static_cast<std::size_t>(size))),
          buffer_((receives + sends) * slot_bytes), mr_(pd.register_memory(std::span{buffer_}, access::local_write)),
          cq_(port.context(), static_cast<int>(receives + sends)),
          qp_(pd, cq_, cq_, qp_capabilities{.max_send_wr = sends, .max_recv_wr = receives}) {
        for (int r = 0; r < size; ++r)
            state_[static_cast<std::size_t>(r)].store(0, std::memory_order_relaxed);
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

    /// True once this rank's QP to `peer` is connected (RTS) to the peer's, which was connected
    /// first (this rank asked and got the reply) or is being connected (this rank answered).
    [[nodiscard]] bool ready(int peer) const noexcept {
        return state_[static_cast<std::size_t>(peer)].load(std::memory_order_acquire) != 0;
    }

    /// Brings up the QP to `peer` in `qps` (making it when needed), answering every other
    /// rank's handshake meanwhile; returns once both sides are connected.
    /// @throws peer_connect_error (timed_out, connection_refused) as the class says; sys_error
    ///         or argument_error when this rank cannot make or connect its own QP.
    void ensure(int peer, slots& qps) {
        std::lock_guard const lock{mutex_};
        auto const p = static_cast<std::size_t>(peer);
        if (ready(peer)) return;
        own_qp(p, qps); // this rank's own failure throws to the caller, as it would without first use
        auto const start = std::chrono::steady_clock::now();
        auto const deadline = start + timeout_;
        auto next = start;
        auto interval = std::chrono::milliseconds{20};
        int sent = 0;
        failure_.reset();
        asking_ = peer;
        struct done_asking {
            int& asking;
            ~done_asking() { asking = -1; }
        } const reset{asking_};
        while (!ready(peer)) {
            auto const now = std::chrono::steady_clock::now();
            if (now >= next) {
                send(p, first_use_message::request); // again when the request or its reply was lost
                ++sent;
                next = now + interval;
                interval = std::min(interval * 2, std::chrono::milliseconds{500});
            }
            if (poll() == 0) {
                if (failure_) throw peer_connect_error(peer, failure_->first, failure_->second);
                if (std::chrono::steady_clock::now() >= deadline) [[unlikely]]
                    throw peer_connect_error(
                        peer, std::errc::timed_out,
                        "peer_group: rank " + std::to_string(peer) + " did not answer rank " + std::to_string(rank_) +
                            "'s first-use handshake within " + std::to_string(timeout_.count()) + " ms (" +
                            std::to_string(sent) +
                            " messages sent; a rank answers while it calls into its group: qp(), progress())");
                std::this_thread::yield();
            }
        }
    }

    /// Answers the handshake messages that arrived, without waiting.
    /// @return how many messages were handled.
    std::size_t progress(slots& qps) {
        std::unique_lock const lock{mutex_, std::try_to_lock};
        if (!lock.owns_lock()) return 0; // another thread is in ensure(): it answers them
        qps_ = &qps;
        std::size_t handled = 0;
        while (std::size_t const n = poll())
            handled += n;
        return handled;
    }

private:
    [[nodiscard]] bool connected(std::size_t p) const noexcept {
        return state_[p].load(std::memory_order_relaxed) != 0;
    }

    rc_queue_pair& own_qp(std::size_t p, slots& qps) {
        qps_ = &qps;
        if (!qps[p]) {
            qps[p].emplace(pd_.get("peer group", "protection domain"), send_cq_.get("peer group", "send CQ"),
                           recv_cq_.get("peer group", "receive CQ"), caps_);
            mine_[p] = qps[p]->local_endpoint(port_, settings_);
        }
        return *qps[p];
    }

    void post_receive(std::uint32_t slot) {
        qp_.post_recv(recv{mr_.span().subspan(slot * slot_bytes, slot_bytes)}.id(slot));
    }

    // Polls the control CQ once and handles what it returned: the number of messages handled.
    std::size_t poll() {
        std::array<work_completion, 16> wcs;
        std::size_t const n = cq_.poll(wcs);
        std::size_t handled = 0;
        for (std::size_t i = 0; i < n; ++i) {
            auto const slot = static_cast<std::uint32_t>(wcs[i].wr_id());
            if (slot >= receives) { // a send's completion: its slot is free again
                free_sends_.push_back(slot);
                continue;
            }
            if (wcs[i].ok()) {
                auto const in = std::span<std::byte const>{buffer_}.subspan(slot * slot_bytes, slot_bytes);
                if (auto m = first_use_message::read(ud_payload(in, wcs[i])); m && accept(*m, wcs[i])) {
                    handle(*m);
                    ++handled;
                }
            }
            post_receive(slot);
        }
        return handled;
    }

    [[nodiscard]] bool accept(first_use_message const& m, work_completion const& wc) const noexcept {
        return m.to == static_cast<std::uint32_t>(rank_) && m.from < peers_.size() &&
               m.from != static_cast<std::uint32_t>(rank_) && wc.src_qp() == peers_[m.from].qpn;
    }

    void handle(first_use_message const& m) {
        std::size_t const p = m.from;
        switch (m.what) {
        case first_use_message::request:
            if (!connected(p) && !connect(p, m.qp).empty()) return send(p, first_use_message::refused);
            // Again when the first reply was lost; refused when this rank's QP is connected to
            // another QP of the peer's (one the peer dropped after it failed to connect it).
            return send(p, theirs_[p] == m.qp.qpn ? first_use_message::reply : first_use_message::refused);
        case first_use_message::reply: // the peer replies once its side is connected
            if (connected(p)) return;
            if (std::string why = connect(p, m.qp); !why.empty() && static_cast<int>(p) == asking_)
                failure_.emplace(std::errc::connection_aborted, "peer_group: rank " + std::to_string(rank_) +
                                                                    " could not connect its QP to rank " +
                                                                    std::to_string(p) + "'s: " + why);
            return;
        case first_use_message::refused:
            if (static_cast<int>(p) == asking_)
                failure_.emplace(std::errc::connection_refused, "peer_group: rank " + std::to_string(p) +
                                                                    " could not make or connect its side of the "
                                                                    "connection to rank " +
                                                                    std::to_string(rank_));
            return;
        }
    }

    // Makes (when needed) and connects this rank's QP for peer p to `remote`; what went wrong when
    // it could not (this rank's QP is dropped then, so that a later attempt starts anew).
    std::string connect(std::size_t p, endpoint const& remote) {
        try {
            own_qp(p, *qps_).connect(port_, remote, settings_);
            theirs_[p] = remote.qpn;
            state_[p].store(1, std::memory_order_release);
            return {};
        } catch (std::exception const& e) {
            (*qps_)[p].reset();
            return e.what();
        }
    }

    // Sends `what` to peer p; dropped when every send slot is still posted (the handshake sends
    // again, as for a datagram lost on the wire).
    void send(std::size_t p, first_use_message::kind what) {
        if (free_sends_.empty()) poll();
        if (free_sends_.empty()) [[unlikely]]
            return;
        std::uint32_t const slot = free_sends_.back();
        free_sends_.pop_back();
        first_use_message const m{what, static_cast<std::uint32_t>(rank_), static_cast<std::uint32_t>(p), mine_[p]};
        m.write(buffer_.data() + slot * slot_bytes);
        if (!ahs_[p]) ahs_[p].emplace(pd_.get("peer group", "protection domain"), port_, peers_[p].lid, peers_[p].gid);
        qp_.post(
            rdmacxx::send{mr_.span<std::byte const>().subspan(slot * slot_bytes, first_use_message::bytes)}.id(slot).to(
                *ahs_[p], peers_[p].qpn, settings_.qkey));
    }

    end_port port_;
    link<protection_domain> pd_;
    link<completion_queue<Completion>> send_cq_;
    link<completion_queue<Completion>> recv_cq_;
    qp_capabilities caps_;
    qp_settings settings_;
    std::chrono::milliseconds timeout_;
    int rank_;
    std::unique_ptr<std::atomic<std::uint8_t>[]> state_; // per peer: 1 once its QP is connected
    std::mutex mutex_;
    slots* qps_ = nullptr;
    int asking_ = -1;                                          // the peer ensure() waits for
    std::optional<std::pair<std::errc, std::string>> failure_; // that peer refused, or connecting to it failed
    std::vector<endpoint> peers_;                              // every rank's control QP
    std::vector<endpoint> mine_;                               // this rank's RC QP for each peer, once made
    std::vector<std::uint32_t> theirs_;                        // the QPN of each peer's QP it is connected to
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
