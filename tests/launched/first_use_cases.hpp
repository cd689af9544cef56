#pragma once
// The peer group's ring with and without connections on first use, for ranks started by a
// launcher, over any bootstrap engine (`test::launched_bootstrap`, named by the including file as
// for peer_group_cases.hpp: tests/mpi, tests/pmix), with any number of ranks
// (tools/nodes-selftest: 3 ranks, then 12 ranks on 3 nodes over MPI, each case in its own run so
// that each process's memory is its case's): every rank checks the bytes from its previous rank
// and counts its own RC QPs (`rdma resource show qp`); rank 0 prints every rank's figures.
#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/bootstrap/peer_group.hpp"

#include "../device/first_use_support.hpp"
#include "../device/fixture.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {
namespace rx = rdmacxx;

// VmRSS of this process, in KiB.
std::uint32_t rss_kib() {
    std::ifstream in{"/proc/self/status"};
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmRSS:", 0) == 0) return static_cast<std::uint32_t>(std::stoul(line.substr(6)));
    return 0;
}

// One rank's figures on the wire: RC QPs, RSS (KiB), group up and ring (microseconds).
struct figures {
    std::uint32_t rc_qps = 0, rss = 0, up_us = 0, ring_us = 0;
};

void ring_case(bool first_use) {
    test::launched_bootstrap boot;
    int const n = boot.size();
    REQUIRE(n >= 2);
    figures mine;
    test::ring_report const r = test::peer_group_ring(boot, first_use, [&](test::ring_report const& rep) {
        mine.rc_qps = static_cast<std::uint32_t>(test::rdma_qps_of_this_process("RC"));
        mine.rss = rss_kib();
        mine.up_us = static_cast<std::uint32_t>(rep.up_ms * 1000);
        mine.ring_us = static_cast<std::uint32_t>(rep.ring_ms * 1000);
    });
    auto const want = static_cast<std::size_t>(first_use ? std::min(2, n - 1) : n - 1);
    CHECK(r.connected == want);
    CHECK(mine.rc_qps == want);
    std::vector<figures> all(static_cast<std::size_t>(n));
    boot.allgather(std::as_bytes(std::span{&mine, 1}), std::as_writable_bytes(std::span{all}));
    if (boot.rank() != 0) return;
    auto [lo, hi] =
        std::minmax_element(all.begin(), all.end(), [](auto const& a, auto const& b) { return a.rss < b.rss; });
    std::uint32_t up = 0, ring = 0, qps_lo = all[0].rc_qps, qps_hi = all[0].rc_qps;
    for (auto const& f : all) {
        up = std::max(up, f.up_us);
        ring = std::max(ring, f.ring_us);
        qps_lo = std::min(qps_lo, f.rc_qps);
        qps_hi = std::max(qps_hi, f.rc_qps);
    }
    std::cout << "peer_group ring, " << n << " ranks, " << (first_use ? "connections on first use" : "full mesh")
              << ": RC QPs per rank " << qps_lo << "–" << qps_hi << ", RSS per rank " << lo->rss << "–" << hi->rss
              << " KiB, group up in " << up / 1000.0 << " ms (slowest rank), first use and ring in " << ring / 1000.0
              << " ms\n";
}
} // namespace

TEST_CASE("peer_group ring, connections on first use") { ring_case(true); }

TEST_CASE("peer_group ring, full mesh") { ring_case(false); }
