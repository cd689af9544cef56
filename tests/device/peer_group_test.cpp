// The peer group over the in-process bootstrap (threads as ranks) on one device: the mesh at 4
// and 64 ranks, the bytes each rank receives, and all or nothing when one rank fails.
#include "rdmacxx/bootstrap/peer_group.hpp"
#include "rdmacxx/bootstrap/threads.hpp"

#include "bootstrap_support.hpp"
#include "first_use_support.hpp"
#include "fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pg_test {
namespace rx = rdmacxx;

// What each rank receives while a group is made (docs/multi-node.md): n 16-byte headers and n
// records of 32 bytes (64 with UD) by allgather, one 32-byte endpoint from each rank by alltoall,
// n 8-byte statuses.
constexpr std::size_t bytes_per_rank(std::size_t n, bool with_ud) {
    return n * 16 + n * (with_ud ? 64 : 32) + n * 32 + n * 8;
}

std::byte pattern(int from, int to, std::size_t k) {
    return static_cast<std::byte>((k * 29 + static_cast<std::size_t>(from) * 11 + static_cast<std::size_t>(to) * 3) &
                                  0xff);
}

// One rank's device resources; each rank (thread) has its own context.
struct rank_resources {
    rank_resources(int ranks, std::size_t slot_bytes, int cq_entries = 256)
        : ctx(test::open_test_device()), port(ctx), pd(ctx), cq(ctx, cq_entries), slot(slot_bytes),
          inbox(pd, slot_bytes * static_cast<std::size_t>(ranks)),
          outbox(pd, slot_bytes * static_cast<std::size_t>(ranks)) {}
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    rx::completion_queue<rx::busy_poll> cq;
    std::size_t slot;
    test::buffer inbox, outbox;
    rx::local_span<std::byte> in(int r) const { return inbox.span().subspan(static_cast<std::size_t>(r) * slot, slot); }
    rx::local_span<std::byte> out(int r) const {
        return outbox.span().subspan(static_cast<std::size_t>(r) * slot, slot);
    }
};

// The exception's dump_detailed at level 2 (or what() for another exception).
std::string describe(std::exception_ptr const& e) {
    try {
        std::rethrow_exception(e);
    } catch (rx::error const& x) {
        std::ostringstream os;
        x.dump_detailed(os, "E:", 2);
        return os.str();
    } catch (std::exception const& x) {
        return x.what();
    }
}

// Every rank must have returned: fails with each rank's error otherwise.
void require_all_returned(std::vector<std::exception_ptr> const& errors) {
    for (std::size_t r = 0; r < errors.size(); ++r)
        if (errors[r]) FAIL("rank " << r << " threw:\n" << describe(errors[r]));
}

// Each rank sends one message to the next rank in a ring and checks the one from the previous.
void ring_exchange(rx::thread_bootstrap& boot, rx::peer_group<rx::busy_poll>& group, rank_resources& res) {
    int const n = boot.size(), me = boot.rank();
    int const next = (me + 1) % n, prev = (me + n - 1) % n;
    group.qp(prev).post_recv(rx::recv{res.in(prev)}.id(1));
    boot.barrier();
    for (std::size_t k = 0; k < res.slot; ++k)
        res.out(next)[k] = pattern(me, next, k);
    group.qp(next).post(rx::send{res.out(next)}.id(2));
    for (int done = 0; done < 2; ++done) {
        rx::work_completion const wc = test::next_completion(res.cq, std::chrono::seconds{60});
        wc.throw_if_error();
    }
    std::size_t bad = 0;
    for (std::size_t k = 0; k < res.slot; ++k)
        bad += res.in(prev)[k] != pattern(prev, me, k) ? 1U : 0U;
    if (bad != 0) throw std::runtime_error(std::to_string(bad) + " bytes wrong from rank " + std::to_string(prev));
    boot.barrier();
}
} // namespace pg_test

