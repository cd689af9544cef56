#pragma once
// The bootstrap and peer-group test cases for ranks that are processes started by a launcher
// (mpirun; 2 or more ranks, on one node or across nodes), over any bootstrap engine: every rank
// connected to every other, every byte checked. One translation unit per engine includes this
// after naming its engine `test::launched_bootstrap` (a `rdmacxx::bootstrap` whose default
// constructor takes every launched process as a rank): tests/mpi over MPI, tests/pmix over PMIx.
#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/bootstrap/peer_group.hpp"

#include "../device/bootstrap_support.hpp"
#include "../device/fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <type_traits>
#include <vector>

namespace {
namespace rx = rdmacxx;
using test::launched_bootstrap;
static_assert(rx::bootstrap<launched_bootstrap> && std::is_default_constructible_v<launched_bootstrap>);

// The next completion of `cq` within 30 s (a peer that died must fail the test, not hang it).
template <class Completion>
rx::work_completion next(rx::completion_queue<Completion>& cq) {
    std::optional<rx::work_completion> wc = cq.wait_one(std::chrono::seconds{30});
    if (!wc) FAIL("no completion within 30 s");
    wc->throw_if_error();
    return *wc;
}

std::byte pattern(int from, int to, std::size_t k) {
    return static_cast<std::byte>((k * 29 + static_cast<std::size_t>(from) * 11 + static_cast<std::size_t>(to) * 3) &
                                  0xff);
}

// One rank's resources: a device, a PD, a CQ and a buffer with one slot per rank.
template <class Completion>
struct rank_resources {
    explicit rank_resources(int ranks, std::size_t slot_bytes)
        : ctx(test::open_test_device()), port(ctx), pd(ctx), cq(ctx, 1024), slot(slot_bytes),
          inbox(pd, slot_bytes * static_cast<std::size_t>(ranks)),
          outbox(pd, slot_bytes * static_cast<std::size_t>(ranks)) {}
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    rx::completion_queue<Completion> cq;
    std::size_t slot;
    test::buffer inbox, outbox;
    rx::local_span<std::byte> in(int r) const { return inbox.span().subspan(static_cast<std::size_t>(r) * slot, slot); }
    rx::local_span<std::byte> out(int r) const {
        return outbox.span().subspan(static_cast<std::size_t>(r) * slot, slot);
    }
};
} // namespace

TEST_CASE("bootstrap: rank, size, allgather in rank order, barrier") {
    launched_bootstrap boot;
    REQUIRE(boot.size() >= 2);
    REQUIRE(boot.rank() >= 0);
    REQUIRE(boot.rank() < boot.size());
    std::array<std::byte, 3> mine{std::byte{0xab}, static_cast<std::byte>(boot.rank()), std::byte{0xcd}};
    std::vector<std::byte> all(3 * static_cast<std::size_t>(boot.size()));
    boot.allgather(mine, all);
    for (int r = 0; r < boot.size(); ++r) {
        CHECK(all[3 * static_cast<std::size_t>(r)] == std::byte{0xab});
        CHECK(all[3 * static_cast<std::size_t>(r) + 1] == static_cast<std::byte>(r));
    }
    std::vector<std::byte> wrong(all.size() - 1);
    CHECK_THROWS_AS(boot.allgather(mine, wrong), rx::argument_error); // refused before the engine sees it
    boot.barrier();
}

