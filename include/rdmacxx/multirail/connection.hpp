#pragma once
/// @file
/// `multirail::connection` (its class in rdmacxx/multirail/connection_class.hpp): making and
/// connecting the rails, the data path (WRITEs cut into chunks, messages numbered, both posted on
/// the rails that are up, acknowledgements) and `poll`. What happens to what comes back — the
/// completions, the async events, the receive side and the rebuilds — is in
/// rdmacxx/multirail/protocol.hpp, included here.

#include "rdmacxx/multirail/connection_class.hpp"
#include "rdmacxx/multirail/protocol.hpp"

/// @cond
namespace rdmacxx {
inline namespace v0 {
namespace multirail {

inline connection::connection(std::vector<rail_spec> const& rails, connection_options opt)
    : opt_(opt), window_(opt.window == 0 ? 1 : opt.window),
      received_(opt.window == 0 ? 1 : opt.window, opt.message_bytes) {
    if (rails.empty() || rails.size() > max_rails) [[unlikely]]
        rdmacxx::detail::throw_argument("a multi-rail connection has 1 to " + std::to_string(max_rails) +
                                        " rails, not " + std::to_string(rails.size()));
    if (opt.window == 0 || opt.window > 4096 || opt.message_bytes < 64 || opt.message_bytes > (1U << 20) ||
        opt.chunk_bytes == 0 || opt.chunk_bytes > (std::size_t{1} << 30) || opt.send_depth == 0 ||
        opt.send_depth > 16384) [[unlikely]]
        rdmacxx::detail::throw_argument("a multi-rail connection's window is 1 to 4096 messages, its message size 64 "
                                        "bytes to 1 MiB (its control messages take 34), its chunk size 1 byte to 1 GiB "
                                        "and its send depth 1 to 16384");
    // Each rail receives at most a window of numbered messages, as many duplicates after a failure,
    // and the acknowledgements in flight.
    std::uint32_t const receives = 2 * opt.window + 2 * ack_slots;
    // A CQ takes the completions of its QP and of two retired ones.
    auto const cq_entries = static_cast<int>(3 * (receives + opt.send_depth + ack_slots));
    for (auto const& spec : rails) {
        rails_.push_back(std::make_shared<detail::rail>(spec, receives, slot_bytes(), cq_entries));
        new_qp(*rails_.back());
    }
    send_bytes_.resize(static_cast<std::size_t>(opt.window) * slot_bytes());
    send_region_.emplace(rails_, std::span{send_bytes_}, access::local_write);
    ack_bytes_.resize(ack_slots * message_header::wire_size);
    ack_region_.emplace(rails_, std::span{ack_bytes_}, access::local_write);
    ack_rail_.assign(ack_slots, -1);
    std::random_device seed;
    nonce_ = (std::uint64_t{seed()} << 32) | seed();
}

inline connection::~connection() {
    for (auto const& r : rails_) { // the QPs go now, even while a region keeps the rail's PD and CQ
        r->current = {};
        r->retired.clear();
    }
}

inline std::vector<std::byte> connection::address() const {
    rail_address a{nonce_, opt_.window, opt_.message_bytes, epoch_, {}};
    for (auto const& r : rails_)
        a.rails.push_back(r->current.qp->local_endpoint(*r->port, opt_.settings));
    return a.to_bytes();
}

inline void connection::connect(std::span<std::byte const> peer) {
    rail_address const a = rail_address::from_bytes(peer);
    if (a.rails.size() != rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::connect: the peer has " +
                                        std::to_string(a.rails.size()) + " rails, this side " +
                                        std::to_string(rails_.size()));
    if (a.window != opt_.window || a.message_bytes != opt_.message_bytes) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::connect: the peer's window and message size (" +
                                        std::to_string(a.window) + ", " + std::to_string(a.message_bytes) +
                                        " bytes) are not this side's (" + std::to_string(opt_.window) + ", " +
                                        std::to_string(opt_.message_bytes) + " bytes)");
    if (a.nonce == nonce_) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::connect: the peer's nonce is this side's (its own "
                                        "address?)");
    if (connected_ && !renewed_) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::connect: connected already (renew() first)");
    leader_ = nonce_ > a.nonce;
    peer_ = a.rails;
    // A rail whose path is down now (RTR cannot resolve the peer: ENETUNREACH, ETIMEDOUT) starts
    // down and is rebuilt later, as any rail that failed; with no rail at all, connect fails.
    std::exception_ptr first;
    for (std::size_t r = 0; r < rails_.size(); ++r) {
        detail::rail& x = *rails_[r];
        try {
            if (x.dead || !x.current.qp || x.current.qp->state() != IBV_QPS_RESET) [[unlikely]]
                rdmacxx::detail::throw_argument("multirail::connection::connect: rail " + std::to_string(r) +
                                                " has no new QP (its device failed)");
            x.current.qp->connect(*x.port, peer_[r], opt_.settings);
            x.current.connected = true;
            post_receives(r);
            x.state = rail_state::up;
        } catch (rdmacxx::error const& e) {
            if (!first) first = std::current_exception();
            if (x.current.qp) try {
                    x.current.qp->to_error(); // nothing of it may take a message now
                } catch (rdmacxx::error const&) {}
            x.state = rail_state::down;
            x.down_at = std::chrono::steady_clock::now();
            x.reason = e.code();
            ++x.counters.failures;
            event down{};
            down.what = event::kind::rail_down;
            down.rail = static_cast<std::uint32_t>(r);
            down.reason = e.code();
            events_.push_back(down);
        }
    }
    if (rails_up() == 0) [[unlikely]]
        std::rethrow_exception(first); // no rail could be connected
    if (connected_)                    // again, after renew(): these rails are rebuilt
        for (auto const& r : rails_)
            if (r->state == rail_state::up) ++r->counters.rebuilds;
    connected_ = true;
    renewed_ = false;
    epoch_ = std::max(epoch_, a.epoch) + 1; // the same on both sides, whatever failed before
    ack_sent_ = 0;                          // the next poll says what this side has released, whatever was lost before
}

inline void connection::renew() {
    renewed_ = true; // no rebuild step from here to connect
    for (std::size_t k = 0; k < rails_.size(); ++k) {
        detail::rail& r = *rails_[k];
        if (r.state != rail_state::down) {
            r.state = rail_state::down;
            ++r.counters.failures;
        }
        take_down_qp(k);
        if (r.dead) continue;
        try {                                       // a rail that cannot be renewed now starts down at connect
            r.port = end_port{r.ctx, r.spec_.port}; // the GID may have changed
            new_qp(r);
        } catch (rdmacxx::error const&) {}
    }
    steps_.clear(); // the rebuilds of the connection before
}

inline std::size_t connection::rails_up() const noexcept {
    return static_cast<std::size_t>(
        std::count_if(rails_.begin(), rails_.end(), [](auto const& r) { return r->state == rail_state::up; }));
}

inline void connection::throw_if_all_down(char const* what) const {
    if (broken_) [[unlikely]]
        throw *broken_;
    if (connected_ && rails_up() == 0) [[unlikely]]
        throw rails_down_error(std::string{what} + ": every rail of the multi-rail connection is down");
}

// The protocol failed (a corrupt message, a peer that does not keep it): unusable from now on.
inline void connection::broken(std::string const& why) {
    if (!broken_) broken_.emplace(std::make_error_code(std::errc::protocol_error), "multirail::connection: " + why);
}

// A rail that is up for the next request: `pin` while it is up, else round robin; for a send,
// one with room on its send queue. -1: none.
inline int connection::pick(int pin, bool for_send) {
    auto usable = [&](std::size_t r) {
        detail::rail const& x = *rails_[r];
        return x.state == rail_state::up && (!for_send || x.current.sends < opt_.send_depth);
    };
    if (pin >= 0 && static_cast<std::size_t>(pin) < rails_.size() &&
        rails_[static_cast<std::size_t>(pin)]->state == rail_state::up)
        return usable(static_cast<std::size_t>(pin)) ? pin : -1; // full: it waits for its own rail
    for (std::size_t k = 0; k < rails_.size(); ++k) {
        std::size_t const r = (cursor_ + k) % rails_.size();
        if (usable(r)) {
            cursor_ = r + 1;
            return static_cast<int>(r);
        }
    }
    return -1;
}

inline detail::rail_qp* connection::qp_of(detail::rail& r, std::uint16_t gen) {
    if (r.current.qp && r.current.generation == gen) return &r.current;
    for (auto& q : r.retired)
        if (q.generation == gen) return &q;
    return nullptr;
}

// A new QP for rail `r`, in RESET, made before the one it had is retired (until its requests'
// completions are reaped), so that a failure leaves the rail as it was.
inline void connection::new_qp(detail::rail& r) {
    qp_capabilities const caps{.max_send_wr = opt_.send_depth + ack_slots, .max_recv_wr = r.slots};
    auto made = std::make_unique<detail::rail_qp_type>(r.pd, r.cq, r.cq, caps);
    if (r.current.qp) {
        if (r.current.outstanding != 0) r.retired.push_back(std::move(r.current));
        r.current = {};
        ++r.generation;
    }
    r.current.qp = std::move(made);
    r.current.generation = r.generation;
}

// Posts every receive buffer of `rail` that no QP holds now on its current QP; a buffer still on
// a retired QP goes on when that QP gives it back (a late message may still land in it).
inline void connection::post_receives(std::size_t rail) {
    detail::rail& r = *rails_[rail];
    for (std::uint32_t k = 0; k < r.slots; ++k)
        if (r.slot_on[k] < 0) post_recv_slot(rail, k);
}

inline void connection::post_recv_slot(std::size_t rail, std::uint32_t slot) {
    detail::rail& r = *rails_[rail];
    r.current.qp->post_recv(
        recv{r.recv_mr.span(slot * r.slot_size, r.slot_size)}.id(tag(recv_wr, rail, r.current.generation, slot)));
    ++r.current.outstanding;
    r.slot_on[slot] = r.current.generation;
}

inline std::uint64_t connection::write(region const& src, std::size_t offset, std::size_t length,
                                       remote_region const& dst, std::size_t dst_offset, placement how,
                                       std::optional<std::uint32_t> notify) {
    if (length == 0 || offset > src.size() || length > src.size() - offset || dst_offset > dst.length ||
        length > dst.length - dst_offset || dst.address + dst.length < dst.address) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::write: " + std::to_string(length) + " bytes at " +
                                        std::to_string(offset) + " of a region of " + std::to_string(src.size()) +
                                        " to " + std::to_string(dst_offset) + " of a remote region of " +
                                        std::to_string(dst.length) + " bytes: empty or out of range");
    if (!src.on(rails_) || dst.rkeys.size() != rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::write: the region is another connection's, or the "
                                        "remote region has another number of rails");
    if (how.kind == placement_kind::pin && how.rail >= rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::write: pinned to rail " + std::to_string(how.rail) +
                                        ", which does not exist");
    throw_if_all_down("multirail::connection::write");
    write_op w;
    for (std::size_t r = 0; r < rails_.size(); ++r)
        w.src.push_back(src.local(r).span<std::byte const>(offset, length));
    w.dst = dst;
    w.length = length;
    w.notify = notify;
    std::uint64_t const id = next_write_++;
    std::size_t const unit = how.kind == placement_kind::stripe ? opt_.chunk_bytes : max_whole;
    int pin = -1;
    if (how.kind == placement_kind::pin) pin = static_cast<int>(how.rail);
    if (how.kind == placement_kind::round_robin) pin = pick(-1, false);
    for (std::size_t at = 0; at < length; at += unit) {
        std::uint32_t i = 0;
        if (free_chunks_.empty()) {
            i = static_cast<std::uint32_t>(chunks_.size());
            chunks_.emplace_back();
        } else {
            i = free_chunks_.back();
            free_chunks_.pop_back();
        }
        chunks_[i] = chunk{id, at, dst_offset + at, std::min(unit, length - at), pin, -1, 0, true, false};
        w.chunks.push_back(i);
        waiting_chunks_.push_back(i);
    }
    w.left = static_cast<std::uint32_t>(w.chunks.size());
    writes_.emplace(id, std::move(w));
    post_pending();
    return id;
}

inline bool connection::send(std::span<std::byte const> payload, std::uint32_t imm, placement how) {
    if (payload.size() > opt_.message_bytes) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::send: " + std::to_string(payload.size()) +
                                        " bytes are over the connection's message size of " +
                                        std::to_string(opt_.message_bytes));
    if (how.kind == placement_kind::pin && how.rail >= rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::send: pinned to rail " + std::to_string(how.rail) +
                                        ", which does not exist");
    throw_if_all_down("multirail::connection::send");
    if (!control_backlog_.empty() || !window_.has_room()) return false;
    int const pin = how.kind == placement_kind::pin ? static_cast<int>(how.rail) : -1;
    std::uint32_t const i = window_.push(message_kind::data, static_cast<std::uint32_t>(payload.size()), imm, 0, pin);
    if (!payload.empty())
        std::memcpy(send_bytes_.data() + i * slot_bytes() + message_header::wire_size, payload.data(), payload.size());
    post_pending();
    return true;
}

