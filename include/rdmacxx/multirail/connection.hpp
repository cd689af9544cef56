#pragma once
/// @file
/// `multirail::connection` (its class in rdmacxx/multirail/connection_class.hpp): the data path
/// (WRITEs cut into chunks, messages numbered, both posted on the rails that are up), the
/// completions and async events of every rail, the receive side (order, duplicates,
/// acknowledgements) and the rebuild of a rail (leader and follower over a rail that is up).

#include "rdmacxx/multirail/connection_class.hpp"

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
    if (opt.window == 0 || opt.message_bytes == 0 || opt.chunk_bytes == 0) [[unlikely]]
        rdmacxx::detail::throw_argument("a multi-rail connection needs a window, a message size and a chunk size "
                                        "of at least 1");
    // Each rail receives at most a window of numbered messages, as many duplicates after a failure,
    // and the acknowledgements in flight.
    std::uint32_t const receives = 2 * opt.window + 2 * ack_slots;
    // A CQ takes the completions of its QP and of one retired QP.
    auto const cq_entries = static_cast<int>(2 * (receives + opt.send_depth + ack_slots));
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

inline std::vector<std::byte> connection::address() const {
    rail_address a{nonce_, {}};
    for (auto const& r : rails_)
        a.rails.push_back(r->current.qp->local_endpoint(*r->port, opt_.settings));
    return a.to_bytes();
}

inline void connection::connect(std::span<std::byte const> peer) {
    rail_address const a = rail_address::from_bytes(peer);
    if (a.rails.size() != rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::connect: the peer has " + std::to_string(a.rails.size()) +
                                        " rails, this side " + std::to_string(rails_.size()));
    if (a.nonce == nonce_) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::connect: the peer's nonce is this side's (its own "
                                        "address?)");
    leader_ = nonce_ > a.nonce;
    peer_ = a.rails;
    for (std::size_t r = 0; r < rails_.size(); ++r) {
        rails_[r]->current.qp->connect(*rails_[r]->port, peer_[r], opt_.settings);
        post_receives(r);
        rails_[r]->state = rail_state::up;
    }
    if (connected_) // again, after renew(): these rails are rebuilt
        for (auto const& r : rails_)
            ++r->counters.rebuilds;
    connected_ = true;
    post_pending();
}

inline void connection::renew() {
    for (auto const& r : rails_) {
        r->port.emplace(r->ctx, r->spec_.port); // the GID may have changed
        if (r->state != rail_state::down) {
            r->state = rail_state::down;
            ++r->counters.failures;
        }
        new_qp(*r);
    }
}

inline std::size_t connection::rails_up() const noexcept {
    return static_cast<std::size_t>(
        std::count_if(rails_.begin(), rails_.end(), [](auto const& r) { return r->state == rail_state::up; }));
}

inline void connection::throw_if_all_down(char const* what) const {
    if (connected_ && rails_up() == 0) [[unlikely]]
        throw rails_down_error(std::string{what} + ": every rail of the multi-rail connection is down");
}