TEST_CASE("peer_group over threads: 4 ranks, every pair sends, and each rank receives O(n) bytes") {
    using namespace pg_test;
    int const n = 4;
    std::size_t const bytes = 3000; // several path MTUs
    rx::thread_world world{n, std::chrono::seconds{120}};
    std::vector<std::size_t> received(n), bad(n);
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        int const me = boot.rank();
        rank_resources res(n, bytes);
        test::counting_bootstrap<rx::thread_bootstrap> counted{boot};
        rx::peer_group<rx::busy_poll> group{counted, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote()};
        received[static_cast<std::size_t>(me)] = counted.received;
        for (int r = 0; r < n; ++r)
            if (r != me) group.qp(r).post_recv(rx::recv{res.in(r)}.id(static_cast<std::uint64_t>(r)));
        boot.barrier();
        for (int r = 0; r < n; ++r) {
            if (r == me) continue;
            for (std::size_t k = 0; k < bytes; ++k)
                res.out(r)[k] = pattern(me, r, k);
            group.qp(r).post(rx::send{res.out(r)}.id(1000));
        }
        for (int done = 0; done < 2 * (n - 1); ++done) {
            rx::work_completion const wc = test::next_completion(res.cq, std::chrono::seconds{60});
            wc.throw_if_error();
            if (wc.wr_id() == 1000) continue;
            int const from = static_cast<int>(wc.wr_id());
            for (std::size_t k = 0; k < bytes; ++k)
                bad[static_cast<std::size_t>(me)] += res.in(from)[k] != pattern(from, me, k) ? 1U : 0U;
        }
        if (group.remote(me) != res.inbox.mr.remote()) throw std::runtime_error("remote(me) is not this rank's span");
        boot.barrier();
    });
    require_all_returned(errors);
    for (std::size_t r = 0; r < n; ++r) {
        CHECK(bad[r] == 0);
        CHECK(received[r] == bytes_per_rank(n, false));
    }
    MESSAGE("4 ranks: " << received[0] << " bytes received per rank to make the group");
}

TEST_CASE("peer_group over threads: all or nothing, every rank throws the same peer_group_error") {
    using namespace pg_test;
    int const n = 4;
    auto const bound = std::chrono::seconds{60};
    rx::thread_world world{n, bound};
    std::vector<int> failing; // the ranks expected in failures()
    std::string stage;        // what each failure's reason starts with
    std::function<void(int, rx::peer_group_options&, test::counting_bootstrap<rx::thread_bootstrap>&)> sabotage;
    SUBCASE("rank 1 cannot create its QPs (max_send_wr over the device's limit)") {
        failing = {1};
        stage = "creating its QPs";
        sabotage = [](int me, rx::peer_group_options& opt, auto&) {
            if (me == 1) opt.caps.max_send_wr = 1U << 30;
        };
    }
    SUBCASE("ranks 1 and 3 cannot create their QPs") {
        failing = {1, 3};
        stage = "creating its QPs";
        sabotage = [](int me, rx::peer_group_options& opt, auto&) {
            if (me == 1 || me == 3) opt.caps.max_send_wr = 1U << 30;
        };
    }
    SUBCASE("rank 2 builds its group with UD, the others without") {
        failing = {2};
        stage = "comparing its options with rank 0's";
        sabotage = [](int me, rx::peer_group_options& opt, auto&) { opt.with_ud = me == 2; };
    }
    SUBCASE("rank 2 receives an endpoint with GID :: from rank 0, and ibv_modify_qp refuses it") {
        failing = {2};
        stage = "connecting to rank 0: Failed routing QP";
        sabotage = [](int me, rx::peer_group_options&, test::counting_bootstrap<rx::thread_bootstrap>& counted) {
            if (me == 2) counted.tamper = test::unroutable_endpoint_from(0);
        };
    }
    SUBCASE("rank 2 receives a corrupt endpoint from rank 0 and cannot connect to it") {
        failing = {2};
        stage = "connecting to rank 0";
        sabotage = [](int me, rx::peer_group_options&, test::counting_bootstrap<rx::thread_bootstrap>& counted) {
            if (me == 2) counted.tamper = test::corrupt_endpoint_from(0);
        };
    }
    std::vector<std::string> dumps(n);
    auto const start = std::chrono::steady_clock::now();
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        int const me = boot.rank();
        rank_resources res(n, 64);
        test::counting_bootstrap<rx::thread_bootstrap> counted{boot};
        rx::peer_group_options opt;
        sabotage(me, opt, counted);
        rx::peer_group<rx::busy_poll> group{counted, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote(), opt};
    });
    auto const took = std::chrono::steady_clock::now() - start;
    CHECK(took < bound);
    for (std::size_t r = 0; r < n; ++r) {
        CAPTURE(r);
        REQUIRE_MESSAGE(errors[r], "rank " << r << " returned a group although a rank failed");
        try {
            std::rethrow_exception(errors[r]);
        } catch (rx::peer_group_error const& e) {
            CHECK(e.code() == std::errc::connection_aborted);
            REQUIRE(e.failures().size() == failing.size());
            bool const failed_here = std::find(failing.begin(), failing.end(), static_cast<int>(r)) != failing.end();
            CHECK(static_cast<bool>(e.local_error()) == failed_here);
            for (std::size_t k = 0; k < failing.size(); ++k) {
                CHECK(e.failures()[k].rank == failing[k]);
                CHECK_MESSAGE(e.failures()[k].reason.rfind(stage, 0) == 0, e.failures()[k].reason);
            }
            std::ostringstream os;
            e.dump_detailed(os, "E:", 2);
            dumps[r] = os.str();
            CHECK(dumps[r].find("rank " + std::to_string(failing.front()) + ": " + stage) != std::string::npos);
        } catch (...) {
            FAIL("rank " << r << " threw something else:\n" << describe(errors[r]));
        }
    }
    MESSAGE("every rank threw within " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                       << " ms; rank 0 printed:\n"
                                       << dumps[0]);
}

