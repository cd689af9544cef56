#pragma once
// rdmacxx-perf's resources for one run: the device, one RC QP with its own send and receive CQ,
// one registered buffer (a send half and a receive half, each as large as the largest message),
// the out-of-band channel, and the watchdog that bounds every wait. Written only against the
// public rdmacxx headers.

#include "exchange.hpp"
#include "options.hpp"
#include "report.hpp"
#include "timer.hpp"

#include "rdmacxx/rdmacxx.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

namespace perf {

namespace rx = rdmacxx;

/// Bounds every wait: a wait that sees no progress for `stall_limit` throws; in a timed run (-D)
/// it also notices the peer's "done" on the out-of-band channel. It reads the TSC (never
/// clock_gettime(2), a system call under emulation) once per 1024 empty polls, never on the path
/// that finds work.
class watchdog {
public:
    watchdog(channel& oob, bool listen_for_stop) : oob_(&oob), listen_(listen_for_stop) {}

    /// Called by a wait that found nothing; returns true when the peer has ended a timed run.
    /// @throws std::runtime_error after `stall_limit` without progress.
    bool idle(bool now = false) {
        if (!now && (++spins_ & 1023U) != 0) return false;
        std::uint64_t const t = ticks();
        if (moved_) {
            moved_ = false;
            stall_until_ = t + stall_ticks();
        } else if (t > stall_until_) {
            throw std::runtime_error("no progress for " + std::to_string(stall_limit.count()) +
                                     " s: is the peer still running the same test?");
        }
        if (listen_ && !peer_total_)
            if (auto p = oob_->try_receive_pair()) peer_total_ = p->first;
        return peer_total_.has_value();
    }
    /// Records progress.
    void moved() noexcept { moved_ = true; }
    /// The peer's count of a timed run, once it has sent it.
    [[nodiscard]] std::optional<std::uint64_t> const& peer_total() const noexcept { return peer_total_; }
    /// Takes the peer's count from the channel when it has not come yet (blocking, bounded).
    std::uint64_t wait_peer_total() {
        if (!peer_total_) peer_total_ = oob_->receive_pair(600).first;
        return *peer_total_;
    }

    static constexpr std::chrono::seconds stall_limit{30};

private:
    static std::uint64_t stall_ticks() {
        return static_cast<std::uint64_t>(static_cast<double>(stall_limit.count()) * 1e6 * ticks_per_us());
    }

    channel* oob_;
    bool listen_;
    bool moved_ = true;
    std::uint32_t spins_ = 0;
    std::uint64_t stall_until_ = 0;
    std::optional<std::uint64_t> peer_total_;
};

/// Waits for completions on `cq` into `out`: busy-polls, or sleeps on the channel (-e) 10 ms
/// at a time. Returns 0 only when `dog` says the peer ended a timed run.
template <class Completion>
std::size_t next(rx::completion_queue<Completion>& cq, std::span<rx::work_completion> out, watchdog& dog) {
    for (;;) {
        if constexpr (Completion::uses_channel) {
            if (std::size_t n = cq.wait(out, std::chrono::milliseconds{10}); n != 0) {
                dog.moved();
                return n;
            }
            if (dog.idle(true)) return 0;
        } else {
            if (std::size_t n = cq.poll(out); n != 0) {
                dog.moved();
                return n;
            }
            if (dog.idle()) return 0;
        }
    }
}

/// The largest inline payload a QP on `pd` can be created with, up to `want` (the device's
/// limit is reported per QP only: this creates probe QPs, a binary search).
template <class Completion>
std::uint32_t probe_inline(rx::protection_domain& pd, rx::completion_queue<Completion>& cq, std::uint32_t want) {
    std::uint32_t lo = 0, hi = want; // lo works; find the largest that does
    auto works = [&](std::uint32_t n) {
        try {
            rx::queue_pair<rx::rc, Completion> q(pd, cq, cq,
                                                 {.max_send_wr = 1, .max_recv_wr = 1, .max_inline_data = n});
            return true;
        } catch (rx::error const&) {
            return false;
        }
    };
    if (works(hi)) return hi;
    while (hi - lo > 1) {
        std::uint32_t const mid = lo + (hi - lo) / 2;
        (works(mid) ? lo : hi) = mid;
    }
    return lo;
}

/// A buffer aligned to a page, for registration.
struct page_buffer {
    explicit page_buffer(std::size_t bytes)
        : size((bytes + 4095) / 4096 * 4096), data(static_cast<std::byte*>(std::aligned_alloc(4096, size))) {
        if (!data) throw std::bad_alloc();
        std::fill_n(data.get(), size, std::byte{0});
    }
    struct free_deleter {
        void operator()(std::byte* p) const noexcept { std::free(p); }
    };
    std::size_t size;
    std::unique_ptr<std::byte, free_deleter> data;
};

/// Everything one run needs, connected and ready: after construction both QPs are in RTS and
/// the receives of a SEND test are posted.
template <class Completion>
struct session {
    using qp_type = rx::queue_pair<rx::rc, Completion>;

