// rdmacxx-perf's bandwidth tests, as perftest runs them: the client streams -n messages (or for
// -D seconds) of one size, at most -t outstanding, -l per post (one chain, one doorbell), one in
// -Q signaled; a signaled completion retires every request before it. With -b both sides
// stream. send_bw's receiver keeps -r receives posted and refills them a batch at a time, with
// one ibv_post_recv per batch. The figures are the sender's: messages over the time from the
// first post to the last completion; the peak is the best rate over a tenth of the run.

#include "session.hpp"
#include "timer.hpp"

#include <array>

namespace perf {
namespace {

// The best rate (messages per second) over any stretch of at least `window` messages.
double peak_rate(std::vector<std::pair<std::uint64_t, std::uint64_t>> const& marks, std::uint64_t window) {
    double best = 0;
    std::size_t i = 0;
    for (std::size_t j = 1; j < marks.size(); ++j) {
        while (i + 1 < j && marks[j].second - marks[i + 1].second >= window)
            ++i;
        std::uint64_t const n = marks[j].second - marks[i].second;
        double const dt = micros(marks[i].first, marks[j].first) / 1e6;
        if (n >= window && dt > 0) best = std::max(best, static_cast<double>(n) / dt);
    }
    return best;
}

// The sending side of one size: `make(k)` builds request k (its id and signaled flag are set
// here). Returns messages sent, seconds, and the peak rate; `poll_receives` runs between posts
// (the receiving side of a bidirectional send_bw).
template <class Completion, class Make, class Receive>
std::tuple<std::uint64_t, double, double> stream(session<Completion>& s, std::size_t, Make const& make, watchdog& dog,
                                                 Receive const& poll_receives) {
    using request = decltype(make(std::uint64_t{}));
    options const& o = s.opt;
    bool const timed = o.duration_s > 0;
    std::uint64_t total = timed ? ~std::uint64_t{0} : o.iterations;
    std::uint64_t posted = 0, completed = 0;
    std::vector<request> chain;
    chain.reserve(o.post_list);
    std::array<rx::work_completion, 16> wc;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> marks; // (ticks, completed)
    marks.reserve(timed ? 1 << 16 : o.iterations / o.cq_mod + 2);
    (void)ticks_per_us(); // calibrated before the run
    auto const start = ticks();
    auto const end = start + static_cast<std::uint64_t>(o.duration_s * 1e6 * ticks_per_us());
    marks.emplace_back(start, 0);
    while (completed < total) {
        std::uint64_t const n = std::min<std::uint64_t>(o.post_list, total - posted);
        if (n != 0 && posted - completed + n <= o.tx_depth) {
            chain.clear();
            for (std::uint64_t k = posted; k < posted + n; ++k)
                chain.push_back(make(k).id(k + 1).signaled((k + 1) % o.cq_mod == 0 || k + 1 == total));
            if (chain.size() == 1)
                s.qp.post(chain.front());
            else
                s.qp.post(std::span{chain}); // chained max_chain (64) at a time: one doorbell each
            posted += n;
            continue;
        }
        poll_receives();
        std::size_t const got = s.send_cq.poll(wc);
        if (got == 0) {
            (void)dog.idle();
            continue;
        }
        dog.moved();
        for (std::size_t k = 0; k < got; ++k) {
            wc[k].throw_if_error();
            completed = std::max(completed, wc[k].wr_id());
        }
        auto const now = ticks();
        marks.emplace_back(now, completed);
        if (timed && total == ~std::uint64_t{0} && now >= end) // time is up: finish on a signaled request
            total = posted % o.cq_mod == 0 ? posted : std::max(posted, (posted / o.cq_mod + 1) * o.cq_mod);
    }
    double const seconds = micros(start, marks.back().first) / 1e6;
    return {completed, seconds, peak_rate(marks, std::max<std::uint64_t>(completed / 10, o.cq_mod))};
}

// The receiving side of send_bw: takes the receives that completed and refills them, one
// ibv_post_recv per batch. Returns how many completed.
template <class Completion>
std::size_t take_receives(session<Completion>& s, std::span<rx::work_completion> wc,
                          std::span<rx::recv<> const> refill) {
    std::size_t const got = s.recv_cq.poll(wc);
    for (std::size_t k = 0; k < got; ++k)
        wc[k].throw_if_error();
    if (got != 0) s.qp.post_recv(refill.first(got));
    return got;
}

template <class Completion, class Make>
void bandwidth(session<Completion>& s, std::size_t size, Make const& make, report& rep) {
    options const& o = s.opt;
    bool const client = o.server.has_value();
    bool const sends = client || o.bidirectional;
    bool const timed = o.duration_s > 0;
    bool const receives = o.op == verb::send && (!client || o.bidirectional);
    watchdog dog(s.oob, timed && (!client || o.bidirectional));
    std::array<rx::work_completion, 16> wc;
    std::vector<rx::recv<>> refill(wc.size(), rx::recv{s.receive_half(s.max_size)});
    std::uint64_t received = 0;
    auto const poll_receives = [&] {
        if (receives) received += take_receives(s, std::span{wc}, std::span<rx::recv<> const>{refill});
    };
    std::uint64_t sent = 0;
    double seconds = 0, peak = 0;
    if (sends) {
        std::tie(sent, seconds, peak) = stream(s, size, make, dog, poll_receives);
        if (timed) s.oob.send_pair(sent, 0);
    }
    if (receives) { // the rest of the peer's messages
        for (;;) {
            std::uint64_t const expected =
                timed ? (dog.peer_total() ? *dog.peer_total() : ~std::uint64_t{0}) : o.iterations;
            if (received >= expected) break;
            if (std::size_t got = take_receives(s, std::span{wc}, std::span<rx::recv<> const>{refill}); got != 0) {
                received += got;
                dog.moved();
            } else {
                (void)dog.idle(Completion::uses_channel);
            }
        }
    } else if (timed && (!client || o.bidirectional)) {
        (void)dog.wait_peer_total();
    }
    double rate = seconds > 0 ? static_cast<double>(sent) / seconds : 0;
    std::uint64_t messages = sent;
    if (o.bidirectional) { // the client reports both directions, as perftest does
        if (!client) {
            s.oob.send_pair(sent, static_cast<std::uint64_t>(seconds * 1e9));
        } else {
            auto const [theirs, ns] = s.oob.receive_pair(s.barrier_timeout());
            if (ns > 0) {
                double const their_rate = static_cast<double>(theirs) / (static_cast<double>(ns) / 1e9);
                rate += their_rate;
                peak += their_rate;
            }
            messages += theirs;
        }
    }
    if (client) {
        bandwidth_row r;
        r.bytes = size;
        r.iterations = messages;
        r.msg_rate = rate;
        r.avg_bps = rate * static_cast<double>(size);
        r.peak_bps = std::max(peak, rate) * static_cast<double>(size);
        rep.add(r);
    }
}

} // namespace

template <class Completion>
void run_bandwidth(session<Completion>& s, report& rep) {
    for (std::size_t size : s.opt.sizes) {
        s.oob.barrier();
        switch (s.opt.op) {
        case verb::send: {
            auto const msg = rx::send{s.send_half(size)}.inlined(s.inlined(size));
            bandwidth(
                s, size, [&](std::uint64_t) { return msg; }, rep);
            break;
        }
        case verb::write: {
            auto const msg = rx::write{s.send_half(size), s.peer_receive_half(size)}.inlined(s.inlined(size));
            bandwidth(
                s, size, [&](std::uint64_t) { return msg; }, rep);
            break;
        }
        case verb::read: {
            auto const msg = rx::read{s.receive_half(size), s.peer.buffer.first(size)};
            bandwidth(
                s, size, [&](std::uint64_t) { return msg; }, rep);
            break;
        }
        case verb::atomic: {
            rx::remote_span<std::uint64_t> const target{s.peer.buffer.address(), 1, s.peer.buffer.rkey()};
            auto const msg = rx::fetch_add{s.mr.template span<std::uint64_t>(0, 1), target, 1};
            bandwidth(
                s, size, [&](std::uint64_t) { return msg; }, rep);
            break;
        }
        }
        s.oob.barrier(s.barrier_timeout());
    }
}

template void run_bandwidth(session<rx::busy_poll>&, report&);
template void run_bandwidth(session<rx::event_driven>&, report&);

} // namespace perf