TEST_CASE("peer_group over threads at 64 ranks: the bytes each rank receives, and a ring across the mesh") {
    using namespace pg_test;
    int const n = 64;
    rx::thread_world world{n, std::chrono::seconds{300}};
    std::vector<std::size_t> received(n);
    auto const start = std::chrono::steady_clock::now();
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        rank_resources res(n, 256, 16);
        test::counting_bootstrap<rx::thread_bootstrap> counted{boot};
        rx::peer_group_options opt;
        opt.caps = {.max_send_wr = 2, .max_recv_wr = 2};
        rx::peer_group<rx::busy_poll> group{counted, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote(), opt};
        received[static_cast<std::size_t>(boot.rank())] = counted.received;
        ring_exchange(boot, group, res);
    });
    auto const took = std::chrono::steady_clock::now() - start;
    require_all_returned(errors);
    for (std::size_t r = 0; r < n; ++r)
        CHECK(received[r] == bytes_per_rank(n, false));
    MESSAGE("64 ranks (4,032 RC QPs on one device): "
            << received[0] << " bytes received per rank, made and ring in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
}

TEST_CASE("peer_group over threads with loopback: every rank reaches every rank the same way, itself included") {
    using namespace pg_test;
    int const n = 3;
    std::size_t const bytes = 2048;
    rx::thread_world world{n, std::chrono::seconds{120}};
    std::vector<std::uint64_t> counters(n);
    std::vector<std::size_t> bad(n);
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        int const me = boot.rank();
        auto const m = static_cast<std::size_t>(me);
        rank_resources res(n, bytes);
        rx::peer_group_options opt;
        opt.loopback = true;
        opt.settings.remote_access = rx::access::remote_write | rx::access::remote_read | rx::access::remote_atomic;
        rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote(), opt};
        if (!group.has_loopback()) throw std::runtime_error("no loopback");
        // A send to itself, received on the same QP.
        group.qp(me).post_recv(rx::recv{res.in(me)}.id(1));
        for (std::size_t k = 0; k < bytes; ++k)
            res.out(me)[k] = pattern(me, me, k);
        group.qp(me).post(rx::send{res.out(me)}.id(2));
        for (int done = 0; done < 2; ++done)
            (void)test::wait_ok(res.cq, std::chrono::seconds{60});
        for (std::size_t k = 0; k < bytes; ++k)
            bad[m] += res.in(me)[k] != pattern(me, me, k) ? 1U : 0U;
        // Every rank, itself included, writes its slot at every rank through qp(r) and remote(r).
        for (int r = 0; r < n; ++r) {
            for (std::size_t k = 0; k < bytes; ++k)
                res.out(r)[k] = pattern(me, r, k + 1);
            group.qp(r).post(rx::write{res.out(r), group.remote(r).subspan(m * bytes, bytes)}.id(3));
            (void)test::wait_ok(res.cq, std::chrono::seconds{60});
        }
        boot.barrier();
        for (int from = 0; from < n; ++from)
            for (std::size_t k = 0; k < bytes; ++k)
                bad[m] += res.in(from)[k] != pattern(from, me, k + 1) ? 1U : 0U;
        boot.barrier();
        // Every rank, rank 0 included, adds rank + 1 to the counter in rank 0's first word.
        if (me == 0) std::memset(res.inbox.span().data(), 0, 8);
        boot.barrier();
        auto const result = res.outbox.mr.template span<std::uint64_t>(0, 1);
        group.qp(0).post(rx::fetch_add{result, group.remote(0).first(8).as<std::uint64_t>(), m + 1}.id(4));
        (void)test::wait_ok(res.cq, std::chrono::seconds{60});
        boot.barrier();
        if (me == 0) std::memcpy(&counters[0], res.inbox.span().data(), 8);
        boot.barrier();
    });
    require_all_returned(errors);
    for (std::size_t r = 0; r < n; ++r)
        CHECK(bad[r] == 0);
    CHECK(counters[0] == n * (n + 1) / 2);
}

