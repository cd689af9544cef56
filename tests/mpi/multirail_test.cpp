// A multi-rail connection across two nodes with two rails each (tools/softroce --nodes 2 --rails 2:
// rxe0 on eth0 and rxe1 on eth1, each rail its own switch), launched by mpirun with one rank per
// node (tests/mpi/main.cpp): the addresses and remote regions cross over the MPI bootstrap. Rank 0
// (node 1) writes and sends, rank 1 (node 2) receives and checks every byte; the faults are made
// on node 2's links (ssh node2 ip link ...), so that node 1 has no port event and finds a rail
// down by its failed completions, within the bound its QP settings imply. Every wait is bounded.
// RDMACXX_MULTIRAIL_BYTES sets the striped transfer's size (default 32 MiB).
#include "rdmacxx/bootstrap/mpi.hpp"
#include "rdmacxx/multirail.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace rx = rdmacxx;
namespace mr = rdmacxx::multirail;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

std::vector<mr::rail_spec> node_rails() {
    char const* devices = std::getenv("RDMACXX_DEVICES");
    std::vector<mr::rail_spec> out = mr::parse_rails(devices != nullptr ? devices : "");
    REQUIRE_MESSAGE(out.size() == 2,
                    "needs two rails on every node: tools/softroce --nodes 2 --rails 2 (RDMACXX_DEVICES '"
                        << (devices != nullptr ? devices : "") << "')");
    return out;
}

// Runs `command` on node 2 from node 1 (rank 0), through the run's ssh.
void on_node2(std::string const& command) {
    char const* ssh = std::getenv("RDMACXX_SSH");
    std::string const cmd = std::string{ssh != nullptr ? ssh : "ssh"} + " node2 '" + command + "'";
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd << " failed");
}

// Fills `s` with a pattern of `seed`.
void pattern(std::span<std::byte> s, unsigned seed) {
    for (std::size_t i = 0; i < s.size(); ++i)
        s[i] = static_cast<std::byte>((i * 131 + seed * 7 + i / 4099) & 0xff);
}

// One side: the connection, the bootstrap, what poll reported.
struct side {
    rx::mpi_bootstrap boot;
    mr::connection conn{node_rails()};
    std::vector<mr::event> seen;
    std::vector<std::uint32_t> messages; // the first 4 bytes of each message received, in order
    std::size_t wrong_imm = 0;           // messages whose immediate was not their number
    steady::time_point down_seen[2]{};   // when a poll first reported each rail down
    steady::time_point up_seen[2]{};

    side() {
        auto const mine = conn.address();
        std::vector<std::byte> all(mine.size() * 2);
        boot.allgather(mine, all);
        conn.connect(std::span{all}.subspan(mine.size() * static_cast<std::size_t>(1 - boot.rank()), mine.size()));
        boot.barrier(); // both connected before either polls
    }
    [[nodiscard]] bool writer() const { return boot.rank() == 0; }

    // Polls until `done()`, at most `bound`.
    void pump(std::function<bool()> const& done, std::chrono::milliseconds bound, char const* what) {
        auto const end = steady::now() + bound;
        std::array<mr::event, 64> ev{};
        while (!done()) {
            REQUIRE_MESSAGE(steady::now() < end, std::string{what} << ": not within " << bound.count() << " ms (rank "
                                                                   << boot.rank() << ")");
            for (std::size_t n = conn.poll(ev), k = 0; k < n; ++k) {
                mr::event const& e = ev[k];
                seen.push_back(e);
                if (e.what == mr::event::kind::message && e.data.size() >= 4) {
                    std::uint32_t v = 0;
                    std::memcpy(&v, e.data.data(), 4);
                    messages.push_back(v);
                    if (e.imm != v) ++wrong_imm; // each message is sent with its number as its immediate
                }
                if (e.what == mr::event::kind::rail_down && e.rail < 2 && down_seen[e.rail] == steady::time_point{})
                    down_seen[e.rail] = steady::now();
                if (e.what == mr::event::kind::rail_up && e.rail < 2) up_seen[e.rail] = steady::now();
            }
        }
    }
    // Polls for `d` more: what this side released reaches the peer (an acknowledgement goes
    // within 200 µs), which may be waiting for it before the next barrier.
    void linger(std::chrono::milliseconds d = 1s) {
        auto const until = steady::now() + d;
        pump([&] { return steady::now() > until; }, d + 5s, "acknowledging");
    }
    [[nodiscard]] std::size_t count(mr::event::kind k) const {
        return static_cast<std::size_t>(
            std::count_if(seen.begin(), seen.end(), [k](auto const& e) { return e.what == k; }));
    }
};

