// srq_pingpong: a ping-pong over several RC QPs that share one shared receive queue and one CQ,
// written with rdmacxx and modelled on rdma-core's ibv_srq_pingpong (same flags, same
// out-of-band exchange: 256 address records each way, those past -q zero).
//
//   server:  srq_pingpong [options]
//   client:  srq_pingpong [options] SERVER
//
// Each side creates -q RC QPs (default 16) on one SRQ of -r receive buffers (default 500): a
// message takes whichever buffer the SRQ hands out, whatever QP it arrives on, and the buffer
// goes back to the SRQ as soon as it is checked. The -n exchanges are spread over the QPs; every
// QP ping-pongs on its own, so all of them have a message in flight at once and their sends
// alternate on the wire. Both sides check every message they receive byte for byte (its pattern
// names the QP, the exchange and the direction) and count sends and receives per QP; a wrong
// byte, an extra message or a failed completion (a message RC could not deliver) makes the exit
// status 1.
#include "pingpong.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// The number of address records ibv_srq_pingpong exchanges whatever its -q; so the most QPs.
constexpr unsigned max_qp = 256;
// Send completions carry this bit and the QP's index; receive completions the buffer's index.
constexpr std::uint64_t send_tag = std::uint64_t{1} << 32;

// Byte `k` of exchange `seq` on QP `qp`, client to server or back.
std::byte pattern(std::size_t qp, unsigned seq, bool from_client, std::size_t k) {
    return static_cast<std::byte>((k + 13 * std::size_t{seq} + 31 * qp + (from_client ? 0U : 0x80U)) & 0xffU);
}

// The peer's records must name exactly as many QPs as ours (the same -q on both sides).
void check_records(std::vector<rx::endpoint> const& remote, unsigned num_qp) {
    std::size_t named = 0;
    for (std::size_t i = 0; i < remote.size(); ++i)
        if (remote[i].qpn != 0) {
            if (i != named)
                throw rx::argument_error("the peer's address records have a gap at " + std::to_string(named));
            ++named;
        }
    if (named != num_qp)
        throw rx::argument_error("the peer runs " + std::to_string(named) + " QPs and this side " +
                                 std::to_string(num_qp) + ": give both the same -q");
}

// What one QP has done so far.
struct qp_counts {
    unsigned quota = 0;      // exchanges this QP carries
    unsigned sent = 0;       // sends posted
    unsigned sends_done = 0; // sends completed
    unsigned received = 0;   // receives completed
    bool sending = false;    // a send is in flight: its buffer is busy
    [[nodiscard]] bool finished() const noexcept { return sends_done == quota && received == quota; }
};

