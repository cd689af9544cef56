// The runner of the PMIx tests: doctest in a process that mpirun (or any PMIx launcher) started
// and that never calls MPI_Init; its only link to the other ranks is PMIx. Every rank runs every
// test case (they are collective); rank 0 prints doctest's report, the others print only what
// failed on them. The exit status is non-zero when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "rdmacxx/bootstrap/pmix.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

int main(int argc, char** argv) {
    try {
        // Held for the whole run: PMIx stays initialised between the test cases' own bootstraps.
        rdmacxx::pmix_bootstrap boot;
        doctest::Context context(argc, argv);
        context.setOption("no-colors", true);                     // the launcher may hand the ranks a terminal
        if (boot.rank() != 0) context.setOption("minimal", true); // failures only
        std::array<std::byte, 1> const failed{std::byte{context.run() != 0 ? std::uint8_t{1} : std::uint8_t{0}}};
        std::vector<std::byte> every(static_cast<std::size_t>(boot.size()));
        boot.allgather(failed, every);
        bool const any_failed = std::any_of(every.begin(), every.end(), [](std::byte b) { return b != std::byte{0}; });
        if (boot.rank() == 0 && any_failed && failed[0] == std::byte{0})
            std::fprintf(stderr, "[pmix] a test case failed on another rank (see its output above)\n");
        return any_failed ? 1 : 0;
    } catch (std::exception const& e) {
        std::fprintf(stderr, "[pmix] %s\n", e.what());
        return 2;
    }
}
