// The PMIx bootstrap and the peer group, run by mpirun as a PMIx launcher (tests/pmix/main.cpp;
// no MPI in the process): the launched-rank test cases over the job's PMIx namespace.
#include "rdmacxx/bootstrap/pmix.hpp"

namespace test {
using launched_bootstrap = rdmacxx::pmix_bootstrap;
} // namespace test

#include "../launched/peer_group_cases.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

TEST_CASE("pmix_bootstrap: PMIx initialisations are counted: a second bootstrap comes and goes, a moved one "
          "carries on, a moved-from one refuses") {
    namespace rx = rdmacxx;
    rx::pmix_bootstrap first;
    REQUIRE(first.size() >= 2);
    CHECK(first.timeout() == std::chrono::seconds{60});
    auto const n = static_cast<std::size_t>(first.size());
    std::array<std::byte, 2> mine{std::byte{0x5a}, static_cast<std::byte>(first.rank())};
    std::vector<std::byte> all(2 * n);
    {
        rx::pmix_bootstrap second{std::chrono::seconds{30}};
        CHECK(second.rank() == first.rank());
        CHECK(second.size() == first.size());
        second.allgather(mine, all);
    } // its PMIx_Finalize leaves the first one's initialisation standing
    rx::pmix_bootstrap moved{std::move(first)};
    std::fill(all.begin(), all.end(), std::byte{0});
    moved.allgather(mine, all);
    for (std::size_t r = 0; r < n; ++r)
        CHECK(all[2 * r + 1] == static_cast<std::byte>(r));
    CHECK_THROWS_AS(first.barrier(), rx::bootstrap_error); // NOLINT(bugprone-use-after-move): on purpose
    CHECK_THROWS_AS((rx::pmix_bootstrap{std::chrono::seconds{0}}), rx::argument_error);
    moved.barrier();
}