    options const& opt;
    std::size_t max_size;
    rx::device_list devices;
    std::string device_name;
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    page_buffer buffer;
    rx::memory_region mr;
    rx::completion_queue<Completion> send_cq;
    rx::completion_queue<Completion> recv_cq;
    std::uint32_t inline_size;
    qp_type qp;
    channel oob;
    setup_message peer;
    rx::qp_settings copt;
    std::uint64_t sent = 0; ///< sends or writes posted so far (the -Q count runs across sizes)

    explicit session(options const& o)
        : opt(o), max_size(*std::max_element(o.sizes.begin(), o.sizes.end())), device_name(pick_device(devices, o)),
          ctx(devices.find(device_name).open()), port(ctx, o.ib_port, o.gid_index), pd(ctx),
          buffer(2 * std::max<std::size_t>(max_size, 8)), mr(register_buffer()),
          send_cq(ctx, static_cast<int>(send_depth() + 1)), recv_cq(ctx, static_cast<int>(o.rx_depth + 1)),
          inline_size(o.inline_size ? *o.inline_size : probe_inline(pd, send_cq, 1024)),
          qp(pd, send_cq, recv_cq,
             {.max_send_wr = send_depth(), .max_recv_wr = o.rx_depth, .max_inline_data = inline_size}),
          oob(channel::open(o.server, o.port, o.server ? 60 : 600)) {
        copt.remote_access = rx::access::remote_write | rx::access::remote_read;
        if (o.op == verb::atomic) copt.remote_access = copt.remote_access | rx::access::remote_atomic;
        if (o.mtu != 0) copt.path_mtu = rx::mtu_from_bytes(o.mtu);
        copt.rnr_retry_count = rx::rnr_retry_infinite; // a receiver that falls behind slows a stream, never fails it
        qp.to_init(port, copt);
        if (o.op == verb::send)
            for (std::uint32_t k = 0; k < o.rx_depth; ++k)
                qp.post_recv(rx::recv{receive_half(max_size)});
        setup_message mine;
        mine.test = static_cast<std::uint8_t>((o.what == kind::latency ? 0 : 4) + static_cast<int>(o.op));
        mine.flags = static_cast<std::uint8_t>((o.bidirectional ? 1 : 0) | (o.duration_s > 0 ? 2 : 0));
        mine.max_size = max_size;
        mine.iterations = o.duration_s > 0 ? 0 : o.iterations;
        mine.endpoint = qp.local_endpoint(port, copt);
        mine.buffer = mr.remote();
        peer = oob.swap(mine);
        qp.to_rtr(port, peer.endpoint, copt);
        qp.to_rts(copt);
        oob.barrier(); // both QPs in RTS before anyone sends
    }

    /// The QP's send queue depth: -t, and room for a latency test's -Q unsignaled sends.
    [[nodiscard]] std::uint32_t send_depth() const noexcept {
        return opt.what == kind::latency ? std::max(opt.tx_depth, opt.cq_mod) : opt.tx_depth;
    }
    /// The first `n` bytes of the send half.
    [[nodiscard]] rx::local_span<std::byte> send_half(std::size_t n) const { return mr.span(0, n); }
    /// The first `n` bytes of the receive half.
    [[nodiscard]] rx::local_span<std::byte> receive_half(std::size_t n) const {
        return mr.span(std::max<std::size_t>(max_size, 8), n);
    }
    /// The first `n` bytes of the peer's receive half.
    [[nodiscard]] rx::remote_span<std::byte> peer_receive_half(std::size_t n) const {
        return peer.buffer.subspan(std::max<std::size_t>(max_size, 8), n);
    }
    /// Whether a message of `n` bytes goes inline.
    [[nodiscard]] bool inlined(std::size_t n) const noexcept { return n <= inline_size; }
    /// The path MTU in bytes.
    [[nodiscard]] std::uint32_t mtu_bytes() const noexcept { return qp.path_mtu_bytes(); }
    /// The GID the QP sends from.
    [[nodiscard]] std::string gid_text() const { return port.gid().to_string(); }
    /// Seconds a barrier may wait: the whole run may be in between.
    [[nodiscard]] int barrier_timeout() const noexcept { return 600 + static_cast<int>(opt.duration_s); }

private:
    static std::string pick_device(rx::device_list const& devs, options const& o) {
        if (devs.empty()) throw std::runtime_error("no RDMA device found (" + devs.describe() + ")");
        return o.device.empty() ? std::string{devs[0].name()} : std::string{devs.find(o.device).name()};
    }
    rx::memory_region register_buffer() {
        return pd.register_memory(std::span{buffer.data.get(), buffer.size},
                                  rx::access::local_write | rx::access::remote_write | rx::access::remote_read |
                                      (opt.op == verb::atomic ? rx::access::remote_atomic : rx::access::none));
    }
};

/// The latency tests (latency.cpp).
template <class Completion>
void run_latency(session<Completion>& s, report& rep);
/// The bandwidth tests (bandwidth.cpp).
template <class Completion>
void run_bandwidth(session<Completion>& s, report& rep);

} // namespace perf