TEST_CASE("bootstrap: alltoall delivers each rank the block every rank meant for it") {
    launched_bootstrap boot;
    auto const n = static_cast<std::size_t>(boot.size());
    auto const me = static_cast<std::size_t>(boot.rank());
    std::vector<std::byte> blocks(2 * n), column(2 * n);
    for (std::size_t to = 0; to < n; ++to) {
        blocks[2 * to] = static_cast<std::byte>(me);
        blocks[2 * to + 1] = static_cast<std::byte>(to + 16 * me);
    }
    boot.alltoall(blocks, column);
    for (std::size_t from = 0; from < n; ++from) {
        CHECK(column[2 * from] == static_cast<std::byte>(from));
        CHECK(column[2 * from + 1] == static_cast<std::byte>(me + 16 * from));
    }
    std::vector<std::byte> odd(2 * n + 1), shorter(2 * n - 1);
    CHECK_THROWS_AS(boot.alltoall(odd, odd), rx::argument_error); // refused before the engine sees it
    CHECK_THROWS_AS(boot.alltoall(blocks, shorter), rx::argument_error);
    boot.barrier();
}

TEST_CASE_TEMPLATE("peer_group: sends of several path MTUs between every pair of ranks", Completion, rx::busy_poll,
                   rx::event_driven) {
    launched_bootstrap boot;
    int const n = boot.size(), me = boot.rank();
    std::size_t const bytes = 5000; // several path MTUs (1024 on rxe over a 1500-byte netdev)
    rank_resources<Completion> res(n, bytes);
    rx::peer_group<Completion> group{boot, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote()};
    REQUIRE(group.rank() == me);
    REQUIRE(group.size() == n);
    CHECK_THROWS_AS((void)group.qp(me), rx::argument_error);
    CHECK_THROWS_AS((void)group.qp(n), rx::argument_error);
    for (int r = 0; r < n; ++r)
        if (r != me) group.qp(r).post_recv(rx::recv{res.in(r)}.id(static_cast<std::uint64_t>(r)));
    boot.barrier();
    for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        for (std::size_t k = 0; k < bytes; ++k)
            res.out(r)[k] = pattern(me, r, k);
        group.qp(r).post(rx::send{res.out(r)}.id(1000));
    }
    int received = 0;
    for (int done = 0; done < 2 * (n - 1); ++done) {
        rx::work_completion const wc = next(res.cq);
        if (wc.wr_id() == 1000) continue;
        ++received;
        int const from = static_cast<int>(wc.wr_id());
        CHECK(wc.byte_len() == bytes);
        std::size_t bad = 0;
        for (std::size_t k = 0; k < bytes; ++k)
            bad += res.in(from)[k] != pattern(from, me, k) ? 1U : 0U;
        CHECK_MESSAGE(bad == 0, "from rank " << from);
    }
    CHECK(received == n - 1);
    boot.barrier();
}

TEST_CASE("peer_group: RDMA write, read and atomics through every rank's exposed span") {
    launched_bootstrap boot;
    int const n = boot.size(), me = boot.rank();
    std::size_t const bytes = 4096;
    rank_resources<rx::busy_poll> res(n, bytes);
    rx::peer_group_options opt;
    opt.settings.remote_access = rx::access::remote_write | rx::access::remote_read | rx::access::remote_atomic;
    rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote(), opt};
    REQUIRE(group.remote(me).address() == res.inbox.mr.remote().address());
    // Every rank writes its slot at every other rank, then reads it back.
    for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        CHECK(group.remote(r).size_bytes() == bytes * static_cast<std::size_t>(n));
        for (std::size_t k = 0; k < bytes; ++k)
            res.out(r)[k] = pattern(me, r, k);
        auto const target = group.remote(r).subspan(static_cast<std::size_t>(me) * bytes, bytes);
        group.qp(r).post(rx::write{res.out(r), target}.id(1));
        CHECK(next(res.cq).wr_id() == 1);
        std::memset(res.out(r).data(), 0, bytes);
        group.qp(r).post(rx::read{res.out(r), target}.id(2));
        CHECK(next(res.cq).wr_id() == 2);
        std::size_t bad = 0;
        for (std::size_t k = 0; k < bytes; ++k)
            bad += res.out(r)[k] != pattern(me, r, k) ? 1U : 0U;
        CHECK_MESSAGE(bad == 0, "read back from rank " << r);
    }
    boot.barrier();
    for (int from = 0; from < n; ++from) {
        if (from == me) continue;
        std::size_t bad = 0;
        for (std::size_t k = 0; k < bytes; ++k)
            bad += res.in(from)[k] != pattern(from, me, k) ? 1U : 0U;
        CHECK_MESSAGE(bad == 0, "written by rank " << from);
    }
    boot.barrier();
    // Every rank but 0 adds rank + 1 to a counter in rank 0's first slot: 0 sees the sum.
    auto const counter = res.in(0).first(8);
    std::memset(res.inbox.span().data(), 0, 8);
    boot.barrier();
    if (me != 0) {
        auto const result = res.outbox.mr.template span<std::uint64_t>(0, 1);
        auto const target = group.remote(0).first(8).as<std::uint64_t>(); // checked: whole words, aligned
        group.qp(0).post(rx::fetch_add{result, target, static_cast<std::uint64_t>(me + 1)}.id(3));
        CHECK(next(res.cq).wr_id() == 3);
    }
    boot.barrier();
    if (me == 0) {
        std::uint64_t sum = 0;
        std::memcpy(&sum, counter.data(), 8);
        CHECK(sum == static_cast<std::uint64_t>(n * (n + 1) / 2 - 1));
    }
    boot.barrier();
}