// A control message (numbered, in order with the data), through the backlog when the window is
// full. A rebuild's messages carry the connection's epoch as their immediate.
inline void connection::control(message_kind kind, std::size_t rail, std::span<std::byte const> payload,
                                std::uint32_t imm) {
    control_backlog_.push_back({kind, static_cast<std::uint8_t>(rail), imm, {payload.begin(), payload.end()}});
    flush_backlog();
}

inline void connection::flush_backlog() {
    while (!control_backlog_.empty() && window_.has_room()) {
        control_message const& c = control_backlog_.front();
        auto const len = static_cast<std::uint32_t>(c.payload.size());
        std::uint32_t const i = window_.push(c.kind, len, c.imm, c.rail, -1);
        if (len != 0)
            std::memcpy(send_bytes_.data() + i * slot_bytes() + message_header::wire_size, c.payload.data(), len);
        control_backlog_.pop_front();
    }
}

// A rebuild's request (leader) or reply (follower): the rebuild's number and this side's new
// QP's endpoint.
inline void connection::send_endpoint(message_kind kind, std::size_t rail) {
    detail::rail& r = *rails_[rail];
    std::array<std::byte, 2 + endpoint::wire_size> p{};
    rdmacxx::detail::wire::put<2>(p.data(), r.rebuild);
    auto const mine = r.current.qp->local_endpoint(*r.port, opt_.settings).to_bytes();
    std::memcpy(p.data() + 2, mine.data(), mine.size());
    control(kind, rail, p, epoch_);
}