TEST_CASE("peer_group: qp(rank()) without loopback is refused, naming the option") {
    using namespace pg_test;
    rx::thread_world world{2, std::chrono::seconds{60}};
    std::vector<std::string> said(2);
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        rank_resources res(2, 64);
        rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq};
        try {
            (void)group.qp(boot.rank());
        } catch (rx::argument_error const& e) {
            said[static_cast<std::size_t>(boot.rank())] = e.what();
        }
    });
    require_all_returned(errors);
    for (auto const& s : said)
        CHECK(s.find("needs peer_group_options::loopback") != std::string::npos);
}

TEST_CASE("peer_group over threads: several exposed spans per rank, in the one exchange") {
    using namespace pg_test;
    int const n = 3;
    std::size_t const k = 3, bytes = 1024;
    rx::thread_world world{n, std::chrono::seconds{120}};
    std::vector<std::size_t> bad(n), received(n);
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        int const me = boot.rank();
        auto const m = static_cast<std::size_t>(me);
        rank_resources res(n, bytes);
        // Three regions, each with one slot per rank.
        std::vector<test::buffer> regions;
        std::vector<rx::remote_span<std::byte>> spans;
        regions.reserve(k);
        for (std::size_t i = 0; i < k; ++i) {
            regions.emplace_back(res.pd, bytes * n);
            spans.push_back(regions.back().mr.remote());
        }
        rx::peer_group_options opt;
        opt.settings.remote_access = rx::access::remote_write;
        test::counting_bootstrap<rx::thread_bootstrap> counted{boot};
        rx::peer_group<rx::busy_poll> group{counted, res.port, res.pd, res.cq, res.cq, rx::exposed_spans{spans}, opt};
        received[m] = counted.received;
        if (group.spans_per_rank() != k || group.remote(me, 2) != spans[2])
            throw std::runtime_error("this rank's own spans are not as exposed");
        bool refused = false;
        try {
            (void)group.remote(me, k);
        } catch (rx::argument_error const&) {
            refused = true;
        }
        if (!refused) throw std::runtime_error("remote(r, spans_per_rank()) was not refused");
        // Every rank writes its slot of every span of every other rank, a pattern per span.
        for (int r = 0; r < n; ++r) {
            if (r == me) continue;
            for (std::size_t i = 0; i < k; ++i) {
                for (std::size_t b = 0; b < bytes; ++b)
                    res.out(r)[b] = pattern(me, r, b + i);
                group.qp(r).post(rx::write{res.out(r), group.remote(r, i).subspan(m * bytes, bytes)}.id(i));
                (void)test::wait_ok(res.cq, std::chrono::seconds{60});
            }
        }
        boot.barrier();
        for (int from = 0; from < n; ++from) {
            if (from == me) continue;
            for (std::size_t i = 0; i < k; ++i) {
                auto const slot = regions[i].span().subspan(static_cast<std::size_t>(from) * bytes, bytes);
                for (std::size_t b = 0; b < bytes; ++b)
                    bad[m] += slot[b] != pattern(from, me, b + i) ? 1U : 0U;
            }
        }
        boot.barrier();
    });
    require_all_returned(errors);
    for (std::size_t r = 0; r < n; ++r) {
        CHECK(bad[r] == 0);
        CHECK(received[r] == std::size_t{n} * (16 + 32 * k + 32 + 8)); // headers, then k spans in each record
    }
}