// A rail that is up for the next request: `pin` while it is up, else round robin; for a send,
// one with room on its send queue. -1: none.
inline int connection::pick(int pin, bool for_send) {
    auto usable = [&](std::size_t r) {
        detail::rail const& x = *rails_[r];
        return x.state == rail_state::up && (!for_send || x.current.outstanding < opt_.send_depth);
    };
    if (pin >= 0 && static_cast<std::size_t>(pin) < rails_.size() && rails_[static_cast<std::size_t>(pin)]->state == rail_state::up)
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

// A new QP for rail `r`, in RESET; the one it had is moved to ERR and retired until its
// requests' completions are reaped.
inline void connection::new_qp(detail::rail& r) {
    if (r.current.qp) {
        try {
            r.current.qp->to_error();
        } catch (rdmacxx::error const&) { // the device is gone: its completions will not come either
            r.current.outstanding = 0;
        }
        if (r.current.outstanding != 0) r.retired.push_back(std::move(r.current));
        r.current = {};
        ++r.generation;
    }
    qp_capabilities caps{.max_send_wr = opt_.send_depth + ack_slots, .max_recv_wr = r.slots};
    r.current.qp = std::make_unique<detail::rail_qp_type>(r.pd, r.cq, r.cq, caps);
    r.current.generation = r.generation;
}

inline void connection::post_receives(std::size_t rail) {
    detail::rail& r = *rails_[rail];
    for (std::uint32_t k = 0; k < r.slots; ++k) {
        r.current.qp->post_recv(recv{r.recv_mr.span(k * r.slot_size, r.slot_size)}.id(
            tag(recv_wr, rail, r.current.generation, k)));
        ++r.current.outstanding;
    }
}

inline std::uint64_t connection::write(region const& src, std::size_t offset, std::size_t length,
                                       remote_region const& dst, std::size_t dst_offset, placement how,
                                       std::optional<std::uint32_t> notify) {
    if (length == 0 || offset > src.size() || length > src.size() - offset || dst_offset > dst.length ||
        length > dst.length - dst_offset) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::write: " + std::to_string(length) + " bytes at " +
                                        std::to_string(offset) + " of a region of " + std::to_string(src.size()) +
                                        " to " + std::to_string(dst_offset) + " of a remote region of " +
                                        std::to_string(dst.length) + " bytes: empty or out of range");
    if (src.rails() != rails_.size() || dst.rkeys.size() != rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::write: the region or remote region is of another "
                                        "number of rails");
    if (how.kind == placement_kind::pin && how.rail >= rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection::write: pinned to rail " + std::to_string(how.rail) +
                                        ", which does not exist");
    throw_if_all_down("multirail::connection::write");
    std::uint64_t const id = next_write_++;
    write_op& w = writes_[id];
    for (std::size_t r = 0; r < rails_.size(); ++r)
        w.src.push_back(src.local(r).span<std::byte const>(offset, length));
    w.dst = dst;
    w.length = length;
    w.notify = notify;
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
        chunks_[i] = chunk{id, at, dst_offset + at, std::min(unit, length - at), pin, -1, true};
        w.chunks.push_back(i);
        waiting_chunks_.push_back(i);
    }
    w.left = static_cast<std::uint32_t>(w.chunks.size());
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
    std::uint32_t const i =
        window_.push(message_kind::data, static_cast<std::uint32_t>(payload.size()), imm, 0, pin);
    if (!payload.empty())
        std::memcpy(send_bytes_.data() + i * slot_bytes() + message_header::wire_size, payload.data(), payload.size());
    post_pending();
    return true;
}

// A control message (numbered, in order with the data), through the backlog when the window is full.
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
    control(kind, rail, p);
}

inline void connection::post_pending() {
    if (!connected_) return;
    // WRITE chunks first (the bulk), each on its rail.
    for (std::size_t n = waiting_chunks_.size(); n-- > 0;) {
        std::uint32_t const i = waiting_chunks_.front();
        chunk& c = chunks_[i];
        int const r = pick(c.pin, true);
        if (r < 0) break;
        waiting_chunks_.pop_front();
        detail::rail& x = *rails_[static_cast<std::size_t>(r)];
        write_op const& w = writes_.at(c.write);
        auto const src = w.src[static_cast<std::size_t>(r)].subspan(c.src_offset, c.length);
        remote_span<std::byte> const dst{w.dst.address + c.dst_offset, c.length, w.dst.rkeys[static_cast<std::size_t>(r)]};
        x.current.qp->post(rdmacxx::write{src, dst}.id(tag(chunk_wr, static_cast<std::size_t>(r), x.current.generation, i)));
        ++x.current.outstanding;
        c.rail = r;
    }
    // Messages, oldest first; each carries the acknowledgement of what this side has released.
    while (!window_.waiting().empty()) {
        std::uint64_t const seq = *window_.waiting().begin();
        std::uint32_t const i = window_.index(seq);
        auto& s = window_[i];
        int const r = pick(s.pin, true);
        if (r < 0) break;
        detail::rail& x = *rails_[static_cast<std::size_t>(r)];
        std::byte* at = send_bytes_.data() + i * slot_bytes();
        message_header{s.kind, s.control_rail, s.seq, received_.released(), s.length, s.imm}.write(at);
        ack_sent_ = std::max(ack_sent_, received_.released());
        auto const span = send_region_->local(static_cast<std::size_t>(r)).span(i * slot_bytes(),
                                                                                 message_header::wire_size + s.length);
        x.current.qp->post(rdmacxx::send{span}.id(tag(message_wr, static_cast<std::size_t>(r), x.current.generation, i)));
        ++x.current.outstanding;
        window_.posted(i, r);
    }
    post_ack(false);
}