TEST_CASE("peer_group with UD: one UD QP per rank and an address handle per peer") {
    launched_bootstrap boot;
    int const n = boot.size(), me = boot.rank();
    std::size_t const bytes = 512;
    rank_resources<rx::busy_poll> res(n, bytes + 40);
    rx::peer_group_options opt;
    opt.with_ud = true;
    rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq, {}, opt};
    REQUIRE(group.has_ud());
    for (int r = 0; r < n; ++r)
        if (r != me) group.ud_qp().post_recv(rx::recv{res.in(r)}.id(static_cast<std::uint64_t>(r)));
    boot.barrier();
    for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        auto const msg = res.out(r).first(bytes);
        for (std::size_t k = 0; k < bytes; ++k)
            msg[k] = pattern(me, r, k);
        group.ud_qp().post(
            rx::send_imm{msg, static_cast<std::uint32_t>(me)}.id(1000).to(group.ah(r), group.ud_qpn(r), group.qkey()));
    }
    int received = 0;
    for (int done = 0; done < 2 * (n - 1); ++done) {
        rx::work_completion const wc = next(res.cq);
        if (wc.wr_id() == 1000) continue;
        ++received;
        REQUIRE(wc.has_imm());
        int const from = static_cast<int>(wc.imm_data());
        REQUIRE(wc.byte_len() == bytes + 40);
        auto const payload = rx::ud_payload(res.in(static_cast<int>(wc.wr_id())).span(), wc);
        std::size_t bad = 0;
        for (std::size_t k = 0; k < bytes; ++k)
            bad += payload[k] != pattern(from, me, k) ? 1U : 0U;
        CHECK_MESSAGE(bad == 0, "UD from rank " << from);
    }
    CHECK(received == n - 1);
    boot.barrier();
}

