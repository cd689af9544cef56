#pragma once
/// @file
/// `multirail::connection` (its class in rdmacxx/multirail/connection_class.hpp), what comes
/// back: every rail's completions and async events, the receive side (order, duplicates,
/// acknowledgements), a rail going down and the work it carried going to the others, and the
/// rebuild of a rail (leader and follower over a rail that is up). Part of
/// rdmacxx/multirail/connection.hpp, which includes it.

#include "rdmacxx/multirail/connection_class.hpp"

/// @cond
namespace rdmacxx {
inline namespace v0 {
namespace multirail {

// Whether a failed completion is the request's own fault (its memory, keys or length), not the
// rail's: the operation fails and is not carried again.
inline bool connection::refused(ibv_wc_status status) noexcept {
    switch (status) {
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_MW_BIND_ERR:
        return true;
    default:
        return false;
    }
}

inline void connection::drain_events(std::size_t rail) {
    detail::rail& r = *rails_[rail];
    while (std::optional<async_event> e = r.events.try_get()) {
        switch (e->type()) {
        case IBV_EVENT_PORT_ERR:
            if (e->port_num() == r.spec_.port) rail_down(rail, std::make_error_code(std::errc::network_down));
            break;
        case IBV_EVENT_PORT_ACTIVE:
            if (e->port_num() == r.spec_.port) on_port_active(rail);
            break;
        case IBV_EVENT_DEVICE_FATAL:
            rail_down(rail, std::make_error_code(std::errc::no_such_device));
            abandon(rail); // nothing of it will complete
            r.dead = true;
            break;
        case IBV_EVENT_CQ_ERR: // its CQ overran: it is not made anew, so the rail stays down
            rail_down(rail, std::make_error_code(std::errc::no_buffer_space));
            abandon(rail);
            r.dead = true;
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
    bool const current = r.current.qp && gen == r.current.generation;
    if (detail::rail_qp* q = qp_of(r, gen)) {
        if (q->outstanding != 0) --q->outstanding;
        if (kind != recv_wr && q->sends != 0) --q->sends;
        if (q != &r.current && q->outstanding == 0) // a retired QP with nothing left: destroyed
            r.retired.erase(r.retired.begin() + (q - r.retired.data()));
    }
    bool const ok = wc.ok();
    // First, what the completion names is no longer posted (so that taking the rail down below
    // does not hand it out again); a completion of an earlier posting of it names nothing.
    bool ours = false;
    switch (kind) {
    case chunk_wr:
        if (index < chunks_.size() && chunks_[index].live && chunks_[index].rail == static_cast<int>(rail) &&
            chunks_[index].gen == gen) {
            chunks_[index].rail = -1;
            ours = true;
        }
        break;
    case message_wr:
        ours = index < window_.size() && window_.posted_on(index, static_cast<int>(rail), gen);
        break;
    case ack_wr:
        if (index < ack_rail_.size() && ack_rail_[index] == static_cast<int>(rail)) {
            ack_rail_[index] = -1;
            ours = true;
        }
        break;
    case recv_wr:
        if (index < r.slots && r.slot_on[index] == gen) {
            r.slot_on[index] = -1;
            ours = true;
        }
        break;
    }
    // Any failure on the QP that carries the rail (a flush too: the QP is in ERR) takes it down.
    if (!ok && current) rail_down(rail, wc.error_code());
    if (!ours) return;
    switch (kind) {
    case chunk_wr: {
        chunk& c = chunks_[index];
        if (c.cancelled) { // its WRITE failed already
            free_chunk(index);
            return;
        }
        if (!ok) {
            if (refused(wc.status()))
                fail_write(c.write, wc.error_code());
            else
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
        for (std::uint32_t i : w.chunks)
            free_chunk(i);
        writes_.erase(id);
        return;
    }
    case message_wr:
        if (ok) {
            r.counters.bytes += window_[index].length;
            ++r.counters.operations;
            window_.completed(index);
        } else if (refused(wc.status())) {
            broken("the peer refused a message (" + wc.error_code().message() +
                   "): its receive buffers do not hold "
                   "this side's messages");
        } else {
            window_.failed(index);
        }
        return;
    case ack_wr:
        if (ok)
            ++r.counters.operations;
        else
            ack_sent_ = 0; // lost: the next poll says it again
        return;
    case recv_wr:
        // A message that arrived is taken whatever QP it arrived on (the peer saw it delivered);
        // the buffer then goes on the QP that carries the rail, once that one can take messages.
        if (ok) on_arrival(rail, index, wc.byte_len());
        if (r.current.qp && r.current.connected && r.state != rail_state::down && r.slot_on[index] < 0) {
            try {
                post_recv_slot(rail, index);
            } catch (rdmacxx::error const& e) {
                rail_down(rail, e.code());
            }
        }
        return;
    }
}

inline void connection::on_arrival(std::size_t rail, std::uint32_t slot, std::uint32_t bytes) {
    detail::rail& r = *rails_[rail];
    std::span<std::byte const> const m{r.recv_bytes.data() + slot * r.slot_size,
                                       std::min<std::size_t>(bytes, r.slot_size)};
    message_header h;
    try {
        h = message_header::read(m);
    } catch (rdmacxx::error const& e) {
        broken(e.what());
        return;
    }
    if (!window_.acknowledge(h.ack)) {
        broken("the peer acknowledged message " + std::to_string(h.ack) + ", which this side has not sent");
        return;
    }
    if (h.kind == message_kind::ack) return;
    switch (received_.take(h, m.subspan(message_header::wire_size, h.length))) {
    case detail::receive_window::arrival::duplicate:
        ++duplicates_;
        return;
    case detail::receive_window::arrival::out_of_window:
        broken("message " + std::to_string(h.seq) + " is beyond the receive window");
        return;
    case detail::receive_window::arrival::accepted:
        deliver();
        return;
    }
}

// Hands over the messages that are next in order; a control message becomes a step, applied
// once every CQ is reaped.
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
    if (h.kind == message_kind::notice) {
        if (payload.size() != 16) {
            broken("a corrupt WRITE notice");
            return;
        }
        event e{};
        e.what = event::kind::write_arrived;
        e.id = rdmacxx::detail::wire::get<8>(payload.data());
        e.bytes = static_cast<std::size_t>(rdmacxx::detail::wire::get<8>(payload.data() + 8));
        e.imm = h.imm;
        events_.push_back(e);
        return;
    }
    if (h.rail >= rails_.size()) {
        broken("a control message about rail " + std::to_string(h.rail) + ", which does not exist");
        return;
    }
    if (h.imm != epoch_ || renewed_) return; // of the connection before the last renew(), or during one
    bool const with_endpoint = h.kind == message_kind::request || h.kind == message_kind::reply;
    if (payload.size() != (with_endpoint ? 2 + endpoint::wire_size : 2)) {
        broken("a corrupt control message");
        return;
    }
    step s{h.kind, h.rail, static_cast<std::uint16_t>(rdmacxx::detail::wire::get<2>(payload.data())), std::nullopt};
    if (with_endpoint) try {
            s.peer = endpoint::from_bytes(payload.subspan(2));
        } catch (rdmacxx::error const& e) {
            broken(e.what());
            return;
        }
    steps_.push_back(s);
}

// The rebuilds' steps, once every CQ has been reaped.
inline void connection::apply_steps() {
    while (!steps_.empty() && !broken_) {
        step const s = steps_.front();
        steps_.pop_front();
        detail::rail& r = *rails_[s.rail];
        switch (s.kind) {
        case message_kind::ask: // to the leader: the follower's port is active again
            if (!leader_) break;
            // A rebuild under way goes on, unless the follower says it could not take its request
            // (its port was down then): then one begins anew.
            if (r.state == rail_state::rebuilding && s.rebuild != r.rebuild) break;
            if (r.state == rail_state::up) rail_down(s.rail, std::make_error_code(std::errc::connection_reset));
            start_rebuild(s.rail);
            break;
        case message_kind::request: { // to the follower: the leader's new QP
            if (leader_ || r.dead) break;
            if (r.state == rail_state::up) rail_down(s.rail, std::make_error_code(std::errc::connection_reset));
            try {
                if (rails_up() == 0 || !r.ctx.query_port(r.spec_.port).active()) {
                    r.ignored = s.rebuild; // not yet: it asks when its port is back
                    break;
                }
                r.port = end_port{r.ctx, r.spec_.port}; // the GID may have changed
                take_down_qp(s.rail);
                new_qp(r);
                r.rebuild = s.rebuild;
                peer_[s.rail] = *s.peer;
                r.current.qp->connect(*r.port, peer_[s.rail], opt_.settings);
                r.current.connected = true;
                post_receives(s.rail);
            } catch (rdmacxx::error const&) { // the port went again: it asks when it is back
                r.ignored = s.rebuild;
                take_down_qp(s.rail);
                break;
            }
            r.state = rail_state::rebuilding;
            r.rebuild_started = std::chrono::steady_clock::now();
            send_endpoint(message_kind::reply, s.rail);
            break;
        }
        case message_kind::reply: // to the leader: the follower's new QP, connected to ours
            if (!leader_ || r.state != rail_state::rebuilding || s.rebuild != r.rebuild) break;
            try {
                peer_[s.rail] = *s.peer;
                r.current.qp->connect(*r.port, peer_[s.rail], opt_.settings);
                r.current.connected = true;
                post_receives(s.rail);
            } catch (rdmacxx::error const& e) {
                rail_down(s.rail, e.code());
                break;
            }
            r.state = rail_state::up;
            ++r.counters.rebuilds;
            events_.push_back(event{event::kind::rail_up, 0, static_cast<std::uint32_t>(s.rail), 0, 0, {}, {}});
            {
                std::array<std::byte, 2> p{};
                rdmacxx::detail::wire::put<2>(p.data(), r.rebuild);
                control(message_kind::done, s.rail, p, epoch_);
            }
            break;
        case message_kind::done: // to the follower: both sides connected
            if (leader_ || r.state != rail_state::rebuilding || s.rebuild != r.rebuild) break;
            r.state = rail_state::up;
            ++r.counters.rebuilds;
            events_.push_back(event{event::kind::rail_up, 0, static_cast<std::uint32_t>(s.rail), 0, 0, {}, {}});
            break;
        default:
            break;
        }
    }
}

// Moves rail `rail`'s QP to ERR and reaps what was on it, so that every message that arrived on
// it is taken before a new QP reuses its receive buffers; what was posted on it comes back
// flushed and goes to the rails that are up.
inline void connection::take_down_qp(std::size_t rail) {
    detail::rail& r = *rails_[rail];
    r.state = rail_state::down; // replaced deliberately: its flushes are no news
    if (!r.current.qp) return;
    try {
        r.current.qp->to_error();
    } catch (rdmacxx::error const&) { // the device is gone: nothing of it will complete
        abandon(rail);
        return;
    }
    reap(rail);
}

// Rail `rail`'s requests will never complete (its device is gone): what they carried goes to the
// other rails, and its QPs are forgotten.
inline void connection::abandon(std::size_t rail) {
    for (std::uint32_t i = 0; i < chunks_.size(); ++i)
        if (chunks_[i].live && chunks_[i].rail == static_cast<int>(rail)) {
            chunks_[i].rail = -1;
            if (chunks_[i].cancelled)
                free_chunk(i);
            else
                waiting_chunks_.push_front(i);
        }
    for (std::uint32_t i = 0; i < window_.size(); ++i)
        if (window_[i].st == detail::send_window::state::posted && window_[i].rail == static_cast<int>(rail))
            window_.failed(i);
    for (int& a : ack_rail_)
        if (a == static_cast<int>(rail)) a = -1;
    detail::rail& r = *rails_[rail];
    std::fill(r.slot_on.begin(), r.slot_on.end(), -1);
    r.retired.clear();
    r.current.outstanding = 0;
    r.current.sends = 0;
}

inline void connection::free_chunk(std::uint32_t i) {
    chunks_[i].live = false;
    chunks_[i].cancelled = false;
    chunks_[i].rail = -1;
    free_chunks_.push_back(i);
}

// A WRITE the peer refused: reported, its chunks dropped (those still posted are ignored when
// they come back).
inline void connection::fail_write(std::uint64_t id, std::error_code why) {
    auto const it = writes_.find(id);
    if (it == writes_.end()) return;
    for (std::uint32_t i : it->second.chunks) {
        if (chunks_[i].rail < 0)
            free_chunk(i); // waiting: no posting of it is left (waiting_chunks_ drops it when it comes up)
        else
            chunks_[i].cancelled = true; // posted: freed when it comes back
    }
    event e{};
    e.what = event::kind::write_failed;
    e.id = id;
    e.bytes = it->second.length;
    e.reason = why;
    events_.push_back(e);
    writes_.erase(it);
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
        } catch (rdmacxx::error const&) {
            abandon(rail);
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
    if (!leader_ || rails_up() == 0 || r.dead || renewed_) return;
    try {
        if (!r.ctx.query_port(r.spec_.port).active()) return;
        r.port = end_port{r.ctx, r.spec_.port}; // the GID may have changed
        take_down_qp(rail);
        new_qp(r);
    } catch (rdmacxx::error const&) {
        return; // tried again later
    }
    ++r.rebuild;
    r.state = rail_state::rebuilding;
    r.rebuild_started = std::chrono::steady_clock::now();
    send_endpoint(message_kind::request, rail);
}

inline void connection::on_port_active(std::size_t rail) {
    if (rails_[rail]->state != rail_state::down || rails_[rail]->dead || renewed_) return; // up, or a rebuild under way
    if (leader_) {
        start_rebuild(rail);
    } else if (rails_up() != 0) { // with the last request it could not take
        std::array<std::byte, 2> p{};
        rdmacxx::detail::wire::put<2>(p.data(), rails_[rail]->ignored);
        control(message_kind::ask, rail, p, epoch_);
    }
}

// What time brings: rebuilds that take too long are given up, and a rail down with its port
// active is tried again every `rebuild_retry` (a fault that raised no port event on this side).
inline void connection::tick() {
    if (!connected_) return;
    auto const now = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < rails_.size(); ++k) {
        detail::rail& r = *rails_[k];
        if (r.state == rail_state::rebuilding && now - r.rebuild_started > opt_.rebuild_timeout)
            rail_down(k, std::make_error_code(std::errc::timed_out)); // the half-made QP to ERR; tried again
        if (r.state == rail_state::down && now - r.down_at > opt_.rebuild_retry && rails_up() != 0) {
            r.down_at = now;
            try {
                if (r.ctx.query_port(r.spec_.port).active()) on_port_active(k);
            } catch (rdmacxx::error const&) { // the device is gone
            }
        }
    }
}

} // namespace multirail
} // namespace v0
} // namespace rdmacxx
/// @endcond