// A standalone acknowledgement, when what this side released is ahead of what it said and
// either a quarter of the window or 200 µs went by (or `force`: a rail went down, and the
// acknowledgement it may have carried with it).
inline void connection::post_ack(bool force) {
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
    auto const k = static_cast<std::uint32_t>(free - ack_rail_.begin());
    message_header{message_kind::ack, 0, 0, released, 0, 0}.write(ack_bytes_.data() + k * message_header::wire_size);
    detail::rail& x = *rails_[static_cast<std::size_t>(r)];
    auto const span = ack_region_->local(static_cast<std::size_t>(r)).span(k * message_header::wire_size,
                                                                           message_header::wire_size);
    x.current.qp->post(rdmacxx::send{span}.id(tag(ack_wr, static_cast<std::size_t>(r), x.current.generation, k)));
    ++x.current.outstanding;
    ack_rail_[k] = r;
    ack_sent_ = released;
    ack_time_ = now;
}

inline std::size_t connection::poll(std::span<event> out) {
    for (std::uint64_t seq : handed_out_) // the messages the last poll handed out: their slots are free now
        received_.release(seq);
    handed_out_.clear();
    for (std::size_t r = 0; r < rails_.size(); ++r) {
        drain_events(r);
        reap(r);
    }
    tick();
    flush_backlog();
    post_pending();
    throw_if_all_down("multirail::connection::poll");
    std::size_t n = 0;
    for (; n < out.size() && !events_.empty(); ++n) {
        out[n] = events_.front();
        if (out[n].what == event::kind::message) handed_out_.push_back(out[n].id);
        events_.pop_front();
    }
    return n;
}

inline void connection::drain_events(std::size_t rail) {
    detail::rail& r = *rails_[rail];
    while (std::optional<async_event> e = r.events.try_get()) {
        switch (e->type()) {
        case IBV_EVENT_PORT_ERR:
            if (e->port_num() == r.spec_.port) {
                r.port_active = false;
                rail_down(rail, std::make_error_code(std::errc::network_down));
            }
            break;
        case IBV_EVENT_PORT_ACTIVE:
            if (e->port_num() == r.spec_.port) {
                r.port_active = true;
                on_port_active(rail);
            }
            break;
        case IBV_EVENT_DEVICE_FATAL:
            r.port_active = false;
            rail_down(rail, std::make_error_code(std::errc::no_such_device));
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            if (r.current.qp && e->qp() == r.current.qp->native_handle())
                rail_down(rail, std::make_error_code(std::errc::connection_aborted));
            break;
        default:
            break;
        }
    }
}

inline void connection::reap(std::size_t rail) {
    std::array<work_completion, 32> wcs{};
    for (;;) {
        std::size_t const n = rails_[rail]->cq.poll(std::span{wcs});
        for (std::size_t k = 0; k < n; ++k)
            on_completion(rail, wcs[k]);
        if (n < wcs.size()) return;
    }
}

inline void connection::on_completion(std::size_t rail, work_completion const& wc) {
    detail::rail& r = *rails_[rail];
    auto const kind = static_cast<wr_kind>(wc.wr_id() >> 56);
    auto const gen = static_cast<std::uint16_t>(wc.wr_id() >> 32);
    auto const index = static_cast<std::uint32_t>(wc.wr_id());
    if (detail::rail_qp* q = qp_of(r, gen)) {
        if (q->outstanding != 0) --q->outstanding;
        if (q != &r.current && q->outstanding == 0) // a retired QP with nothing left: destroyed
            r.retired.erase(r.retired.begin() + (q - r.retired.data()));
    }
    bool const ok = wc.ok();
    if (!ok && wc.status() != IBV_WC_WR_FLUSH_ERR && gen == r.current.generation) rail_down(rail, wc.error_code());
    switch (kind) {
    case chunk_wr: {
        chunk& c = chunks_[index];
        if (!c.live) return;
        c.rail = -1;
        if (!ok) {
            waiting_chunks_.push_front(index); // again, on a rail that is up
            return;
        }
        r.counters.bytes += c.length;
        ++r.counters.operations;
        write_op& w = writes_.at(c.write);
        if (--w.left != 0) return;
        std::uint64_t const id = c.write;
        event done{};
        done.what = event::kind::write_done;
        done.id = id;
        done.bytes = w.length;
        events_.push_back(done);
        if (w.notify) {
            std::array<std::byte, 16> p{};
            rdmacxx::detail::wire::put<8>(p.data(), id);
            rdmacxx::detail::wire::put<8>(p.data() + 8, w.length);
            control(message_kind::notice, 0, p, *w.notify); // numbered: in order with the messages
        }
        for (std::uint32_t i : w.chunks) {
            chunks_[i].live = false;
            free_chunks_.push_back(i);
        }
        writes_.erase(id);
        return;
    }
    case message_wr:
        if (ok) {
            r.counters.bytes += window_[index].length;
            ++r.counters.operations;
            window_.completed(index);
        } else {
            window_.failed(index);
        }
        return;
    case ack_wr:
        ack_rail_[index] = -1;
        if (ok) ++r.counters.operations;
        return;
    case recv_wr:
        if (ok && gen == r.current.generation) {
            on_arrival(rail, index, wc.byte_len());
            if (r.state != rail_state::down) { // its buffer goes back on the QP
                r.current.qp->post_recv(
                    recv{r.recv_mr.span(index * r.slot_size, r.slot_size)}.id(tag(recv_wr, rail, gen, index)));
                ++r.current.outstanding;
            }
        }
        return;
    }
}