TEST_CASE("peer_group over threads, connections on first use: a ring of 12 ranks holds 2 RC QPs per rank") {
    using namespace pg_test;
    int const n = 12;
    for (bool const first_use : {true, false}) {
        CAPTURE(first_use);
        rx::thread_world world{n, std::chrono::seconds{120}};
        std::vector<test::ring_report> reports(n);
        std::size_t rc_qps = 0;
        auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
            reports[static_cast<std::size_t>(boot.rank())] = test::peer_group_ring(boot, first_use, [&](auto const&) {
                if (boot.rank() == 0) rc_qps = test::rdma_qps_of_this_process("RC"); // every rank's, made by now
            });
        });
        pg_test::require_all_returned(errors);
        for (auto const& r : reports)
            CHECK(r.connected == (first_use ? 2U : n - 1U));
        CHECK(rc_qps == (first_use ? 2U * n : std::size_t{n} * (n - 1)));
        MESSAGE(n << " thread-ranks, " << std::string{first_use ? "on first use" : "full mesh"} << ": " << rc_qps
                  << " RC QPs in the process, group up in " << reports[0].up_ms << " ms, ring in " << reports[0].ring_ms
                  << " ms");
    }
}

TEST_CASE("peer_group, connections on first use: both sides asking at once make one QP pair") {
    using namespace pg_test;
    rx::thread_world world{2, std::chrono::seconds{60}};
    std::size_t rc_qps = 0;
    std::vector<test::ring_report> reports(2);
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        reports[static_cast<std::size_t>(boot.rank())] = test::peer_group_ring(boot, true, [&](auto const&) {
            if (boot.rank() == 0) rc_qps = test::rdma_qps_of_this_process("RC");
        });
    });
    pg_test::require_all_returned(errors);
    CHECK(reports[0].connected == 1);
    CHECK(reports[1].connected == 1);
    CHECK(rc_qps == 2);
}

TEST_CASE("peer_group, connections on first use: a peer that does not answer, one that refuses") {
    using namespace pg_test;
    using namespace std::chrono_literals;
    rx::thread_world world{2, std::chrono::seconds{60}};
    std::atomic<bool> asked{false};
    double waited_ms = 0;
    std::string timed_out, refused;
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        rx::context ctx = test::open_test_device();
        rx::end_port const port(ctx);
        rx::protection_domain pd(ctx);
        rx::completion_queue<rx::busy_poll> cq(ctx, 16);
        rx::peer_group_options opt;
        opt.connect_on_first_use = true;
        opt.first_use_timeout = 300ms;
        // Rank 1 asks the device for more work requests than it allows: it cannot make its QP.
        if (boot.rank() == 1) opt.caps.max_send_wr = 1U << 30;
        rx::peer_group<rx::busy_poll> group{boot, port, pd, cq, cq, {}, opt};
        if (boot.rank() == 0) {
            // Rank 1 waits in the barrier, not in its group: nobody answers.
            auto const t0 = std::chrono::steady_clock::now();
            try {
                (void)group.qp(1);
                timed_out = "qp(1) returned";
            } catch (rx::peer_connect_error const& e) {
                waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                timed_out = e.what();
                CHECK(e.code() == std::errc::timed_out);
                CHECK(e.peer() == 1);
            }
            CHECK_FALSE(group.connected(1));
            boot.barrier();
            // Rank 1 now answers (progress()), and refuses: its QP cannot be made.
            try {
                (void)group.qp(1);
                refused = "qp(1) returned";
            } catch (rx::peer_connect_error const& e) {
                refused = e.what();
                CHECK(e.code() == std::errc::connection_refused);
            }
            asked = true;
        } else {
            boot.barrier();
            auto const until = std::chrono::steady_clock::now() + 10s;
            while (!asked && std::chrono::steady_clock::now() < until)
                (void)group.progress();
            CHECK(asked);
            CHECK_FALSE(group.connected(0));
        }
        boot.barrier();
    });
    pg_test::require_all_returned(errors);
    MESSAGE("no answer: " << timed_out << " (after " << waited_ms << " ms)");
    MESSAGE("refused: " << refused);
    CHECK(timed_out.find("did not answer rank 0's first-use handshake within 300 ms") != std::string::npos);
    CHECK(waited_ms >= 300);
    CHECK(waited_ms < 5000); // bounded by the timeout, not by a retry loop
    CHECK(refused.find("rank 1 refused rank 0's first-use handshake") != std::string::npos);
}