template <class Completion>
int run(pingpong::options const& opt) {
    rx::device_list const devices;
    if (devices.empty()) throw std::runtime_error("no RDMA device found (" + devices.describe() + ")");
    rx::context ctx = opt.device.empty() ? devices[0].open() : devices.find(opt.device).open();
    rx::end_port const port(ctx, opt.ib_port, opt.gid_index);
    bool const is_client = opt.server.has_value();
    unsigned const num_qp = opt.num_qp;

    // One region: a send buffer per QP, then the rx_depth receive buffers of the SRQ.
    rx::protection_domain pd(ctx);
    std::vector<std::byte> storage((num_qp + std::size_t{opt.rx_depth}) * opt.size);
    rx::memory_region mr = pingpong::register_buffers(pd, storage, opt.odp);
    rx::local_span<std::byte> const all = mr.span();
    auto const send_buffer = [&](std::size_t qp) { return all.subspan(qp * opt.size, opt.size); };
    auto const recv_buffer = [&](std::size_t k) { return all.subspan((num_qp + k) * opt.size, opt.size); };

    // Destroyed in reverse: the QPs first, then the SRQ and the CQ they use.
    rx::completion_queue<Completion> cq(ctx, static_cast<int>(opt.rx_depth + num_qp));
    rx::shared_receive_queue srq(pd, opt.rx_depth);
    rx::qp_settings copt;
    copt.path_mtu = rx::mtu_from_bytes(opt.mtu);
    copt.service_level = opt.sl;
    std::vector<rx::queue_pair<rx::rc, Completion>> qps;
    qps.reserve(num_qp);
    std::unordered_map<std::uint32_t, std::size_t> index_of_qpn;
    for (std::size_t i = 0; i < num_qp; ++i) {
        qps.emplace_back(pd, cq, cq, srq, rx::qp_capabilities{.max_send_wr = 1});
        qps.back().to_init(port, copt);
        index_of_qpn.emplace(qps.back().qp_num(), i);
    }
    for (std::uint64_t k = 0; k < opt.rx_depth; ++k)
        srq.post_recv(rx::recv{recv_buffer(k)}.id(k));

    std::vector<rx::endpoint> local(max_qp); // the records past num_qp stay zero
    for (std::size_t i = 0; i < num_qp; ++i)
        local[i] = qps[i].local_endpoint(port);
    std::vector<rx::endpoint> const remote = pingpong::exchange(opt, local, [&](std::vector<rx::endpoint> const& peer) {
        check_records(peer, num_qp);
        for (std::size_t i = 0; i < num_qp; ++i) {
            qps[i].to_rtr(port, peer[i], copt);
            qps[i].to_rts(copt);
        }
    });
    std::printf("srq_pingpong (%s, %s completions) on %s, path MTU %u, %u RC QP%s sharing one SRQ (max_wr %u)\n",
                is_client ? "client" : "server", Completion::uses_channel ? "event-driven" : "busy-poll",
                port.to_string().c_str(), qps.front().path_mtu_bytes(), num_qp, num_qp == 1 ? "" : "s", srq.max_wr());
    for (std::size_t i = 0; i < num_qp; ++i)
        pingpong::print_endpoint("local ", local[i]);
    for (std::size_t i = 0; i < num_qp; ++i)
        pingpong::print_endpoint("remote", remote[i]);

    std::vector<qp_counts> counts(num_qp);
    for (std::size_t i = 0; i < num_qp; ++i)
        counts[i].quota = opt.iterations / num_qp + (i < opt.iterations % num_qp ? 1U : 0U);
    // The client sends exchange n on a QP once the echo of n - 1 is in; the server echoes
    // exchange n once it has arrived. Either waits for the QP's previous send to complete, as
    // the QP's send buffer is then free again.
    auto const may_send = [&](qp_counts const& c) {
        if (c.sending) return false;
        return is_client ? c.received == c.sent && c.sent < c.quota : c.received > c.sent;
    };
    auto const send_next = [&](std::size_t i) {
        qp_counts& c = counts[i];
        std::span<std::byte> const bytes = send_buffer(i).span();
        for (std::size_t k = 0; k < bytes.size(); ++k)
            bytes[k] = pattern(i, c.sent, is_client, k);
        qps[i].post(rx::send{send_buffer(i)}.id(send_tag | i));
        c.sending = true;
        ++c.sent;
    };
    auto const intact = [&](std::span<std::byte const> bytes, std::size_t i, unsigned seq) {
        for (std::size_t k = 0; k < bytes.size(); ++k)
            if (bytes[k] != pattern(i, seq, !is_client, k)) return false;
        return true;
    };

    auto finished = static_cast<std::size_t>(
        std::count_if(counts.begin(), counts.end(), [](qp_counts const& c) { return c.finished(); }));
    unsigned mismatches = 0;
    std::vector<rx::work_completion> wcs(opt.rx_depth + num_qp);
    auto const start = std::chrono::steady_clock::now();
    if (is_client)
        for (std::size_t i = 0; i < num_qp; ++i)
            if (may_send(counts[i])) send_next(i);
    while (finished < num_qp) {
        std::size_t const n = cq.wait(std::span{wcs});
        for (rx::work_completion const& wc : std::span{wcs}.first(n)) {
            wc.throw_if_error();
            auto const found = index_of_qpn.find(wc.qp_num());
            if (found == index_of_qpn.end())
                throw std::runtime_error("completion for unknown QPN " + std::to_string(wc.qp_num()));
            std::size_t const i = found->second;
            qp_counts& c = counts[i];
            if ((wc.wr_id() & send_tag) != 0) {
                if (wc.wr_id() != (send_tag | i) || !c.sending)
                    throw std::runtime_error("unexpected send completion on QP " + std::to_string(i));
                c.sending = false;
                ++c.sends_done;
            } else {
                if (c.received == c.quota)
                    throw std::runtime_error("QP " + std::to_string(i) + " received more than its " +
                                             std::to_string(c.quota) + " messages: give both sides the same -n");
                std::uint64_t const k = wc.wr_id();
                if (wc.byte_len() != opt.size || !intact(recv_buffer(k).span(), i, c.received)) ++mismatches;
                ++c.received;
                srq.post_recv(rx::recv{recv_buffer(k)}.id(k)); // the buffer is free again
            }
            if (may_send(c)) send_next(i);
            if (c.finished()) ++finished; // once: a finished QP has no more completions
        }
    }
    auto const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    double const bytes = 2.0 * static_cast<double>(opt.size) * opt.iterations;
    std::printf("%.0f bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, seconds, bytes * 8 / seconds / 1e6);
    std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", opt.iterations, seconds, seconds * 1e6 / opt.iterations);
    // Runs of QPs with the same counts share one entry: "QP 0-7 63/63, QP 8-15 62/62".
    std::printf("completions per QP (sends/receives):");
    for (std::size_t first = 0, last = 0; first < num_qp; first = last + 1) {
        qp_counts const& c = counts[first];
        for (last = first; last + 1 < num_qp && counts[last + 1].sends_done == c.sends_done &&
                           counts[last + 1].received == c.received;)
            ++last;
        std::printf("%s QP %zu", first == 0 ? "" : ",", first);
        if (last != first) std::printf("-%zu", last);
        std::printf(" %u/%u", c.sends_done, c.received);
    }
    std::printf("\nverified: %u of %u received messages matched byte for byte\n", opt.iterations - mismatches,
                opt.iterations);
    return mismatches == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    pingpong::options opt;
    opt.num_qp = 16;
    opt.rx_depth = 500;
    return pingpong::guarded([&] {
        if (std::optional<int> const status = pingpong::parse(argc, argv, opt, true)) return *status;
        if (opt.num_qp == 0 || opt.num_qp > max_qp)
            throw rx::argument_error("the number of QPs must be 1 to " + std::to_string(max_qp) + " (-q)");
        if (opt.num_qp > opt.rx_depth)
            throw rx::argument_error("rx-depth " + std::to_string(opt.rx_depth) + " is too small for " +
                                     std::to_string(opt.num_qp) + " QPs: each needs at least one receive (-r)");
        return opt.events ? run<rx::event_driven>(opt) : run<rx::busy_poll>(opt);
    });
}