inline void connection::on_arrival(std::size_t rail, std::uint32_t slot, std::uint32_t bytes) {
    detail::rail& r = *rails_[rail];
    std::span<std::byte const> const m{r.recv_bytes.data() + slot * r.slot_size, bytes};
    message_header const h = message_header::read(m);
    window_.acknowledge(h.ack);
    if (h.kind == message_kind::ack) return;
    switch (received_.take(h, m.subspan(message_header::wire_size, h.length))) {
    case detail::receive_window::arrival::duplicate:
        ++duplicates_;
        return;
    case detail::receive_window::arrival::out_of_window:
        rdmacxx::detail::throw_argument("multirail::connection: message " + std::to_string(h.seq) +
                                        " is beyond the receive window (the peer's window is larger than this side's)");
    case detail::receive_window::arrival::accepted:
        deliver();
        return;
    }
}

// Hands over the messages that are next in order.
inline void connection::deliver() {
    while (std::optional<message_header> h = received_.next()) {
        received_.advance();
        std::span<std::byte const> const payload = received_.payload(h->seq);
        if (h->kind == message_kind::data) {
            event e{};
            e.what = event::kind::message;
            e.id = h->seq;
            e.imm = h->imm;
            e.bytes = payload.size();
            e.data = payload;
            events_.push_back(e);
            continue; // released when the poll that hands it out is followed by another
        }
        on_control(*h, payload);
        received_.release(h->seq);
    }
}

