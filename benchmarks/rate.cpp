// Message rate, rdmacxx against raw verbs: 8-byte RDMA writes and sends, posted in chains of 1,
// 4, 16 and 64 (one doorbell each), signaling every 1, 16 and 64 requests, at most 128 in
// flight (perftest's -t 128 -l L -Q S). One iteration is a stream of 1024 messages; the `msgs`
// counter (kIsRate) is messages per second.
//
// The "rdmacxx-checked" rows post the same streams through `checked<busy_poll>` queue pairs:
// the cost of in-flight tracking.
//
// Two more rows show rdmacxx's own techniques together, against perftest's default
// configuration: "inline" rows (inline data, chains of 16, signaling every 64), and the
// "selective" row: rdmacxx::selective_signaling posting inline writes one at a time, signaling
// every 64th and waiting only when the send queue is full — its raw twin does the same
// accounting by hand.

#include "bench.hpp"

#include <string>

namespace bench {
namespace {

constexpr std::uint64_t rate_count = 1024;
constexpr std::uint32_t rate_window = 128;

template <template <class> class TwinT, std::size_t L, bool Send>
void rate(benchmark::State& st) {
    using Twin = TwinT<rx::busy_poll>;
    auto& r = rig<typename Twin::strategy>::get();
    guarded(st, [&] {
        auto const every = static_cast<std::uint32_t>(st.range(0));
        bool const inl = st.range(1) != 0;
        auto const m = Twin::make(r.a, src_off, r.b, dst_off, 8);
        auto const rb = Twin::make_recv(r.b);
        for (auto _ : st)
            stream<Twin, L, Send>(r.a, r.b, m, rb, rate_count, rate_window, every, inl);
        auto const msgs = static_cast<double>(st.iterations()) * static_cast<double>(rate_count);
        st.counters["msgs"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
        st.SetBytesProcessed(static_cast<std::int64_t>(msgs * 8));
    });
}

using qp_t = rx::queue_pair<rx::rc, rx::busy_poll>;

// rdmacxx: selective_signaling does the accounting.
void selective_lib(benchmark::State& st) {
    auto& r = rig<rx::busy_poll>::get();
    guarded(st, [&] {
        rx::selective_signaling<qp_t> ss(r.a.qp, r.a.scq, 64);
        auto const src = r.a.mr.span().subspan(src_off, 8);
        auto const dst = r.b.mr.remote().subspan(dst_off, 8);
        for (auto _ : st) {
            for (std::uint64_t i = 0; i < rate_count; ++i)
                ss.post(rx::write{src, dst}.id(i).inlined(), i + 1 == rate_count);
            ss.finish();
        }
        auto const msgs = static_cast<double>(st.iterations()) * static_cast<double>(rate_count);
        st.counters["msgs"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
        st.SetBytesProcessed(static_cast<std::int64_t>(msgs * 8));
    });
}

// Raw verbs: the same accounting by hand — a ring of signaled batch sizes, a wait for the
// oldest batch when the send queue is full.
void selective_raw(benchmark::State& st) {
    using Twin = raw_twin<rx::busy_poll>;
    auto& r = rig<rx::busy_poll>::get();
    guarded(st, [&] {
        std::uint32_t const depth = r.a.qp.capabilities().max_send_wr;
        std::uint32_t const every = 64;
        std::vector<std::uint32_t> batches(depth + 1);
        std::size_t head = 0, tail = 0;
        std::uint32_t since = 0, outstanding = 0;
        auto const m = Twin::make(r.a, src_off, r.b, dst_off, 8);
        auto retire = [&] {
            Twin::wait(r.a, false);
            outstanding -= batches[head];
            head = (head + 1) % batches.size();
        };
        for (auto _ : st) {
            for (std::uint64_t i = 0; i < rate_count; ++i) {
                while (outstanding + 1 > depth)
                    retire();
                bool const sig = i + 1 == rate_count || since + 1 == every;
                Twin::write(r.a, m, sig, true, i);
                ++outstanding;
                ++since;
                if (sig) {
                    batches[tail] = since;
                    tail = (tail + 1) % batches.size();
                    since = 0;
                }
            }
            while (outstanding != 0)
                retire();
        }
        auto const msgs = static_cast<double>(st.iterations()) * static_cast<double>(rate_count);
        st.counters["msgs"] = benchmark::Counter(msgs, benchmark::Counter::kIsRate);
        st.SetBytesProcessed(static_cast<std::int64_t>(msgs * 8));
    });
}

template <template <class> class TwinT, std::size_t L, bool Send>
void add(std::int64_t every, bool inl) {
    std::string const name =
        name_of({"rate", TwinT<rx::busy_poll>::name, Send ? "send" : "write", "chain" + std::to_string(L),
                 "sig" + std::to_string(every), inl ? "inline" : "plain"});
    benchmark::RegisterBenchmark(name.c_str(), rate<TwinT, L, Send>)
        ->Args({every, inl ? 1 : 0})
        ->Unit(benchmark::kMicrosecond);
}

template <template <class> class TwinT, bool Send>
void add_op() {
    for (std::int64_t every : {1, 16, 64}) {
        add<TwinT, 1, Send>(every, false);
        add<TwinT, 4, Send>(every, false);
        add<TwinT, 16, Send>(every, false);
        add<TwinT, 64, Send>(every, false);
    }
    add<TwinT, 16, Send>(64, true); // inline + chains of 16 + signaling every 64
    add<TwinT, 64, Send>(64, true); // as perftest -l 64 -Q 64 -I 64
}

} // namespace

void register_rate() {
    add_op<lib_twin, false>();
    add_op<raw_twin, false>();
    add_op<lib_twin, true>();
    add_op<raw_twin, true>();
    // What in-flight tracking costs, beside the rdmacxx and raw rows of the same shape.
    add<checked_twin, 1, false>(1, false);
    add<checked_twin, 16, false>(64, false);
    add<checked_twin, 1, true>(1, false);
    add<checked_twin, 16, true>(64, false);
    benchmark::RegisterBenchmark("rate/rdmacxx/write/selective64/inline", selective_lib)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("rate/raw/write/selective64/inline", selective_raw)->Unit(benchmark::kMicrosecond);
}

} // namespace bench