inline void connection::post_pending() {
    if (!connected_ || broken_) return;
    // A request the provider refuses (its QP not as the rail's state says) takes the rail down and
    // stays queued for another.
    auto post = [&](int r, auto const& wr) {
        detail::rail& x = *rails_[static_cast<std::size_t>(r)];
        try {
            x.current.qp->post(wr);
        } catch (rdmacxx::error const& e) {
            rail_down(static_cast<std::size_t>(r), e.code());
            return false;
        }
        ++x.current.outstanding;
        ++x.current.sends;
        return true;
    };
    // WRITE chunks first (the bulk), each on its rail.
    while (!waiting_chunks_.empty()) {
        std::uint32_t const i = waiting_chunks_.front();
        chunk& c = chunks_[i];
        if (!c.live || c.cancelled || c.rail >= 0) { // its WRITE failed, or it is posted already
            waiting_chunks_.pop_front();
            continue;
        }
        int const r = pick(c.pin, true);
        if (r < 0) break;
        auto const rail = static_cast<std::size_t>(r);
        write_op const& w = writes_.at(c.write);
        auto const src = w.src[rail].subspan(c.src_offset, c.length);
        remote_span<std::byte> const dst{w.dst.address + c.dst_offset, c.length, w.dst.rkeys[rail]};
        if (!post(r, rdmacxx::write{src, dst}.id(tag(chunk_wr, rail, rails_[rail]->current.generation, i)))) continue;
        waiting_chunks_.pop_front();
        c.rail = r;
        c.gen = rails_[rail]->current.generation;
    }
    // Messages, oldest first; each carries the acknowledgement of what this side has released.
    while (!window_.waiting().empty()) {
        std::uint64_t const seq = *window_.waiting().begin();
        std::uint32_t const i = window_.index(seq);
        auto& s = window_[i];
        int const r = pick(s.pin, true);
        if (r < 0) break;
        auto const rail = static_cast<std::size_t>(r);
        std::byte* at = send_bytes_.data() + i * slot_bytes();
        message_header{s.kind, s.control_rail, s.seq, received_.released(), s.length, s.imm}.write(at);
        auto const span = send_region_->local(rail).span(i * slot_bytes(), message_header::wire_size + s.length);
        if (!post(r, rdmacxx::send{span}.id(tag(message_wr, rail, rails_[rail]->current.generation, i)))) continue;
        ack_sent_ = std::max(ack_sent_, received_.released());
        window_.posted(i, r, rails_[rail]->current.generation);
    }
    post_ack(false);
}