TEST_CASE("peer_group: the group and its parents move and are move-assigned into live ones, and every pair still "
          "exchanges") {
    // Each object moves to a new heap address (the old one freed), then is move-assigned into a
    // live one of its kind (see docs/ownership.md).
    auto relocate = [](auto& p) { p = std::make_unique<std::remove_reference_t<decltype(*p)>>(std::move(*p)); };
    auto assign_into = [](auto& p, auto live) {
        *live = std::move(*p);
        p = std::move(live);
    };
    launched_bootstrap boot;
    int const n = boot.size(), me = boot.rank();
    std::size_t const bytes = 256;
    auto ctx = std::make_unique<rx::context>(test::open_test_device());
    auto port = std::make_unique<rx::end_port>(*ctx);
    auto pd = std::make_unique<rx::protection_domain>(*ctx);
    auto cq = std::make_unique<rx::completion_queue<rx::busy_poll>>(*ctx, 1024);
    auto inbox = std::make_unique<test::buffer>(*pd, bytes * static_cast<std::size_t>(n));
    auto outbox = std::make_unique<test::buffer>(*pd, bytes * static_cast<std::size_t>(n));
    auto make_group = [&] {
        return std::make_unique<rx::peer_group<rx::busy_poll>>(boot, *port, *pd, *cq, *cq, inbox->mr.remote(),
                                                               rx::peer_group_options{.with_ud = true});
    };
    auto group = make_group();
    auto slot = [&](test::buffer& b, int r) { return b.span().subspan(static_cast<std::size_t>(r) * bytes, bytes); };
    auto round = [&](std::string const& when, std::uint64_t seq) {
        CAPTURE(when);
        for (int r = 0; r < n; ++r)
            if (r != me) group->qp(r).post_recv(rx::recv{slot(*inbox, r)}.id(static_cast<std::uint64_t>(r)));
        boot.barrier();
        for (int r = 0; r < n; ++r) {
            if (r == me) continue;
            for (std::size_t k = 0; k < bytes; ++k)
                slot(*outbox, r)[k] = pattern(me, r, k + seq);
            group->qp(r).post(rx::send{slot(*outbox, r)}.id(1000));
            CHECK(&group->qp(r).pd() == pd.get());
        }
        int received = 0;
        for (int done = 0; done < 2 * (n - 1); ++done) {
            rx::work_completion const wc = next(*cq);
            if (wc.wr_id() == 1000) continue;
            ++received;
            int const from = static_cast<int>(wc.wr_id());
            std::size_t bad = 0;
            for (std::size_t k = 0; k < bytes; ++k)
                bad += slot(*inbox, from)[k] != pattern(from, me, k + seq) ? 1U : 0U;
            CHECK_MESSAGE(bad == 0, "from rank " << from);
        }
        CHECK(received == n - 1);
        CHECK(group->has_ud());
        boot.barrier();
    };
    round("as made", 0);
    relocate(ctx);
    relocate(port);
    relocate(pd);
    relocate(cq);
    relocate(group);
    round("after the group and its parents moved to new addresses", 1);
    assign_into(group, make_group()); // a live group, built collectively, replaced by the first
    assign_into(pd, std::make_unique<rx::protection_domain>(*ctx));
    assign_into(cq, std::make_unique<rx::completion_queue<rx::busy_poll>>(*ctx, 16));
    assign_into(port, std::make_unique<rx::end_port>(*ctx));
    round("after the group and its parents were move-assigned into live ones", 2);
    group.reset();
    boot.barrier();
}

TEST_CASE("peer_group: each rank receives O(n) bytes while the group is made (counted)") {
    launched_bootstrap engine;
    test::counting_bootstrap<launched_bootstrap> boot{engine};
    auto const n = static_cast<std::size_t>(engine.size());
    rank_resources<rx::busy_poll> res(engine.size(), 64);
    auto const start = std::chrono::steady_clock::now();
    rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote()};
    auto const took = std::chrono::steady_clock::now() - start;
    // n 16-byte headers and n 32-byte records (allgathers), one 32-byte endpoint per rank
    // (alltoall), n 8-byte statuses (allgather): see docs/multi-node.md.
    CHECK(boot.received == n * (16 + 32 + 32 + 8));
    CHECK(boot.collectives == 4);
    if (engine.rank() == 0)
        MESSAGE(n << " ranks: " << boot.received << " bytes received per rank; the group came up in "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms on rank 0");
    engine.barrier();
}