inline void connection::on_control(message_header const& h, std::span<std::byte const> payload) {
    std::size_t const rail = h.rail;
    if (h.kind == message_kind::notice) {
        if (payload.size() < 16) [[unlikely]]
            rdmacxx::detail::throw_argument("multirail::connection: a corrupt WRITE notice");
        event e{};
        e.what = event::kind::write_arrived;
        e.id = rdmacxx::detail::wire::get<8>(payload.data());
        e.bytes = static_cast<std::size_t>(rdmacxx::detail::wire::get<8>(payload.data() + 8));
        e.imm = h.imm;
        events_.push_back(e);
        return;
    }
    if (rail >= rails_.size()) [[unlikely]]
        rdmacxx::detail::throw_argument("multirail::connection: a control message about rail " + std::to_string(rail) +
                                        ", which does not exist");
    detail::rail& r = *rails_[rail];
    std::uint16_t const gen =
        payload.size() >= 2 ? static_cast<std::uint16_t>(rdmacxx::detail::wire::get<2>(payload.data())) : std::uint16_t{0};
    switch (h.kind) {
    case message_kind::ask: // to the leader: the follower's port is active again
        if (!leader_ || r.state == rail_state::rebuilding) return; // one under way (a stuck one times out)
        if (r.state == rail_state::up) rail_down(rail, std::make_error_code(std::errc::connection_reset));
        start_rebuild(rail);
        return;
    case message_kind::request: { // to the follower: the leader's new QP
        if (leader_ || payload.size() < 2 + endpoint::wire_size) return;
        if (r.state == rail_state::up) rail_down(rail, std::make_error_code(std::errc::connection_reset));
        if (!r.ctx.query_port(r.spec_.port).active()) return; // not yet: it asks when its port is back
        r.port.emplace(r.ctx, r.spec_.port);                   // the GID may have changed
        new_qp(r);
        r.rebuild = gen;
        peer_[rail] = endpoint::from_bytes(payload.subspan(2));
        r.current.qp->connect(*r.port, peer_[rail], opt_.settings);
        post_receives(rail);
        r.state = rail_state::rebuilding;
        r.rebuild_started = std::chrono::steady_clock::now();
        send_endpoint(message_kind::reply, rail);
        return;
    }
    case message_kind::reply: // to the leader: the follower's new QP, connected to ours
        if (!leader_ || r.state != rail_state::rebuilding || gen != r.rebuild ||
            payload.size() < 2 + endpoint::wire_size)
            return;
        peer_[rail] = endpoint::from_bytes(payload.subspan(2));
        r.current.qp->connect(*r.port, peer_[rail], opt_.settings);
        post_receives(rail);
        r.state = rail_state::up;
        ++r.counters.rebuilds;
        events_.push_back(event{event::kind::rail_up, 0, static_cast<std::uint32_t>(rail), 0, 0, {}, {}});
        {
            std::array<std::byte, 2> p{};
            rdmacxx::detail::wire::put<2>(p.data(), r.rebuild);
            control(message_kind::done, rail, p);
        }
        return;
    case message_kind::done: // to the follower: both sides connected
        if (leader_ || r.state != rail_state::rebuilding || gen != r.rebuild) return;
        r.state = rail_state::up;
        ++r.counters.rebuilds;
        events_.push_back(event{event::kind::rail_up, 0, static_cast<std::uint32_t>(rail), 0, 0, {}, {}});
        return;
    default:
        return;
    }
}

// Rail `rail` goes out of rotation: its QP to ERR (the requests on it come back flushed and go
// to the other rails), and the peer hears what this side released once more.
inline void connection::rail_down(std::size_t rail, std::error_code why) {
    detail::rail& r = *rails_[rail];
    if (r.state == rail_state::down) return;
    r.state = rail_state::down;
    ++r.counters.failures;
    r.down_at = std::chrono::steady_clock::now();
    r.reason = why;
    if (r.current.qp) try {
            r.current.qp->to_error();
        } catch (rdmacxx::error const&) { // the device is gone: nothing of it will complete
            r.current.outstanding = 0;
        }
    event e{};
    e.what = event::kind::rail_down;
    e.rail = static_cast<std::uint32_t>(rail);
    e.reason = why;
    events_.push_back(e);
    post_ack(true);
}

// The leader's step: a new QP for `rail`, its endpoint to the follower over a rail that is up.
inline void connection::start_rebuild(std::size_t rail) {
    detail::rail& r = *rails_[rail];
    if (!leader_ || rails_up() == 0) return;
    try {
        if (!r.ctx.query_port(r.spec_.port).active()) return;
        r.port.emplace(r.ctx, r.spec_.port); // the GID may have changed
    } catch (rdmacxx::error const&) {
        return; // tried again later
    }
    new_qp(r);
    ++r.rebuild;
    r.state = rail_state::rebuilding;
    r.rebuild_started = std::chrono::steady_clock::now();
    send_endpoint(message_kind::request, rail);
}

inline void connection::on_port_active(std::size_t rail) {
    if (rails_[rail]->state != rail_state::down) return; // up, or a rebuild under way
    if (leader_)
        start_rebuild(rail);
    else if (rails_up() != 0)
        control(message_kind::ask, rail);
}

// What time brings: rebuilds that take too long are given up, and a rail down with its port
// active is tried again (a fault that raised no port event on this side).
inline void connection::tick() {
    auto const now = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < rails_.size(); ++k) {
        detail::rail& r = *rails_[k];
        if (r.state == rail_state::rebuilding && now - r.rebuild_started > opt_.rebuild_timeout) {
            r.state = rail_state::down;
            r.down_at = now;
            new_qp(r); // the half-made one goes
        }
        if (r.state == rail_state::down && now - r.down_at > opt_.rebuild_retry && rails_up() != 0) {
            r.down_at = now;
            if (r.port_active) on_port_active(k);
        }
    }
}

} // namespace multirail
} // namespace v0
} // namespace rdmacxx
/// @endcond