// A standalone acknowledgement, when what this side released is ahead of what it said and
// either a quarter of the window or 200 µs went by (or `force`: a rail went down, and the
// acknowledgement it may have carried with it).
inline void connection::post_ack(bool force) {
    if (!connected_) return;
    std::uint64_t const released = received_.released();
    if (released <= ack_sent_ && !force) return;
    auto const now = std::chrono::steady_clock::now();
    if (!force && released - ack_sent_ < std::max<std::uint64_t>(1, opt_.window / 4) &&
        now - ack_time_ < std::chrono::microseconds{200})
        return;
    auto const free = std::find(ack_rail_.begin(), ack_rail_.end(), -1);
    if (free == ack_rail_.end()) return; // the next one says it
    int const r = pick(-1, true);
    if (r < 0) return;
    auto const rail = static_cast<std::size_t>(r);
    auto const k = static_cast<std::uint32_t>(free - ack_rail_.begin());
    message_header{message_kind::ack, 0, 0, released, 0, 0}.write(ack_bytes_.data() + k * message_header::wire_size);
    detail::rail& x = *rails_[rail];
    auto const span = ack_region_->local(rail).span(k * message_header::wire_size, message_header::wire_size);
    try {
        x.current.qp->post(rdmacxx::send{span}.id(tag(ack_wr, rail, x.current.generation, k)));
    } catch (rdmacxx::error const& e) {
        rail_down(rail, e.code());
        return;
    }
    ++x.current.outstanding;
    ++x.current.sends;
    ack_rail_[k] = r;
    ack_sent_ = released;
    ack_time_ = now;
}

inline std::size_t connection::poll(std::span<event> out) {
    if (broken_) [[unlikely]]
        throw *broken_;
    for (std::uint64_t seq : handed_out_) // the messages the last poll handed out: their slots are free now
        received_.release(seq);
    handed_out_.clear();
    for (std::size_t r = 0; r < rails_.size(); ++r) {
        try {
            drain_events(r);
            reap(r);
        } catch (rdmacxx::error const& e) { // its device failed under us: it stays down
            rail_down(r, e.code());
            abandon(r);
            rails_[r]->dead = true;
        }
    }
    apply_steps();
    tick();
    flush_backlog();
    post_pending();
    std::size_t n = 0;
    for (; n < out.size() && !events_.empty(); ++n) {
        out[n] = events_.front();
        if (out[n].what == event::kind::message) handed_out_.push_back(out[n].id);
        events_.pop_front();
    }
    if (n == 0) throw_if_all_down("multirail::connection::poll");
    return n;
}

} // namespace multirail
} // namespace v0
} // namespace rdmacxx
/// @endcond