// Makes a group in which `sabotage` breaks one rank's part; every rank must throw the same
// peer_group_error naming `failed` with a reason starting with `stage`, within `bound`.
template <class Sabotage>
void all_or_nothing(int failed, std::string const& stage, Sabotage sabotage, int spans_on_failed = 1) {
    launched_bootstrap engine;
    REQUIRE(engine.size() >= 3);
    int const me = engine.rank();
    test::counting_bootstrap<launched_bootstrap> boot{engine};
    rank_resources<rx::busy_poll> res(engine.size(), 64);
    rx::peer_group_options opt;
    sabotage(me, opt, boot);
    std::vector<rx::remote_span<std::byte>> spans(me == failed ? static_cast<std::size_t>(spans_on_failed) : 1U,
                                                  res.inbox.mr.remote());
    auto const bound = std::chrono::seconds{60};
    auto const start = std::chrono::steady_clock::now();
    bool threw = false;
    try {
        rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq, rx::exposed_spans{spans}, opt};
    } catch (rx::peer_group_error const& e) {
        threw = true;
        REQUIRE(e.failures().size() == 1);
        CHECK(e.failures()[0].rank == failed);
        CHECK_MESSAGE(e.failures()[0].reason.rfind(stage, 0) == 0, e.failures()[0].reason);
        CHECK(static_cast<bool>(e.local_error()) == (me == failed));
        std::ostringstream os;
        e.dump_detailed(os, "E: rank " + std::to_string(me) + ":", 1);
        std::cout << os.str() << std::flush; // every rank prints its error, as an application would
    }
    auto const took = std::chrono::steady_clock::now() - start;
    CHECK_MESSAGE(threw, "rank " << me << " returned a group although rank " << failed << " failed");
    CHECK(took < bound);
    if (me == 0)
        MESSAGE("every rank threw; rank 0 within "
                << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
    engine.barrier(); // and every rank goes on: the next test case runs on the same ranks
}

TEST_CASE("peer_group all or nothing: rank 1 cannot create its QPs, every rank throws naming it") {
    all_or_nothing(1, "creating its QPs", [](int me, rx::peer_group_options& opt, auto&) {
        if (me == 1) opt.caps.max_send_wr = 1U << 30; // over the device's limit, on rank 1 only
    });
}

TEST_CASE("peer_group all or nothing: rank 2 receives an endpoint with GID :: and ibv_modify_qp refuses to connect "
          "it, every rank throws") {
    all_or_nothing(2, "connecting to rank 0: Failed routing QP", [](int me, rx::peer_group_options&, auto& boot) {
        if (me == 2) boot.tamper = test::unroutable_endpoint_from(0);
    });
}

TEST_CASE("peer_group all or nothing: rank 1 exposes two spans where the others expose one, every rank throws") {
    all_or_nothing(
        1, "comparing its options with rank 0's", [](int, rx::peer_group_options&, auto&) {}, 2);
}

TEST_CASE("peer_group with loopback: every rank, rank 0 included, adds to rank 0's counter through qp(0)") {
    launched_bootstrap boot;
    int const n = boot.size(), me = boot.rank();
    rank_resources<rx::busy_poll> res(n, 64);
    rx::peer_group_options opt;
    opt.loopback = true;
    opt.settings.remote_access = rx::access::remote_atomic;
    rx::peer_group<rx::busy_poll> group{boot, res.port, res.pd, res.cq, res.cq, res.inbox.mr.remote(), opt};
    REQUIRE(group.has_loopback());
    std::memset(res.inbox.span().data(), 0, 8);
    boot.barrier();
    auto const result = res.outbox.mr.template span<std::uint64_t>(0, 1);
    group.qp(0).post(
        rx::fetch_add{result, group.remote(0).first(8).as<std::uint64_t>(), static_cast<std::uint64_t>(me + 1)}.id(5));
    CHECK(next(res.cq).wr_id() == 5);
    boot.barrier();
    if (me == 0) {
        std::uint64_t sum = 0;
        std::memcpy(&sum, res.inbox.span().data(), 8);
        CHECK(sum == static_cast<std::uint64_t>(n * (n + 1) / 2));
    }
    boot.barrier();
}