// Rank 0 writes `bytes` in 1 MiB striped WRITEs into rank 1's region, calling `midway()` once
// half are posted; rank 1 checks every byte. Both return once rank 1 has every WRITE.
void transfer(side& s, std::size_t bytes, unsigned seed, std::function<void()> const& midway = {}) {
    constexpr std::size_t message = 1u << 20;
    std::size_t const writes = bytes / message;
    std::vector<std::byte> mem(bytes);
    if (s.writer()) pattern(mem, seed);
    auto const reg = s.conn.register_memory(mem, rx::access::local_write | rx::access::remote_write);
    // Rank 1's remote region to rank 0.
    auto const mine = reg.remote().to_bytes();
    std::vector<std::byte> all(mine.size() * 2);
    s.boot.allgather(mine, all);
    auto const theirs = mr::remote_region::from_bytes(std::span{all}.subspan(mine.size(), mine.size()));
    std::size_t const arrived0 = s.count(mr::event::kind::write_arrived);
    if (s.writer()) {
        for (std::size_t k = 0; k < writes; ++k) {
            (void)s.conn.write(reg, k * message, message, theirs, k * message, mr::placement::stripe(),
                               static_cast<std::uint32_t>(k));
            if (k == writes / 2 && midway) midway();
            s.pump([&] { return s.conn.writes_in_flight() <= 8; }, 120s, "striped WRITEs in flight");
        }
        s.pump([&] { return s.conn.writes_in_flight() == 0 && s.conn.messages_in_flight() == 0; }, 120s,
               "every striped WRITE done and its notice acknowledged");
    } else {
        if (midway) midway();
        s.pump([&] { return s.count(mr::event::kind::write_arrived) == arrived0 + writes; }, 180s,
               "every striped WRITE arrived");
        std::vector<std::byte> want(bytes);
        pattern(want, seed);
        CHECK_MESSAGE(std::memcmp(want.data(), mem.data(), bytes) == 0, "the striped WRITEs' bytes differ");
        s.linger(); // the writer waits for the notices' acknowledgements before the barrier
    }
    s.boot.barrier();
}

// Rank 0 sends `n` messages holding first, first + 1, ...; rank 1 checks they arrive once, in order.
void stream(side& s, std::uint32_t first, std::uint32_t n, std::function<void()> const& midway = {}) {
    if (s.writer()) {
        for (std::uint32_t k = 0; k < n; ++k) {
            std::array<std::byte, 64> m{};
            std::uint32_t const v = first + k;
            std::memcpy(m.data(), &v, 4);
            s.pump([&] { return s.conn.send(m, v); }, 60s, "room in the message window");
            if (k == n / 2 && midway) midway();
        }
        s.pump([&] { return s.conn.messages_in_flight() == 0; }, 120s, "every message acknowledged");
    } else {
        s.pump([&] { return !s.messages.empty() && s.messages.back() == first + n - 1; }, 180s,
               "every message delivered");
        s.linger();
    }
    s.boot.barrier();
}

bool in_order(std::vector<std::uint32_t> const& v) {
    for (std::size_t k = 0; k < v.size(); ++k)
        if (v[k] != k) return false;
    return true;
}

} // namespace