TEST_CASE("peer_group, connections on first use with UD and loopback: the control QP's record comes after the UD one") {
    using namespace pg_test;
    int const n = 3;
    rx::thread_world world{n, std::chrono::seconds{60}};
    std::vector<int> heard(n, -1);
    auto const errors = test::run_ranks(world, [&](rx::thread_bootstrap& boot) {
        int const me = boot.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
        rank_resources res(n, 256);
        rx::peer_group_options opt;
        opt.with_ud = true;
        opt.loopback = true;
        opt.connect_on_first_use = true;
        rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq, {}, opt};
        if (!group.connected(me) || group.connected(next) || group.connected(prev))
            throw std::runtime_error("before first use: only the loopback QP may be connected");
        // The handshakes go to the control QPs named after the UD endpoints in the records.
        (void)group.qp(next);
        (void)group.qp(prev);
        if (!group.connected(next) || !group.connected(prev)) throw std::runtime_error("not connected after qp()");
        group.ud_qp().post_recv(rx::recv{res.in(prev)}.id(7));
        boot.barrier();
        res.out(next)[0] = static_cast<std::byte>(me);
        group.ud_qp().post(rx::send{res.out(next).first(1)}.id(8).to(group.ah(next), group.ud_qpn(next), group.qkey()));
        for (int done = 0; done < 2; ++done) {
            rx::work_completion const wc = test::next_completion(res.cq, std::chrono::seconds{30});
            wc.throw_if_error();
            if (wc.wr_id() == 7) heard[static_cast<std::size_t>(me)] = static_cast<int>(res.in(prev)[40]);
        }
        boot.barrier();
    });
    require_all_returned(errors);
    for (int r = 0; r < n; ++r)
        CHECK(heard[static_cast<std::size_t>(r)] == (r + n - 1) % n);
}

TEST_CASE("first-use message: its wire form, and what is not one") {
    namespace d = rdmacxx::detail;
    rx::endpoint a{0, 0x123456, 0x654321, rx::gid::parse("fe80::1"), IBV_MTU_1024};
    rx::endpoint b{0, 0x42, 0x77, rx::gid::parse("fe80::2"), IBV_MTU_1024};
    std::array<std::byte, d::first_use_message::bytes> wire{};
    d::first_use_message const m{d::first_use_message::reply, 513, 3, 9, a, b};
    m.write(wire.data());
    CHECK(wire[0] == std::byte{'R'});
    CHECK(wire[5] == std::byte{2});
    CHECK(wire[6] == std::byte{2}); // 513, big-endian
    CHECK(wire[7] == std::byte{1});
    auto const back = d::first_use_message::read(wire);
    REQUIRE(back);
    CHECK(back->what == d::first_use_message::reply);
    CHECK(back->attempt == 513);
    CHECK(back->from == 3);
    CHECK(back->to == 9);
    CHECK(back->qp == a);
    CHECK(back->answers == b);
    auto bad = wire;
    bad[5] = std::byte{9}; // no such kind
    CHECK_FALSE(d::first_use_message::read(bad));
    bad = wire;
    bad[4] = std::byte{2}; // another version
    CHECK_FALSE(d::first_use_message::read(bad));
    CHECK_FALSE(d::first_use_message::read(std::span{wire}.first(d::first_use_message::bytes - 1)));
    bad = wire;
    bad[16 + 8] = std::byte{0x80}; // a reserved bit of the QPN
    CHECK_FALSE(d::first_use_message::read(bad));
}
