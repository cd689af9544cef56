// Round-trip latency, rdmacxx against raw verbs: send/recv ping-pong, RDMA write ping-pong
// polling the last byte, write-with-immediate ping-pong, RDMA read; busy-poll and event-driven.
//
// One iteration is one round trip (a → b → a; for read, one read), timed by hand
// (UseManualTime); the counters p50_us, p99_us and p999_us are round-trip quantiles in µs.
// perftest reports half a round trip for send and write, the whole read for read.
// Messages of at most 64 bytes go inline (perftest's latency tests inline small messages too).
// Requests are unsignaled except every 64th, whose completion is reaped without blocking.

#include "bench.hpp"

#include <string>

namespace bench {
namespace {

enum class op { send, write, write_imm, read };
constexpr char const* op_name(op o) {
    switch (o) {
    case op::send:
        return "send";
    case op::write:
        return "write";
    case op::write_imm:
        return "write_imm";
    case op::read:
        return "read";
    }
    return "?";
}

template <class Twin, class Completion>
void reap(typename Twin::side_t& s, signaler& sig) {
    if (sig.pending != 0) sig.pending -= static_cast<std::uint32_t>(Twin::poll(s, false));
}

template <template <class> class TwinT, class Completion, op Op>
void latency(benchmark::State& st) {
    using Twin = TwinT<Completion>;
    auto& r = rig<Completion>::get();
    guarded(st, [&] {
        auto const n = static_cast<std::size_t>(st.range(0));
        bool const inl = n <= inline_max && Op != op::read;
        auto const ab = Twin::make(r.a, src_off, r.b, Op == op::read ? src_off : dst_off, n);
        auto const ba = Twin::make(r.b, src_off, r.a, dst_off, n);
        auto const rd = Twin::make(r.a, read_off, r.b, src_off, n);
        auto const ra = Twin::make_recv(r.a), rb = Twin::make_recv(r.b);
        signaler sa{64}, sb{64};
        std::byte volatile* const a_last = r.a.at(dst_off + n - 1);
        std::byte volatile* const b_last = r.b.at(dst_off + n - 1);
        *a_last = std::byte{0};
        *b_last = std::byte{0};
        unsigned tag = 0;
        std::vector<double> samples;
        samples.reserve(1 << 16);
        for (auto _ : st) {
            auto const t0 = clock_type::now();
            if constexpr (Op == op::send || Op == op::write_imm) {
                if constexpr (Op == op::send)
                    Twin::send(r.a, ab, sa.next(), inl, 1);
                else
                    Twin::write_imm(r.a, ab, sa.next(), inl, 1);
                Twin::wait(r.b, true);
                Twin::recv(r.b, rb, 1);
                if constexpr (Op == op::send)
                    Twin::send(r.b, ba, sb.next(), inl, 2);
                else
                    Twin::write_imm(r.b, ba, sb.next(), inl, 2);
                Twin::wait(r.a, true);
                Twin::recv(r.a, ra, 2);
                reap<Twin, Completion>(r.a, sa);
                reap<Twin, Completion>(r.b, sb);
            } else if constexpr (Op == op::write) {
                tag = tag % 255 + 1;
                auto const t = static_cast<std::byte>(tag);
                r.a.mem[src_off + n - 1] = t;
                Twin::write(r.a, ab, sa.next(), inl, 1);
                while (*b_last != t) {}
                r.b.mem[src_off + n - 1] = t;
                Twin::write(r.b, ba, sb.next(), inl, 2);
                while (*a_last != t) {}
                reap<Twin, Completion>(r.a, sa);
                reap<Twin, Completion>(r.b, sb);
            } else {
                Twin::read(r.a, rd, 3);
                Twin::wait(r.a, false);
            }
            auto const t1 = clock_type::now();
            double const s = std::chrono::duration<double>(t1 - t0).count();
            st.SetIterationTime(s);
            if (samples.size() < samples.capacity()) samples.push_back(s);
        }
        while (sa.pending != 0)
            reap<Twin, Completion>(r.a, sa);
        while (sb.pending != 0)
            reap<Twin, Completion>(r.b, sb);
        settle_raw_events(r);
        std::sort(samples.begin(), samples.end());
        st.counters["p50_us"] = quantile(samples, 0.5) * 1e6;
        st.counters["p99_us"] = quantile(samples, 0.99) * 1e6;
        st.counters["p999_us"] = quantile(samples, 0.999) * 1e6;
        st.counters["bytes"] = static_cast<double>(n);
    });
}

template <template <class> class TwinT, class Completion, op Op>
void add(std::vector<std::int64_t> const& sizes) {
    char const* const strategy = Completion::uses_channel ? "event" : "busy";
    for (std::int64_t n : sizes) {
        std::string const name = name_of({"lat", TwinT<Completion>::name, op_name(Op), strategy, std::to_string(n)});
        benchmark::RegisterBenchmark(name.c_str(), latency<TwinT, Completion, Op>)
            ->Arg(n)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
    }
}

template <template <class> class TwinT>
void add_twin() {
    std::vector<std::int64_t> const busy = opts().full ? std::vector<std::int64_t>{8, 64, 512, 4096, 16384, 65536}
                                                       : std::vector<std::int64_t>{8, 512, 4096, 65536};
    std::vector<std::int64_t> const event = opts().full ? busy : std::vector<std::int64_t>{8, 4096};
    add<TwinT, rx::busy_poll, op::send>(busy);
    add<TwinT, rx::busy_poll, op::write>(busy);
    add<TwinT, rx::busy_poll, op::write_imm>(busy);
    add<TwinT, rx::busy_poll, op::read>(busy);
    add<TwinT, rx::event_driven, op::send>(event);
    add<TwinT, rx::event_driven, op::write_imm>(event);
    add<TwinT, rx::event_driven, op::read>(event);
}

} // namespace

void register_latency() {
    add_twin<lib_twin>();
    add_twin<raw_twin>();
}

} // namespace bench