TEST_CASE("multirail across two nodes: striped transfer, rail 1 down on node 2 mid-transfer, rebuilt, "
          "messages through a flap, every rail down and renewed") {
    side s;
    std::size_t bytes = 32u << 20;
    if (char const* b = std::getenv("RDMACXX_MULTIRAIL_BYTES")) bytes = std::strtoull(b, nullptr, 10);

    SUBCASE("the steps, in order") {
        // 1. Striped over both rails.
        auto const t0 = steady::now();
        transfer(s, bytes, 1);
        double const secs = std::chrono::duration<double>(steady::now() - t0).count();
        if (s.writer())
            MESSAGE("striped " << (bytes >> 20) << " MiB in " << secs << " s: rail 0 " << s.conn.counters(0).bytes
                               << " bytes, rail 1 " << s.conn.counters(1).bytes << " bytes");
        if (s.writer()) {
            CHECK(s.conn.counters(0).bytes > bytes / 4);
            CHECK(s.conn.counters(1).bytes > bytes / 4);
        }

        // 2. Node 2's eth1 down in the middle of a transfer: node 1 finds rail 1 down by its failed
        // completions (no port event there), within the settings' bound.
        steady::time_point fault_start{}, fault{};
        std::uint64_t const before0 = s.conn.counters(0).bytes, before1 = s.conn.counters(1).bytes;
        transfer(s, bytes, 2, [&] {
            if (s.writer()) {
                fault_start = steady::now();
                on_node2("ip link set eth1 down");
                fault = steady::now(); // the link is down for sure
            }
        });
        if (s.writer()) {
            REQUIRE(s.down_seen[1] != steady::time_point{});
            auto const took = std::chrono::duration_cast<std::chrono::milliseconds>(s.down_seen[1] - fault);
            rx::qp_settings const q = mr::connection_options{}.settings;
            auto const bound = rx::dead_peer_bound(q.local_ack_timeout, q.retry_count);
            MESSAGE("rail 1 down on node 1 "
                    << took.count() << " ms after the ssh that took node 2's eth1 down returned ("
                    << std::chrono::duration_cast<std::chrono::milliseconds>(s.down_seen[1] - fault_start).count()
                    << " ms after it began; bound "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(bound).count()
                    << " ms + a poll); the transfer: rail 0 " << (s.conn.counters(0).bytes - before0)
                    << " bytes, rail 1 " << (s.conn.counters(1).bytes - before1) << " bytes");
            CHECK(took < bound + 1s);
            CHECK(s.conn.counters(1).failures == 1);
        }
        CHECK(s.conn.state(0) == mr::rail_state::up);

        // 3. eth1 up again: the rail is rebuilt on both sides and carries bytes again.
        steady::time_point up{};
        if (s.writer()) {
            on_node2("ip link set eth1 up");
            up = steady::now();
        }
        s.pump([&] { return s.conn.state(1) == mr::rail_state::up; }, 60s, "rail 1 rebuilt");
        if (s.writer())
            MESSAGE(
                "rail 1 rebuilt " << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - up).count()
                                  << " ms after node 2's eth1 came back up (rebuilds " << s.conn.counters(1).rebuilds
                                  << ")");
        CHECK(s.conn.counters(1).rebuilds == 1);
        s.boot.barrier();
        std::uint64_t const rail1 = s.conn.counters(1).bytes;
        transfer(s, 8u << 20, 3);
        if (s.writer()) CHECK(s.conn.counters(1).bytes > rail1);

        // 4. Messages with immediates through a flap of rail 1: exactly once, in order.
        stream(s, 0, 1'000, [&] {
            if (s.writer()) on_node2("ip link set eth1 down; sleep 1; ip link set eth1 up");
        });
        s.pump([&] { return s.conn.state(1) == mr::rail_state::up; }, 60s, "rail 1 rebuilt after the flap");
        s.boot.barrier();
        stream(s, 1'000, 500);
        if (!s.writer()) {
            CHECK(s.messages.size() == 1'500);
            CHECK_MESSAGE(in_order(s.messages), "messages lost, duplicated or out of order");
            MESSAGE("1,500 messages exactly once and in order; duplicates dropped " << s.conn.duplicates());
        }

        // 5. Every rail down (both of node 2's links, for 6 s): a typed error within the bound on
        // node 1, which keeps sending; then renewed through the bootstrap, the messages sent into the
        // outage delivered exactly once.
        steady::time_point outage{};
        if (s.writer()) {
            on_node2("(ip link set eth0 down; ip link set eth1 down; sleep 6; ip link set eth0 up; "
                     "ip link set eth1 up) >/dev/null 2>&1 &");
            outage = steady::now();
        }
        std::uint32_t next = 1'500;
        bool down = false;
        auto const end = steady::now() + 60s;
        std::array<mr::event, 64> ev{};
        while (!down) {
            REQUIRE_MESSAGE(steady::now() < end, "every rail down was not reported within 60 s");
            try {
                if (s.writer()) {
                    std::array<std::byte, 64> m{};
                    std::memcpy(m.data(), &next, 4);
                    if (s.conn.send(m, next)) ++next;
                }
                for (std::size_t n = s.conn.poll(ev), k = 0; k < n; ++k)
                    if (ev[k].what == mr::event::kind::message && ev[k].data.size() >= 4) {
                        std::uint32_t v = 0;
                        std::memcpy(&v, ev[k].data.data(), 4);
                        s.messages.push_back(v);
                        if (ev[k].imm != v) ++s.wrong_imm;
                    }
            } catch (mr::rails_down_error const& e) {
                down = true;
                CHECK(e.code() == std::errc::network_down);
            }
        }
        if (s.writer())
            MESSAGE("every rail down on node 1 "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - outage).count()
                    << " ms after node 2's links went down; " << (next - 1'500) << " messages sent into it");
        // Node 2's links come back by themselves; both sides wait for every port, then renew.
        auto const ports = steady::now() + 60s;
        while (!(s.conn.port_active(0) && s.conn.port_active(1)))
            REQUIRE_MESSAGE(steady::now() < ports, "the ports did not come back within 60 s");
        s.boot.barrier(); // MPI's own TCP over eth0 carries on after the outage
        s.conn.renew();
        auto const mine = s.conn.address();
        std::vector<std::byte> all(mine.size() * 2);
        s.boot.allgather(mine, all);
        s.conn.connect(std::span{all}.subspan(mine.size() * static_cast<std::size_t>(1 - s.boot.rank()), mine.size()));
        std::uint32_t sent = next; // the allgather below is the barrier after connect
        std::vector<std::byte> word(4);
        std::memcpy(word.data(), &sent, 4);
        std::vector<std::byte> total(8);
        s.boot.allgather(word, total);
        std::memcpy(&sent, total.data(), 4); // rank 0's count
        if (s.writer())
            s.pump([&] { return s.conn.messages_in_flight() == 0; }, 120s, "the messages of the outage acknowledged");
        else {
            s.pump([&] { return !s.messages.empty() && s.messages.back() == sent - 1; }, 120s,
                   "the messages of the outage delivered");
            s.linger();
        }
        if (!s.writer()) {
            CHECK(s.messages.size() == sent);
            CHECK_MESSAGE(in_order(s.messages), "messages lost, duplicated or out of order across the outage");
            MESSAGE(sent << " messages in all, exactly once and in order across a flap and an outage of every rail");
            CHECK(s.wrong_imm == 0);
        }
        s.boot.barrier();
        stream(s, sent, 200);
    }
}
